"""Drift windows and gates, and the soak's duration and progress line."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from loadtests.declare.options import parse_duration
from loadtests.judge.drift import DriftLimits, WindowJudge, drift_gates, latency_drift, memory_growth, windows_table
from loadtests.judge.gates import GATE_TYPES, Expect, Gate, HarnessKeptUp, RunTables
from loadtests.record.recorder import REQUEST_SCHEMA, to_pandas
from loadtests.record.run_dir import RunDir
from loadtests.record.server_metrics import parse_exposition
from loadtests.run.progress import ProgressPrinter, RunProgress

pytestmark = pytest.mark.fast

LIMITS = DriftLimits(windows=5)


def requests_over(seconds: int, ttft: np.ndarray | None = None) -> pd.DataFrame:
    count = seconds * 2
    start = 1_700_000_000.0 + np.arange(count) / 2
    return pd.DataFrame(
        {
            "start_time": start,
            "duration_s": 0.2,
            "outcome": "ok",
            "status": pd.array([200] * count, dtype="Int64"),
            "error_code": None,
            "ttft_s": ttft if ttft is not None else np.full(count, 0.1),
            "max_gap_s": 0.1,
            "keepalive_frames": 2,
            "silence_before_first_token_s": 1.0,
        }
    )


def memory(seconds: int, harness: np.ndarray, server: np.ndarray) -> pd.DataFrame:
    t = 1_700_000_000.0 + np.linspace(0, seconds, len(harness), endpoint=False)
    return pd.DataFrame({"t": t, "harness_rss_mb": harness, "server_rss_mb": server})


def test_windows_split_the_run_and_carry_their_figures() -> None:
    windows = windows_table(requests_over(100), memory(100, np.full(50, 200.0), np.full(50, 50.0)), 5)
    assert list(windows["window"]) == [1, 2, 3, 4, 5]
    assert windows["requests"].sum() == 200
    assert windows["keepalive_per_silent_s"].tolist() == [2.0] * 5
    assert windows["harness_rss_mb"].tolist() == [200.0] * 5


def test_steady_memory_growth_fails_and_flat_memory_passes() -> None:
    growing = memory(100, np.linspace(100, 200, 50), np.full(50, 50.0))
    windows = windows_table(requests_over(100), growing, 5)
    result = memory_growth(windows, LIMITS)
    assert not result.passed and "harness" in result.detail and "rose in 100% of steps" in result.detail
    flat = memory(100, 200 + np.random.default_rng(1).normal(0, 1, 50), np.full(50, 50.0))
    assert memory_growth(windows_table(requests_over(100), flat, 5), LIMITS).passed


def test_a_one_off_jump_that_does_not_keep_rising_is_not_steady_growth() -> None:
    jump = np.concatenate([np.full(20, 100.0), np.full(30, 130.0)])  # +30%, then flat
    assert memory_growth(windows_table(requests_over(100), memory(100, jump, np.full(50, 50.0)), 5), LIMITS).passed


def test_latency_drift_fails_beyond_both_limits() -> None:
    rising = np.linspace(0.1, 0.4, 200)
    assert not latency_drift(
        windows_table(requests_over(100, rising), memory(100, np.ones(5), np.ones(5)), 5), LIMITS
    ).passed
    small = np.linspace(0.010, 0.030, 200)  # tripled, but by 20 ms only
    assert latency_drift(
        windows_table(requests_over(100, small), memory(100, np.ones(5), np.ones(5)), 5), LIMITS
    ).passed
    warm_up = np.concatenate([np.full(40, 0.1), np.full(160, 0.4)])  # slow only in the first window
    judged = latency_drift(windows_table(requests_over(100, warm_up), memory(100, np.ones(5), np.ones(5)), 5), LIMITS)
    assert judged.passed and judged.detail.startswith("TTFT p50 second window 400.0 ms, last 400.0 ms")


def test_no_requests_means_no_windows_and_unjudged_gates() -> None:
    tables = RunTables(requests_over(0), resources=memory(1, np.ones(1), np.ones(1)))
    assert drift_gates(LIMITS)[0].windows(tables).empty
    results = [gate.evaluate_run(tables) for gate in drift_gates(LIMITS)]
    assert all(result.skipped and not result.passed for result in results)
    assert all("no windows" in result.detail for result in results)


def test_too_few_windows_leave_drift_unjudged_never_passed() -> None:
    two = windows_table(requests_over(100), memory(100, np.full(50, 200.0), np.full(50, 50.0)), 2)
    assert latency_drift(two, LIMITS).skipped and "3 needed" in latency_drift(two, LIMITS).detail
    assert memory_growth(two, LIMITS).skipped and "nothing to judge" in memory_growth(two, LIMITS).detail
    no_server = memory(100, np.full(50, 200.0), np.full(50, np.nan))  # --host: no server memory
    judged = memory_growth(windows_table(requests_over(100), no_server, 5), LIMITS)
    assert judged.passed and not judged.skipped and "server: too few windows" in judged.detail


def test_each_window_carries_its_own_verdict_by_the_runs_rule() -> None:
    rows = requests_over(100).astype(object).to_dict(orient="records")
    for number, row in enumerate(rows):
        row.update(request_id=f"r{number}", name="n", route="chat", client="raw")
    for row in rows[150:155]:  # in window 4 of 5
        row.update(outcome="http_error", status=500)
    requests = to_pandas(pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA))  # every column a run records
    gates = [HarnessKeptUp(5.0), Expect("every_ok", where=None, require="outcome == 'ok'")]
    judge = WindowJudge(gates, point={"every_ok", "requests_completed"}, max_unjudged_share=0.1)
    windows = windows_table(requests, memory(100, np.ones(5), np.ones(5)), 5, judge=judge)
    assert windows["verdict"].tolist() == ["PASS", "PASS", "PASS", "FAIL", "PASS"]
    assert set(str(windows.loc[3, "failed"]).split(", ")) == {"outcomes_as_expected", "no_http_500", "every_ok"}
    assert "harness_kept_up" not in str(windows["failed"].tolist())  # a whole-run measurement, not a window's
    silent_only = [Expect("covered", where="silence_before_first_token_s > 5", require="keepalive_frames >= 1")]
    unexercised = WindowJudge(silent_only, point={"covered"}, max_unjudged_share=0.1)
    windows = windows_table(
        requests.assign(outcome="ok", status=200), memory(100, np.ones(5), np.ones(5)), 5, judge=unexercised
    )
    assert set(windows["verdict"]) == {"INCONCLUSIVE"} and set(windows["unjudged"]) == {"covered"}


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("20m", 1200), ("8h", 28800), ("1h30m", 5400), ("45", 45)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0s", "5x", "-3s"])
def test_bad_durations_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match=r"90s, 20m, 8h|positive"):
        parse_duration(text)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_refreshes_in_place_on_a_terminal_and_prints_lines_otherwise() -> None:
    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        printer = ProgressPrinter(stream)
        printer.show("first")
        printer.show("second")
        printer.print("gate PASS x")
    assert terminal.getvalue() == "\r\x1b[2Kfirst\r\x1b[2Ksecond\ngate PASS x\n"
    assert log.getvalue() == "first\nsecond\ngate PASS x\n"


def test_progress_reads_only_new_parts(tmp_path: Path) -> None:
    from loadtests.client.outcome import RequestPlan, StreamTracker
    from loadtests.record.parts_writer import RunWriter
    from loadtests.record.recorder import Recorder

    writer, progress = RunWriter(tmp_path), RunProgress(RunDir(tmp_path))
    for status in (200, 500):
        recorder = Recorder()
        stream = StreamTracker(RequestPlan(f"r{status}", "n", "chat"), 0.0)
        stream.headers(status, 0.1, "text/event-stream")
        recorder.add(stream.finish(0.2), None)
        writer.write_batch(recorder.take_batch())
        progress.refresh()
    assert (progress.requests, progress.http_500, progress.outcomes["cut"]) == (2, 1, 1)
    line = progress.line(65, 3600, 120.4, None)
    assert line.startswith("soak 0:01:05 elapsed, 1:00:00 left | 2 requests: 0 ok")
    assert "1 HTTP 500" in line and "harness 120 MiB, server -" in line


def test_windows_carry_the_servers_queue_when_its_metrics_were_scraped() -> None:
    scrapes = [
        pd.DataFrame(
            parse_exposition(
                f'vllm:num_requests_waiting{{engine="0"}} {second % 20}\nvllm:num_requests_running{{engine="0"}} 4\n',
                1_700_000_000.0 + second,
            )
        )
        for second in range(100)
    ]
    windows = windows_table(requests_over(100), memory(1, np.ones(1), np.ones(1)), 5, pd.concat(scrapes))
    assert windows["server_waiting_mean"].tolist() == [9.5] * 5
    assert windows["server_waiting_max"].tolist() == [19.0] * 5
    assert windows["server_running_mean"].tolist() == [4.0] * 5
    assert "server_waiting_mean" not in windows_table(requests_over(100), memory(1, np.ones(1), np.ones(1)), 5)


def test_drift_gates_register_themselves_and_load_back_from_their_specs() -> None:
    stored = [gate.spec() for gate in drift_gates(LIMITS)]
    assert [spec["type"] for spec in stored] == ["MemoryGrowth", "LatencyDrift"]
    assert stored[0]["limits"] == LIMITS.as_dict()  # the shape summary.json has always held
    assert [Gate.from_spec(spec) for spec in stored] == drift_gates(LIMITS)
    assert "_DriftGate" not in GATE_TYPES  # a base, never stored
