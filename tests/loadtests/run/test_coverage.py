"""What a verdict covers: the requests it judged against those Locust, the server and the schedule
saw. Before: a run whose disk refused 2,195 of 2,503 rows said PASS on the other 308, its
summary.json with no lost count; a killed master's run held 32-44 of the 48 requests its server
logged and nothing said so; an open loop that sent 36 of 197,482 scheduled requests said PASS."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtests.client.outcome import Outcome, RequestPlan, RequestRow, StreamTracker
from loadtests.client.sse import Frame
from loadtests.declare.workload import ROUTE_PATHS
from loadtests.errors import UNWRITTEN_EXIT_CODE
from loadtests.judge.drift import DriftLimits, drift_gates
from loadtests.judge.gates import INCONCLUSIVE, PASS
from loadtests.judge.summary import SERVED_ROUTES, LiveCounts, Summary
from loadtests.load.open_loop import Ticket, not_sent_row
from loadtests.record.recorder import REQUEST_SCHEMA, Recorder
from loadtests.record.run_dir import Manifest, RunDir, RunRecord
from loadtests.record.server_metrics import SERVER_METRICS_SCHEMA
from loadtests.run.judging import JudgeOptions, SoakState, judge, previous_summary, unfinished
from loadtests.run.progress import ProgressPrinter
from loadtests.run.soak import Soak, SoakPlan
from tests.loadtests.locust_run import rejudged_alike

pytestmark = pytest.mark.fast

T0 = 1_800_000_000.0
"""The runs' wall clock: each request sent at ``T0 + index * 0.1`` and ended 0.05 s later."""
BUNDLED = {"proxy": "none", "host": None, "keep_alive_interval": None}


def ok_row(index: int, route: str = "completions") -> tuple[RequestRow, list[Any]]:
    tracker = StreamTracker(RequestPlan(f"ok-{index}", "n", route), T0 + index * 0.1)
    tracker.headers(200, 0.01, "text/event-stream")
    tracker.frame(Frame(0.02, 30, data='{"choices": [{"index": 0, "text": "a"}]}'), 0.02)
    tracker.frame(Frame(0.05, 14, data="[DONE]"), 0.05)
    return tracker.finish(0.05), tracker.frames


def run_of(tmp_path: Path, sent: int, not_sent: int = 0) -> RunDir:
    """A run directory of ``sent`` ok requests and ``not_sent`` scheduled ones never sent."""
    recorder = Recorder()
    for index in range(sent):
        row, frames = ok_row(index)
        row.scheduled_time = row.start_time if not_sent else None  # an open loop's schedule
        recorder.add(row, frames)
    for index in range(not_sent):
        ticket = Ticket(number=sent + index, due=0.0, due_epoch=T0 + sent * 0.1 + index * 0.01)
        recorder.add(not_sent_row(ticket, "local"), None)
    run = RunDir(tmp_path / "coverage-20260101T000000Z")
    run.path.mkdir()
    pq.write_table(pa.Table.from_pylist(recorder.rows, schema=REQUEST_SCHEMA), run.requests)
    return run


def scraped(run: RunDir, counts: list[tuple[float, float]], handler: str = "/v1/completions") -> None:
    """The server's ``http_requests_total`` for ``handler`` at each ``(time, count)`` scrape."""
    rows = [
        {"time": at, "name": "http_requests_total", "labels": f'handler="{handler}",method="POST",status="2xx"',
         "value": value}
        for at, value in counts
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=SERVER_METRICS_SCHEMA), run.server_metrics)


def completed(summary: Summary) -> str:
    (gate,) = [gate for gate in summary.gates if gate.name == "requests_completed"]
    return gate.detail if gate.skipped else ""


def test_rows_the_disk_refused_leave_the_run_inconclusive_and_say_so_on_disk_and_again(tmp_path: Path) -> None:
    run = run_of(tmp_path, 31)
    told = JudgeOptions([], scenario="coverage", settings=BUNDLED, live=LiveCounts(locust=250, unwritten=219))
    summary = judge(RunRecord(run), told, html=False)
    assert summary.verdict == INCONCLUSIVE and summary.exit_code == 3
    assert summary.coverage is not None and summary.coverage.line() == (
        "coverage: 31 of 250 requests judged (Locust counted 250); 219 lost (never recorded: the run could not "
        "write 219); 88% not judged, over the 10% allowed"
    )
    assert "219 of 250 requests lost (never recorded) (88%, over the 10% allowed)" in completed(summary)
    assert "219 of 250 requests lost (never recorded)" in summary.verdict_line()
    written = rejudged_alike(run.path)  # what `report` gives: the same verdict, the same figures
    assert written["verdict"] == INCONCLUSIVE
    assert written["coverage"]["lost"] == 219 and written["coverage"]["locust"] == 250
    assert written["coverage"]["unwritten"] == 219 and written["coverage"]["seen"] == 250


def test_a_loss_within_the_allowed_share_passes_and_is_said(tmp_path: Path) -> None:
    run = run_of(tmp_path, 40)
    summary = judge(RunRecord(run), JudgeOptions([], settings=BUNDLED, live=LiveCounts(locust=42)), html=False)
    assert summary.verdict == PASS and summary.coverage is not None
    assert summary.coverage.line() == "coverage: 40 of 42 requests judged (Locust counted 42); 2 lost (never recorded)"
    assert rejudged_alike(run.path)["coverage"]["lost"] == 2


def test_the_share_allowed_is_the_runs_max_unjudged_share(tmp_path: Path) -> None:
    run = run_of(tmp_path, 40)
    settings = {**BUNDLED, "max_unjudged_share": 0.01}
    summary = judge(RunRecord(run), JudgeOptions([], settings=settings, live=LiveCounts(locust=42)), html=False)
    assert summary.verdict == INCONCLUSIVE and "over the 1% allowed" in completed(summary)


def test_an_open_loop_that_sent_few_of_its_schedule_is_inconclusive(tmp_path: Path) -> None:
    run = run_of(tmp_path, 4, not_sent=96)
    settings = {**BUNDLED, "open_loop": {"rate": 50.0, "arrival": "constant", "seed": None, "max_in_flight": 1}}
    summary = judge(RunRecord(run), JudgeOptions([], settings=settings, live=LiveCounts(locust=4)), html=False)
    assert summary.verdict == INCONCLUSIVE and summary.exit_code == 3
    assert summary.coverage is not None and summary.coverage.line() == (
        "coverage: 4 of 4 requests judged (Locust counted 4, 100 scheduled); 96 never sent; "
        "96% not judged, over the 10% allowed"
    )
    assert "96 of 100 requests never sent (96%, over the 10% allowed)" in completed(summary)
    assert rejudged_alike(run.path)["verdict"] == INCONCLUSIVE


def test_the_servers_count_names_rows_a_killed_run_never_recorded(tmp_path: Path) -> None:
    """No summary (the master was killed): the server counted 48 requests between its first and last
    scrape, the directory holds 32 that ended then; ``report`` says 16 lost and never passes it."""
    run = run_of(tmp_path, 32)
    scraped(run, [(T0 - 1.0, 0.0), (T0 + 1.0, 20.0), (T0 + 4.0, 48.0)])
    summary = judge(RunRecord(run), JudgeOptions(interrupted=unfinished(previous_summary(run))), html=False)
    assert summary.coverage is not None and summary.coverage.line() == (
        "coverage: 32 of 48 requests judged (the server 48 over its 5 s of scrapes, against 32 rows that ended "
        "then); 16 lost (never recorded); 33% not judged, over the 10% allowed"
    )
    assert "16 of 48 requests lost (never recorded)" in completed(summary)


def test_a_host_servers_count_is_said_but_not_weighed(tmp_path: Path) -> None:
    """A server the run did not start may serve other clients: its larger count is no loss of ours."""
    run = run_of(tmp_path, 32)
    scraped(run, [(T0 - 1.0, 100.0), (T0 + 4.0, 148.0)], handler="/v1/completions")
    settings = {**BUNDLED, "host": "http://vllm:8000"}
    summary = judge(RunRecord(run), JudgeOptions([], settings=settings, live=LiveCounts(locust=32)), html=False)
    assert summary.verdict == PASS and summary.coverage is not None
    assert summary.coverage.lost == 0 and summary.coverage.server == 48
    assert "not weighed: a --host server may serve other clients" in summary.coverage.line()


def test_a_started_vllms_count_is_said_but_not_weighed_as_it_counts_the_slot_holders(tmp_path: Path) -> None:
    """``--server vllm`` is sent slot holders (``loadtests.load.slot_holders``) that the run never
    records: the server's larger count is no loss of ours, and the line says why it is not weighed."""
    run = run_of(tmp_path, 32)
    scraped(run, [(T0 - 1.0, 0.0), (T0 + 4.0, 60.0)], handler="/v1/completions")
    settings = {**BUNDLED, "server": "vllm"}
    summary = judge(RunRecord(run), JudgeOptions([], settings=settings, live=LiveCounts(locust=32)), html=False)
    assert summary.verdict == PASS and summary.coverage is not None
    assert summary.coverage.lost == 0 and summary.coverage.server == 60 and not summary.coverage.server_weighed
    assert "not weighed: the vllm server also counts the run's slot holders" in summary.coverage.line()
    assert rejudged_alike(run.path)["coverage"]["server_unweighed_why"] == summary.coverage.server_unweighed_why


def test_the_servers_count_is_of_the_runs_routes_only(tmp_path: Path) -> None:
    run = run_of(tmp_path, 32)
    scraped(run, [(T0 - 1.0, 0.0), (T0 + 4.0, 480.0)], handler="/tokenize")
    summary = judge(RunRecord(run), JudgeOptions([], settings=BUNDLED), html=False)
    assert summary.coverage is not None and summary.coverage.server is None and summary.passed


def test_the_routes_are_the_workloads() -> None:
    assert SERVED_ROUTES == ROUTE_PATHS


def test_a_soak_whose_final_summary_cannot_be_written_says_so_and_exits_4(tmp_path: Path) -> None:
    """The disk refuses the soak's final summary: before, ``verdict: PASS``, exit 0 and no line."""
    run = run_of(tmp_path, 30)
    run.write_manifest(Manifest("coverage", "2026-01-01T00:00:00Z", BUNDLED, []))
    (run.path / "summary.json.tmp").mkdir()  # where the summary is written first: a disk that refuses it
    (run.path / "summary.json.tmp" / "x").write_text("")
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        soak = Soak(SoakPlan(duration_s=30.0), ProgressPrinter(stream))
        soak.run_dir = run
        code = soak._finish(0)
    lines = out.read_text().splitlines()
    fallback = Path(tempfile.gettempdir()) / f"sse-soak-{run.path.name}-summary.json"
    try:
        assert code == UNWRITTEN_EXIT_CODE
        assert lines[-1] == f"sse-soak: could not write {run.summary}: Is a directory; the summary is in {fallback}"
        assert json.loads(fallback.read_text())["soak"]["partial"] is False
    finally:
        fallback.unlink(missing_ok=True)


def test_a_soak_checkpoint_outlives_the_locust_runs_own_summary(tmp_path: Path) -> None:
    """The Locust run judges itself at its end without the drift gates; until the soak job writes its
    final summary, the directory says it is missing (``report`` then fails it, never a PASS)."""
    run = run_of(tmp_path, 30)
    checkpoint = JudgeOptions(add_gates=drift_gates(DriftLimits()), soak=SoakState(True, 60.0), settings=BUNDLED)
    judge(RunRecord(run), checkpoint, html=False)
    judge(RunRecord(run), JudgeOptions([], scenario="soak", settings=BUNDLED, ended="run time of 60 s reached"))
    assert (
        unfinished(previous_summary(run))
        == "the run ended before writing its summary (summary.json is a soak checkpoint)"
    )


def test_a_row_of_no_route_is_no_request_of_the_server(tmp_path: Path) -> None:
    """Not-sent rows have no route: they never reach the server's count (nor its handlers)."""
    run = run_of(tmp_path, 2, not_sent=1)
    requests = RunRecord(run).requests
    assert set(requests.loc[requests["outcome"] == Outcome.NOT_SENT, "route"]) == {""}
