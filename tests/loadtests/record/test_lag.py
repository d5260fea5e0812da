"""The lag monitor: it sees a blocked loop, answers each request's worst lag, and is judged by a gate."""

from __future__ import annotations

import time
from pathlib import Path

import gevent
import pandas as pd
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.judge.gates import Gate, HarnessKeptUp, RunTables, evaluate
from loadtests.judge.summary import Summary
from loadtests.record.lag import (
    LAG_COLUMNS,
    STALL_FLOOR_S,
    LagMonitor,
    lag_summary,
    stalled_while_open,
    while_streams_open,
)
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import Recorder
from loadtests.record.run_dir import RunDir, RunRecord
from loadtests.run.judging import JudgeOptions, judge

pytestmark = pytest.mark.fast


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_blocked_by_a_call_is_seen_as_lag_of_that_length() -> None:
    monitor = LagMonitor(interval=0.005)
    monitor.start()
    try:
        gevent.sleep(0.05)  # the monitor runs on time for a while
        opened = time.monotonic()
        time.sleep(0.08)  # blocks the whole loop, as a blocking call in a user would
        gevent.sleep(0.03)  # the monitor wakes late, then on time again
        worst = monitor.worst_since(opened)
    finally:
        monitor.stop()
    samples = pd.DataFrame(monitor.take("local"))
    assert list(samples.columns) == list(LAG_COLUMNS)
    assert samples["lag_s"].max() >= 0.07  # the stall, less at most the part of one interval it hid in
    assert (samples["lag_s"] < 0.005).sum() >= 5  # and the wakes before and after it were on time
    assert worst is not None and worst >= 0.07
    assert (samples["worker"] == "local").all() and samples["t_mono"].is_monotonic_increasing


def test_a_block_the_harness_excused_records_no_sample() -> None:
    """Setup blocks the loop on purpose before any stream opens: that wake is not a stall."""
    monitor = LagMonitor(interval=0.005)
    monitor.start()
    try:
        gevent.sleep(0.03)
        time.sleep(0.08)  # settle_after_setup's collection
        monitor.excuse_current_wait()
        gevent.sleep(0.03)
        time.sleep(0.06)  # a stall nobody excused
        gevent.sleep(0.03)
    finally:
        monitor.stop()
    lags = pd.DataFrame(monitor.take("local"))["lag_s"]
    assert (lags >= 0.05).sum() == 1 and lags.max() < 0.08  # the second block only


def test_worst_since_covers_only_wakes_after_the_request_opened() -> None:
    clock = FakeClock()
    monitor = LagMonitor(clock=clock)
    monitor._due = clock.now + 1  # as if running and asleep
    for at, lag in [(1.0, 0.050), (2.0, 0.002), (3.0, 0.020), (4.0, 0.001)]:
        monitor.record(at, at, lag)
    assert monitor.worst_since(0.5) == pytest.approx(0.050)
    assert monitor.worst_since(1.5) == pytest.approx(0.020)
    assert monitor.worst_since(3.5) == pytest.approx(0.001)
    assert monitor.worst_since(5.0) == 0.0
    assert len(monitor._worst_lag) == 3  # the 2 ms wake at t=2 is dominated by the later 20 ms one


def test_worst_since_includes_a_stall_the_monitor_has_not_woken_from() -> None:
    clock = FakeClock()
    monitor = LagMonitor(clock=clock)
    monitor._due = clock.now + 0.01
    clock.now += 0.31  # the loop has been blocked 300 ms past the monitor's wake
    assert monitor.worst_since(clock.now - 1.0) == pytest.approx(0.30)


def test_a_monitor_that_never_ran_measured_nothing() -> None:
    assert LagMonitor().worst_since(0.0) is None


def test_the_worst_list_stays_small_over_a_long_run() -> None:
    monitor = LagMonitor(clock=FakeClock())
    for index in range(100_000):
        monitor.record(float(index), float(index), (index * 7919 % 1000) / 1e6)  # 0-1 ms, scattered
    monitor.take("local")
    assert len(monitor._worst_lag) <= 11  # distinct 0.1 ms steps below the last maximum, not the run


def test_take_hands_over_and_forgets() -> None:
    monitor = LagMonitor(clock=FakeClock())
    monitor.record(1.0, 1000.0, 0.001)
    taken = monitor.take("worker-3")
    assert taken == {"worker": ["worker-3"], "time": [1000.0], "t_mono": [1.0], "lag_s": [0.001]}
    assert monitor.take("worker-3")["lag_s"] == []


def lag_table(**by_worker: list[float]) -> pd.DataFrame:
    rows = [(worker, float(i), float(i), lag) for worker, lags in by_worker.items() for i, lag in enumerate(lags)]
    return pd.DataFrame(rows, columns=list(LAG_COLUMNS))


def test_summary_gives_percentiles_and_seconds_in_stalls_per_process() -> None:
    lag = lag_table(local=[0.001] * 98 + [0.010, 0.200])
    summary = lag_summary(lag, limit_ms=5.0)
    assert summary["samples"] == 100 and summary["p50"] == pytest.approx(1.0) and summary["max"] == pytest.approx(200)
    assert summary["seconds_above_limit"] == pytest.approx(0.21)
    assert set(summary["by_worker"]) == {"local"}


def requests_with_lag(*lags: float) -> pd.DataFrame:
    return pd.DataFrame(
        {"request_id": [f"r{i}" for i in range(len(lags))], "outcome": "ok", "harness_lag_max_s": list(lags)}
    )


def test_gate_passes_when_every_process_kept_up() -> None:
    result = HarnessKeptUp(5.0).evaluate_run(
        RunTables(requests_with_lag(0.001), lag_table(a=[0.001] * 100, b=[0.002] * 100))
    )
    assert result.passed and "p99 lag 2.0 ms in b" in result.detail and "2 process(es)" in result.detail


def test_gate_fails_on_the_worst_process_and_says_what_it_means() -> None:
    lag = lag_table(**{"worker-0": [0.001] * 100, "worker-1": [0.001] * 90 + [0.030] * 10})
    result = HarnessKeptUp(5.0).evaluate_run(RunTables(requests_with_lag(0.001, 0.030, 0.040), lag))
    assert not result.passed
    assert "p99 lag 30.0 ms in worker-1" in result.detail
    assert "not trustworthy" in result.detail and "--processes" in result.detail
    assert "2 requests were open during a stall over the limit" in result.detail


def test_gate_without_samples_is_skipped_not_passed() -> None:
    result = HarnessKeptUp().evaluate_run(RunTables(requests_with_lag(0.0), lag_table()))
    assert result.skipped and not result.passed


def test_gate_is_stored_and_judged_with_the_run_lag() -> None:
    gate = Gate.from_spec(HarnessKeptUp(2.0).spec())
    assert gate == HarnessKeptUp(2.0)
    requests = requests_with_lag(0.001).assign(
        status=200,
        expected=None,
        error_code=None,
        error_message=None,
        truncate_prompt_tokens=None,
        usage_prompt_tokens=None,
        prompt_tokens=None,
    )
    results = {r.name: r for r in evaluate(RunTables(requests, lag_table(local=[0.003] * 10)), [gate])}
    assert not results["harness_kept_up"].passed and results["requests_completed"].passed


def timed_requests(*spans: tuple[float, float]) -> pd.DataFrame:
    """Requests opened at ``start`` (wall clock) for ``duration`` seconds."""
    return pd.DataFrame({"start_time": [s for s, _ in spans], "duration_s": [d for _, d in spans]})


def test_only_stalls_that_meet_an_open_stream_are_kept() -> None:
    lag = pd.DataFrame(
        [
            ("local", 5.0, 5.0, 0.300),  # setup, before the first request
            ("local", 10.1, 10.1, 0.200),  # began before the first request, ended after it opened
            ("local", 12.0, 12.0, 0.001),
            ("local", 15.2, 15.2, 0.300),  # began while the last request was open
            ("local", 16.0, 16.0, 0.400),  # teardown, after the last request ended
        ],
        columns=list(LAG_COLUMNS),
    )
    kept = while_streams_open(lag, timed_requests((10.0, 2.0), (11.0, 4.0)))
    assert kept["time"].tolist() == [10.1, 12.0, 15.2]


def test_stalls_add_up_over_the_part_of_each_that_falls_while_a_request_was_open() -> None:
    """A machine that froze in several back-to-back stalls, each under a gate's tolerance, is seen
    as their sum; a stall is cut at the request's open and close, and other workers' stalls and
    ordinary jitter (under ``STALL_FLOOR_S``) do not count."""
    lag = pd.DataFrame(
        [
            ("local", 10.3, 10.3, 0.5),  # [9.8, 10.3]: 0.3 s of it after the open at 10.0
            ("local", 10.9, 10.9, 0.55),  # [10.35, 10.9]: wholly inside
            ("local", 11.0, 11.0, STALL_FLOOR_S / 2),  # jitter
            ("local", 11.5, 11.5, 0.4),  # [11.1, 11.5]: 0.3 s of it before the close at 11.4
            ("worker-2", 10.9, 10.9, 0.9),  # another process's loop
            ("local", 20.0, 20.0, 1.0),  # after every request
        ],
        columns=list(LAG_COLUMNS),
    )
    requests = timed_requests((10.0, 1.4), (10.4, 0.1), (12.0, 1.0), (float("nan"), 1.0))
    requests["worker"] = ["local", "local", "local", "local"]
    stalled = stalled_while_open(requests, lag)
    assert stalled.round(6).tolist() == [1.15, 0.1, 0.0, 0.0]  # 0.3 + 0.55 + 0.3; 0.1 inside the second stall
    assert stalled_while_open(requests, None).tolist() == [0.0] * 4
    assert stalled_while_open(requests, lag.iloc[0:0]).tolist() == [0.0] * 4


def test_without_timed_requests_every_sample_is_kept() -> None:
    lag = lag_table(local=[0.001, 0.300])
    assert while_streams_open(lag, pd.DataFrame()).equals(lag)
    assert while_streams_open(lag, timed_requests((float("nan"), 1.0))).equals(lag)


def test_a_stall_before_the_first_request_does_not_fail_the_run(tmp_path: Path) -> None:
    """The gate and summary.json judge the same samples: those while streams were open."""
    start = 1_000.0
    in_run = [("local", start + 0.01 * i, 0.0, 0.001) for i in range(1, 60)]
    setup_stall = ("local", start - 0.5, 0.0, 0.250)
    run = run_with_lag(tmp_path / "demo-20260101T000000Z", start, [setup_stall, *in_run])
    summary = judge(RunRecord(run), JudgeOptions([HarnessKeptUp(5.0)], scenario="demo"))
    assert kept_up(summary)
    assert summary.harness_lag_ms is not None and summary.harness_lag_ms.max == pytest.approx(1.0)
    assert len(run.read_lag()) == 60  # the file keeps every sample; the report plots them all

    stall_in_run = ("local", start + 0.5, 0.0, 0.250)
    run = run_with_lag(tmp_path / "demo-20260101T000001Z", start, [stall_in_run, *in_run])
    assert not kept_up(judge(RunRecord(run), JudgeOptions([HarnessKeptUp(5.0)], scenario="demo")))


def kept_up(summary: Summary) -> bool:
    return next(gate.passed for gate in summary.gates if gate.name == "harness_kept_up")


def run_with_lag(path: Path, start: float, samples: list[tuple[str, float, float, float]]) -> RunDir:
    """A run of one ok stream opened at wall-clock ``start`` for 0.8 s, with these lag samples."""
    recorder = Recorder()
    stream = StreamTracker(RequestPlan("r0", "n", "chat"), start)
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(Frame(t=0, nbytes=14, data="[DONE]"), 0.7)
    recorder.add(stream.finish(0.8), stream.frames)
    batch = recorder.take_batch()
    batch["lag"] = {column: [sample[i] for sample in samples] for i, column in enumerate(LAG_COLUMNS)}
    run = RunDir(path)
    RunWriter(run).write_batch(batch)
    return run
