"""A run read at a coarser timing resolution (``--timing-resolution-ms R``): every timing tolerance
allows R more, and only R more; the default (0) changes nothing; a scenario whose gate's tolerance
R reaches is refused in one line; ``timing: good to N ms`` adds R and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.declare.scenario import RunSettings, Scenario
from loadtests.errors import UsageError
from loadtests.judge.causes import ProxyTimeouts, proxy_timeouts
from loadtests.judge.gates import Expect, GateResult, KeepAliveCovered
from loadtests.record.lag import LAG_COLUMNS, RESOLUTION_COLUMN
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import Recorder
from loadtests.record.run_dir import RunDir, RunRecord
from loadtests.run.judging import JudgeOptions, judge
from tests.loadtests.tables import raw_stream, table

pytestmark = pytest.mark.fast

START = 1_000.0
GAP_RULE = Expect("gaps_short", where=None, require="max_gap_s <= 0.5", resolution_s=0.12)
"""A timing gate whose tolerance is 120 ms (the smallest a shipped gate relies on)."""


def run_with_a_late_gap(path: Path, stalled_s: float) -> RunDir:
    """20 streams within ``GAP_RULE`` and one that breaks it while the harness stalled ``stalled_s``
    (its ``harness_lag_max_s``); the loop otherwise 1 ms late at every 10 ms sample."""
    recorder = Recorder()
    for index in range(21):
        row = StreamTracker(RequestPlan(f"r{index}", "n", "completions"), START).finish(0.8)
        row.status, row.outcome, row.max_gap_s, row.harness_lag_max_s = 200, "ok", 0.1, 0.001
        if index == 20:
            row.max_gap_s, row.harness_lag_max_s = 0.7, stalled_s
        recorder.add(row, None)
    batch = recorder.take_batch()
    samples = [("local", START + 0.01 * i, 0.0, 0.001) for i in range(1, 80)]
    batch["lag"] = {column: [sample[i] for sample in samples] for i, column in enumerate(LAG_COLUMNS)}
    run = RunDir(path)
    RunWriter(run).write_batch(batch)
    return run


def judged(tmp_path: Path, name: str, stalled_s: float, resolution_ms: float | None) -> tuple[GateResult, list[str]]:
    """``GAP_RULE``'s result and the console lines of a run whose settings record ``resolution_ms``
    (None: a run recorded before the option)."""
    run = run_with_a_late_gap(tmp_path / f"s-2026010{name}T000000Z", stalled_s)
    settings: dict[str, Any] = {"proxy": "none"}
    if resolution_ms is not None:
        settings["timing_resolution_ms"] = resolution_ms
    summary = judge(RunRecord(run), JudgeOptions([GAP_RULE], scenario="s", settings=settings), html=False)
    return next(gate for gate in summary.gates if gate.name == GAP_RULE.name), summary.console_lines()


def test_a_violation_within_the_stall_plus_the_resolution_is_unjudged_and_only_within_it(tmp_path: Path) -> None:
    # Stalled 117 ms against a 120 ms tolerance: at the default resolution the violation is the server's.
    at_default, lines = judged(tmp_path, "1", 0.117, None)
    assert not at_default.passed and not at_default.skipped
    assert judged(tmp_path, "2", 0.117, 0.0)[0] == at_default  # 0 recorded: the same judgement
    timing = next(line for line in lines if line.startswith("timing: "))
    assert timing.startswith("timing: good to 1.0 ms (") and "coalesced" not in timing
    # Read at 5 ms: 117 + 5 ms reaches the tolerance, so the row may be the harness's doing.
    coarse, lines = judged(tmp_path, "3", 0.117, 5.0)
    assert coarse.passed and coarse.unjudged_rows == 1 and coarse.judged_rows == 20
    assert "stalled up to 117 ms while they were open and read at a 5 ms timing resolution" in coarse.detail
    timing = next(line for line in lines if line.startswith("timing: "))
    assert timing.startswith("timing: good to 6.0 ms (the harness's event-loop lag p99 while streams were open, ")
    assert "plus reads coalesced to 5 ms (--timing-resolution-ms)" in timing
    # The control: 110 + 5 ms falls short of the tolerance, and the violation still fails.
    beyond, _ = judged(tmp_path, "4", 0.110, 5.0)
    assert not beyond.passed and not beyond.skipped and beyond.unjudged_rows == 0


def with_resolution(rows: pd.DataFrame, resolution_s: float) -> pd.DataFrame:
    """The rows as a run read at ``resolution_s`` is judged (``run.judging`` adds the column)."""
    return rows.assign(**{RESOLUTION_COLUMN: resolution_s}) if resolution_s else rows


def keepalive_result(silence: float, resolution_s: float) -> GateResult:
    rows = table(*[raw_stream(0.9, 2) for _ in range(20)], raw_stream(silence, 0))
    return KeepAliveCovered(0.25).evaluate(with_resolution(rows, resolution_s))


def test_keepalive_covered_allows_the_resolution_and_no_more() -> None:
    """Keep-alive every 0.25 s + 0.125 s: a stream silent 378 ms with no comment is short of one at
    the default resolution; its first token stamped up to 5 ms late could make that silence, 385 ms not."""
    exact = keepalive_result(0.378, 0.0)
    assert not exact.passed and not exact.skipped and exact.unjudged_rows == 0
    coarse = keepalive_result(0.378, 0.005)
    assert coarse.passed and coarse.unjudged_rows == 1
    assert "read at a 5 ms timing resolution (--timing-resolution-ms)" in coarse.detail
    beyond = keepalive_result(0.385, 0.005)
    assert not beyond.passed and not beyond.skipped and beyond.unjudged_rows == 0


def cut_after(silence: float, resolution_s: float) -> ProxyTimeouts:
    rows = table({"status": 200, "outcome": "cut", "end_silence_s": silence, "done": False})
    found = proxy_timeouts(with_resolution(rows, resolution_s), 2.0, "none")
    assert found.timer is not None and found.timer.window[0] == pytest.approx(1.70)
    return found


def test_a_cut_just_outside_the_read_timeout_window_counts_within_the_resolution() -> None:
    """A 2 s read timeout counts cuts after 1.70-2.30 s of silence; one 3 ms short of it counts
    when reads were coalesced to 5 ms, one 10 ms short does not."""
    exact = cut_after(1.697, 0.0)
    assert (len(exact.after_headers), len(exact.other_cuts)) == (0, 1)
    coarse = cut_after(1.697, 0.005)
    assert (len(coarse.after_headers), len(coarse.other_cuts)) == (1, 0)
    assert "plus its 5 ms timing resolution: counted, as the timing gates allow" in coarse.phrase()
    beyond = cut_after(1.69, 0.005)
    assert (len(beyond.after_headers), len(beyond.other_cuts)) == (0, 1)


def settings_at(resolution_ms: float) -> RunSettings:
    return RunSettings("none", 60.0, None, (), None, timing_resolution_ms=resolution_ms)


def test_a_resolution_that_reaches_a_gates_tolerance_is_refused_in_one_line() -> None:
    scenario = Scenario(name="fine", gates=[Expect("gaps", None, "max_gap_s <= 0.02", resolution_s=0.01), GAP_RULE])
    scenario.check(settings_at(9.9))  # under the smallest tolerance: judged as asked
    with pytest.raises(UsageError) as refused:
        scenario.check(settings_at(10.0))
    assert str(refused.value) == (
        "scenario fine: --timing-resolution-ms 10 reaches gate gaps's timing tolerance of 10 ms, so that gate "
        "could never fail: give less than 10"
    )
    # The keep-alive gate the run adds counts too (0.1 s + 10% of a 0.2 s interval: 120 ms).
    with_keepalive = RunSettings("none", 60.0, 0.2, (), None, timing_resolution_ms=50.0)
    Scenario(name="coarse").check(with_keepalive)
    # A gate on statuses alone has no tolerance to reach.
    Scenario(name="statuses", gates=[Expect("ok", None, "status == 200")]).check(settings_at(50.0))


def test_a_run_says_which_read_path_read_it_and_an_older_run_says_nothing(tmp_path: Path) -> None:
    run = run_with_a_late_gap(tmp_path / "s-20260105T000000Z", 0.001)

    def lines(settings: dict[str, Any]) -> list[str]:
        summary = judge(RunRecord(run), JudgeOptions([GAP_RULE], scenario="s", settings=settings), html=False)
        return [line for line in summary.console_lines() if line.startswith("read path: ")]

    assert lines({"proxy": "none", "read_path": "compiled"}) == ["read path: compiled (loadtests.client._fastread)"]
    (python,) = lines({"proxy": "none", "read_path": "python"})
    assert python.startswith("read path: python (no compiled reader, or SSE_SOAK_PURE_PYTHON_READS=1")
    assert lines({"proxy": "none"}) == []
