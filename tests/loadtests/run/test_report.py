"""The run directory: its files, readable back, a summary computed from the rows, and one judgement
that gives the same verdict, gates and sections however often a run is judged again."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.errors import SummaryError
from loadtests.judge.drift import DriftLimits, drift_gates
from loadtests.judge.gates import ALWAYS_ON, Expect
from loadtests.judge.summary import KEEPALIVE_COUNTED_ON, Summary
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import FRAME_COLUMNS, Recorder
from loadtests.record.run_dir import Manifest, RunDir, read_table
from loadtests.run.judging import SoakState, judge, unfinished
from tests.loadtests.tables import requests_of

pytestmark = pytest.mark.fast


def recorded() -> Recorder:
    recorder = Recorder()
    for index, (status, error) in enumerate([(200, None), (200, "500"), (500, "500"), (400, "400")]):
        stream = StreamTracker(RequestPlan(f"r{index}", "n", "chat"), 0.0)
        stream.headers(status, 0.01, "text/event-stream")
        if status == 200:
            stream.frame(Frame(t=0, nbytes=14, comments=["keep-alive"]), 0.5)
            if error:
                stream.frame(Frame(t=0, nbytes=40, data=json.dumps({"error": {"message": "x", "code": 500}})), 0.6)
            stream.frame(Frame(t=0, nbytes=14, data="[DONE]"), 0.7)
        else:
            stream.error_body(json.dumps({"error": {"message": "m", "param": None, "code": status}}))
        recorder.add(stream.finish(0.8), stream.frames)
    return recorder


def written(directory: Path) -> RunDir:
    run = RunDir(directory)
    RunWriter(run).write_batch(recorded().take_batch())
    return run


def test_a_run_directory_holds_parts_and_a_true_summary(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "demo")
    RunWriter(run).write_batch(recorded().take_batch())
    gates = [Expect("all_ok", where=None, require="outcome == 'ok'")]
    result = judge(run, gates, scenario="demo", settings={"proxy": "none"}, frame_sample_rate=0.5)
    directory = run.path
    assert directory.name.startswith("demo-") and directory.name.endswith("Z")
    assert sorted(p.name for p in directory.iterdir()) == [
        "frames.parquet",
        "lag.parquet",
        "report.html",
        "requests.csv",
        "requests.parquet",
        "summary.json",
    ]
    summary = json.loads(run.summary.read_text())
    assert summary == result.to_json()
    assert summary["requests"] == 4 and summary["http_500"] == 1 and summary["inband_500"] == 1
    assert summary["outcomes"]["ok"] == 1 and summary["outcomes"]["rejected"] == 1
    assert summary["keepalive_frames"] == 2 and summary["passed"] is False
    assert summary["settings"] == {"proxy": "none"} and summary["frame_sample_rate"] == 0.5
    failed = [g["name"] for g in summary["gates"] if not g["passed"] and not g["skipped"]]
    assert failed == ["outcomes_as_expected", "no_http_500", "no_inband_500", "all_ok"]
    expect = {"type": "Expect", "name": "all_ok", "where": None, "require": "outcome == 'ok'", "min_rows": 1}
    assert summary["gate_specs"] == [expect]
    assert summary["latency"]["duration_s"]["p50"] == 0.8 and summary["latency"]["ttfb_s"]["count"] == 4
    assert summary["keepalive_per_stream"] == {"streams": 2, "mean": 1.0, "max": 1, "counted_on": KEEPALIVE_COUNTED_ON}
    assert len(pd.read_parquet(run.frames)) == 4  # the [DONE] after the error frame ends nothing: the stream ended
    pd.testing.assert_frame_equal(read_table(run.requests), requests_of(recorded()))


def test_parts_written_apart_read_back_as_one_table(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    first, second = recorded(), recorded()
    writer.write_batch(first.take_batch())
    writer.write_batch({"rows": [], "frames": {c: [] for c in FRAME_COLUMNS}})  # nothing new: no part
    writer.write_batch(second.take_batch())
    assert len(list(writer.requests_dir.glob("*.parquet"))) == 2
    assert len(writer.run.read_requests()) == 8 == writer.rows_written
    assert str(writer.run.read_requests()["status"].dtype) == "Int64"


def test_rebuild_rejudges_a_run_from_its_files_alone(tmp_path: Path) -> None:
    run = written(tmp_path / "demo-20260101T000000Z")
    first = judge(run, [Expect("x", None, "status == 200")], scenario="demo")
    run.summary.write_text(json.dumps({**first.to_json(), "gates": [], "passed": True}))  # a summary edited to pass
    assert judge(run) == first


def test_a_killed_run_without_summary_is_judged_by_the_always_on_gates(tmp_path: Path) -> None:
    run = written(tmp_path / "demo-20260101T000000Z")
    summary = judge(run)
    assert summary.scenario == "demo" and summary.requests == 4
    assert [gate.name for gate in summary.gates] == [gate.name for gate in ALWAYS_ON]


def test_a_killed_run_is_judged_by_the_gates_its_manifest_declared(tmp_path: Path) -> None:
    run = written(tmp_path / "x")
    gate = {"type": "Expect", "name": "all_ok", "where": None, "require": "outcome == 'ok'", "min_rows": 1}
    run.write_manifest(Manifest("declared", "2026-01-01T00:00:00Z", {"proxy": "none"}, [gate]))
    summary = judge(run, interrupted=unfinished(None))
    assert summary.scenario == "declared" and summary.settings == {"proxy": "none"}
    assert [g.name for g in summary.gates][-1] == "all_ok" and not summary.passed
    assert summary.interrupted == "the run ended before writing its summary"


def test_a_failing_soak_rebuilt_keeps_its_verdict_gates_and_sections(tmp_path: Path) -> None:
    """The defect this design removes: re-judging a failed soak made it PASS and dropped its section."""
    run = written(tmp_path / "soak-20260101T000000Z")
    judge(run, [], scenario="soak", html=False)  # the scenario's own judgement at its end
    limits = DriftLimits(windows=3, max_latency_drift=0.0, min_latency_drift_s=0.0)
    ended = judge(run, add_gates=drift_gates(limits), soak=SoakState(False, 30.0), html=False)
    again = judge(run, html=False)  # python -m loadtests report
    assert again == ended
    assert again.soak is not None and again.soak["duration_s"] == 30.0 and not again.soak["partial"]
    assert [g.name for g in again.gates][-2:] == ["memory_growth", "latency_drift"]
    assert not again.passed
    assert Summary.from_json(json.loads(run.summary.read_text())) == again


def test_a_checkpoint_stays_partial_until_the_soak_ends(tmp_path: Path) -> None:
    run = written(tmp_path / "soak-20260101T000000Z")
    checkpoint = judge(run, add_gates=drift_gates(DriftLimits()), soak=SoakState(True, 60.0), html=False)
    assert checkpoint.soak is not None and checkpoint.soak["partial"]
    assert unfinished(checkpoint) == "the run ended before writing its summary (summary.json is a soak checkpoint)"
    assert judge(run, html=False).soak == checkpoint.soak  # a report does not pretend the soak finished


def test_two_runs_in_one_second_get_two_directories(tmp_path: Path) -> None:
    assert RunDir.create(tmp_path, "same") != RunDir.create(tmp_path, "same")


def test_a_summary_written_reads_back_equal_and_a_cut_short_one_says_only_what_it_holds(tmp_path: Path) -> None:
    run = written(tmp_path / "demo-20260101T000000Z")
    first = judge(run, [Expect("x", None, "status == 200")], scenario="demo", html=False)
    assert Summary.read(run.summary) == first and Summary.read(run.summary).said >= {"scenario", "gates"}
    run.summary.write_text(json.dumps({"gate_specs": first.gate_specs, "settings": None}))
    cut = Summary.read(run.summary, whole=False)
    assert cut.said == {"gate_specs"} and cut.stated is None  # a null is not said: the manifest's counts
    with pytest.raises(SummaryError, match=r"summary.json: not a run summary \(no 'scenario'\)$"):
        Summary.read(run.summary)
    assert judge(run, html=False) == first  # its gates carried over, the rest recomputed
