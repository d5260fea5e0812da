"""Three verdicts, one rule for empty and thin evidence, and timing judged within the harness's own error."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from loadtests.cli.commands import main
from loadtests.errors import INCONCLUSIVE_EXIT_CODE
from loadtests.judge.gates import Expect, GateResult, KeepAliveCovered, RunTables, evaluate, unjudged
from loadtests.judge.summary import FAIL, INCONCLUSIVE, PASS, Causes, KeepalivePerStream, Summary
from loadtests.record.lag import STALLED_COLUMN, lag_summary
from loadtests.run.ending import how_it_ended
from tests.loadtests.tables import raw_stream, table

pytestmark = pytest.mark.fast

PASSED = GateResult("no_http_500", True, "0 HTTP 500")
FAILED = GateResult("no_inband_500", False, "3 in-band errors")
POINT_UNJUDGED = unjudged("every_stream_ok", "0/0 rows")


def summary(
    *gates: GateResult, point: list[str] | None = None, requests: int = 10, specs: Sequence[str] = (), **fields: Any
) -> Summary:
    return Summary(
        scenario="s",
        settings={},
        frame_sample_rate=1.0,
        requests=requests,
        outcomes={"ok": requests},
        http_500=0,
        inband_500=0,
        keepalive_frames=0,
        causes=Causes.from_json({}),
        latency={column: {"count": 0, "p50": None} for column in ("ttft_s", "duration_s", "max_gap_s")},
        keepalive_per_stream=KeepalivePerStream.from_json({"streams": 0, "mean": None}),
        gate_specs=[{"type": "Expect", "name": name} for name in specs],
        gates=list(gates),
        point=point,
        **fields,
    )


def test_a_gate_of_the_point_that_could_not_be_judged_makes_the_run_inconclusive() -> None:
    run = summary(PASSED, POINT_UNJUDGED, point=["every_stream_ok"])
    assert (run.verdict, run.passed, run.exit_code) == (INCONCLUSIVE, False, INCONCLUSIVE_EXIT_CODE)
    assert run.verdict_line() == (
        "verdict: INCONCLUSIVE (its point could not be judged: every_stream_ok; "
        "1/2 gates passed on 10 requests judged, 1 unjudged)"
    )


def test_an_unjudged_gate_outside_the_point_leaves_a_pass_and_a_failure_outweighs_both() -> None:
    assert summary(PASSED, POINT_UNJUDGED, point=["no_http_500"]).verdict == PASS
    failed = summary(FAILED, POINT_UNJUDGED, point=["every_stream_ok"])
    assert (failed.verdict, failed.exit_code) == (FAIL, 1)
    assert failed.verdict_line().endswith("failed: no_inband_500)")
    assert summary(PASSED, interrupted="SIGTERM at 3.0 s of 10 s").verdict == FAIL


def test_the_console_leaves_out_an_unjudged_gate_outside_the_point_and_summary_json_keeps_it() -> None:
    """``gate UNJUDGED truncation_honoured: 0/0`` on every run of a scenario that never truncates was noise."""
    nothing_truncated = unjudged("truncation_honoured", "0/0 truncated requests reported the kept token count")
    run = summary(PASSED, nothing_truncated, POINT_UNJUDGED, point=["every_stream_ok"])
    gate_lines = [line for line in run.console_lines() if line.startswith("gate ")]
    assert gate_lines == ["gate PASS no_http_500: 0 HTTP 500", "gate UNJUDGED every_stream_ok: 0/0 rows"]
    assert [gate["name"] for gate in run.to_json()["gates"]] == [
        "no_http_500",
        "truncation_honoured",
        "every_stream_ok",
    ]
    assert run.verdict_line().endswith("1/3 gates passed on 10 requests judged, 2 unjudged)")  # counted, as before
    assert summary(PASSED, nothing_truncated, point=["no_http_500"]).verdict == PASS
    lost = unjudged("requests_completed", "10 requests finished; rows lost: ...")  # of every run's point
    assert lost.line() in summary(lost, point=["no_http_500"]).console_lines()


def test_no_request_judged_is_inconclusive_and_a_summary_without_a_point_takes_its_stored_gates() -> None:
    assert summary(PASSED, requests=0).verdict == INCONCLUSIVE
    assert summary(PASSED, POINT_UNJUDGED, specs=["every_stream_ok"]).verdict == INCONCLUSIVE
    assert summary(PASSED, POINT_UNJUDGED).verdict == PASS  # not among the stored gates: not its point


def test_the_verdict_and_point_are_written_and_read_back_and_an_edited_verdict_is_not_believed() -> None:
    run = summary(PASSED, POINT_UNJUDGED, point=["every_stream_ok"])
    data = run.to_json()
    assert (data["verdict"], data["point"], data["passed"]) == (INCONCLUSIVE, ["every_stream_ok"], False)
    again = Summary.from_json({**data, "verdict": "PASS"})
    assert again.verdict == INCONCLUSIVE and again.recorded == PASS  # computed; compare reads what was recorded


def test_keepalive_covered_leaves_a_shortfall_the_harness_stall_explains_unjudged() -> None:
    stalled = {**raw_stream(2.0, 4), "harness_lag_max_s": 0.5}  # 2.0 s implies 5; 1.5 s (allowing 0.5) only 4
    rows = table(raw_stream(0.8, 2), raw_stream(1.2, 3), stalled)
    result = KeepAliveCovered(0.25).evaluate(rows)
    assert result.passed and (result.unjudged_rows, result.judged_rows) == (1, 2)
    assert "1 requests unjudged: the harness stalled up to 500 ms while they were open" in result.detail
    thin = evaluate(RunTables(rows), [KeepAliveCovered(0.25)], max_unjudged_share=0.25)[-1]
    assert thin.unjudged and not thin.passed and "1 of 3 unjudged, over the 25% allowed" in thin.detail
    not_explained = {**raw_stream(2.0, 1), "harness_lag_max_s": 0.5}  # 1.5 s still implies 4
    assert not KeepAliveCovered(0.25).evaluate(table(not_explained)).passed  # the failure survives the allowance


def test_stalls_that_add_up_excuse_a_shortfall_no_single_one_explains() -> None:
    """vLLM's VM froze in back-to-back stalls of about half a second: a stream silent 2.1 s with
    no keep-alive, during which the harness was stalled 1.6 s in all, cannot be blamed on the server."""

    def with_stalls(rows: pd.DataFrame, *seconds: float) -> pd.DataFrame:
        rows[STALLED_COLUMN] = list(seconds)
        return rows

    frozen = {**raw_stream(2.1, 0), "harness_lag_max_s": 0.55}
    result = KeepAliveCovered(1.0).evaluate(with_stalls(table(frozen, raw_stream(2.5, 2)), 1.6, 0.0))
    assert result.passed and (result.unjudged_rows, result.judged_rows) == (1, 1)
    assert "the harness stalled up to 1600 ms while they were open" in result.detail
    assert not KeepAliveCovered(1.0).evaluate(with_stalls(table(frozen), 0.6)).passed  # 1.5 s still implies 1
    gap = Expect("gap", where=None, require="max_gap_s <= 0.75", resolution_s=0.25)
    spread = {"status": 200, "outcome": "ok", "max_gap_s": 0.9, "harness_lag_max_s": 0.1}
    steady = {"status": 200, "outcome": "ok", "max_gap_s": 0.2}
    excused = gap.evaluate(with_stalls(table(spread, steady), 0.3, 0.0))
    assert excused.passed and excused.unjudged_rows == 1
    assert not gap.evaluate(with_stalls(table(spread, steady), 0.2, 0.0)).passed


def test_an_expect_with_a_resolution_excuses_rows_the_harness_stalled_through() -> None:
    rows = table(
        {"status": 200, "outcome": "ok", "max_gap_s": 0.9, "harness_lag_max_s": 0.4},
        {"status": 200, "outcome": "ok", "max_gap_s": 0.2},
    )
    strict = Expect("gap", where=None, require="max_gap_s <= 0.75")
    assert not strict.evaluate(rows).passed
    lenient = Expect("gap", where=None, require="max_gap_s <= 0.75", resolution_s=0.25)
    result = lenient.evaluate(rows)
    assert result.passed and result.unjudged_rows == 1 and "r0" in result.detail
    assert "resolution_s" not in strict.spec() and lenient.spec()["resolution_s"] == 0.25


def test_the_lag_is_a_measurement_unless_a_limit_is_set() -> None:
    lag = pd.DataFrame({"worker": ["local"] * 3, "lag_s": [0.001, 0.002, 0.020], "time": [0.0, 1.0, 2.0]})
    measured = lag_summary(lag)
    assert "limit_ms" not in measured and "seconds_above_limit" not in measured["by_worker"]["local"]
    assert lag_summary(lag, 5.0)["seconds_above_limit"] == 0.02


def test_ended_says_how_long_the_load_ran_when_start_up_took_part_of_the_run_time() -> None:
    assert how_it_ended(100.0, 100.1, 120.0, 20.0, []) == ("run time of 20 s reached", None)
    slow = how_it_ended(100.0, 102.3, 120.0, 20.0, [])
    assert slow == ("run time of 20 s reached (load ran 17.7 s: the test's start-up took 2.3 s of it)", None)
    assert how_it_ended(100.0, 100.1, 105.0, 20.0, [("SIGTERM", 105.0)])[1] == "SIGTERM at 5.0 s of 20 s"
    assert how_it_ended(100.0, 100.1, 110.0, None, []) == ("stopped at 10.0 s", None)


def test_compare_says_inconclusive_with_its_own_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, new = tmp_path / "base.json", tmp_path / "new.json"
    base.write_text(json.dumps(summary(PASSED, point=["no_http_500"]).to_json()))
    new.write_text(json.dumps(summary(PASSED, POINT_UNJUDGED, point=["every_stream_ok"]).to_json()))
    with pytest.raises(SystemExit) as exited:
        main(["compare", str(base), str(new)])
    assert exited.value.code == INCONCLUSIVE_EXIT_CODE
    assert capsys.readouterr().out.splitlines()[-1].startswith("compare: INCONCLUSIVE: the new run could not judge")


def test_a_gate_a_scenario_cannot_form_is_unjudged_with_its_reason_and_stored_as_such() -> None:
    from loadtests.judge.gates import Gate, Unjudgeable

    gate = Unjudgeable("keepalive_through_silence", "the server's keep-alive interval is unknown")
    result = gate.evaluate(table(raw_stream(3.0, 0)))
    assert result.line() == "gate UNJUDGED keepalive_through_silence: the server's keep-alive interval is unknown"
    assert Gate.from_spec(gate.spec()) == gate
