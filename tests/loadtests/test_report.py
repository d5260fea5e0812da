"""The run directory: three files, readable back, and a summary computed from the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from loadtests.gates import ALWAYS_ON, Expect
from loadtests.outcome import RequestPlan, StreamTracker
from loadtests.rebuild import rebuild_report
from loadtests.recorder import FRAME_COLUMNS, Recorder
from loadtests.report import KEEPALIVE_COUNTED_ON, judge_run, new_run_dir
from loadtests.run_writer import RunWriter, read_table
from loadtests.sse import Frame


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


def test_a_run_directory_holds_parts_and_a_true_summary(tmp_path: Path) -> None:
    recorder = recorded()
    directory = new_run_dir(tmp_path, "demo")
    writer = RunWriter(directory)
    writer.write_batch(recorder.take_batch())
    requests = writer.requests_table()
    gates = [Expect("all_ok", where=None, require="outcome == 'ok'")]
    summary = judge_run(directory, "demo", requests, gates, {"proxy": "none"}, frame_sample_rate=0.5)
    assert directory.name.startswith("demo-") and directory.name.endswith("Z")
    assert sorted(p.name for p in directory.iterdir()) == [
        "frames.parquet",
        "lag.parquet",
        "report.html",
        "requests.csv",
        "requests.parquet",
        "summary.json",
    ]
    assert json.loads((directory / "summary.json").read_text()) == summary
    assert summary["requests"] == 4 and summary["http_500"] == 1 and summary["inband_500"] == 1
    assert summary["outcomes"]["ok"] == 1 and summary["outcomes"]["rejected"] == 1
    assert summary["keepalive_frames"] == 2 and summary["passed"] is False
    assert summary["settings"] == {"proxy": "none"} and summary["frame_sample_rate"] == 0.5
    failed = [g["name"] for g in summary["gates"] if not g["passed"]]
    assert failed == ["outcomes_as_expected", "no_http_500", "no_inband_500", "all_ok"]
    assert summary["gate_specs"] == [{"type": "Expect", "name": "all_ok", "where": None,
                                      "require": "outcome == 'ok'", "min_rows": 1}]  # fmt: skip
    assert summary["latency"]["duration_s"]["p50"] == 0.8 and summary["latency"]["ttfb_s"]["count"] == 4
    assert summary["keepalive_per_stream"] == {"streams": 2, "mean": 1.0, "max": 1, "counted_on": KEEPALIVE_COUNTED_ON}
    assert len(pd.read_parquet(directory / "frames.parquet")) == 5
    pd.testing.assert_frame_equal(read_table(directory / "requests.parquet"), recorded().requests_table())


def test_parts_written_apart_read_back_as_one_table(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    first, second = recorded(), recorded()
    writer.write_batch(first.take_batch())
    writer.write_batch({"rows": [], "frames": {c: [] for c in FRAME_COLUMNS}})  # nothing new: no part
    writer.write_batch(second.take_batch())
    assert len(list(writer.requests_dir.glob("*.parquet"))) == 2
    assert len(writer.requests_table()) == 8 == writer.rows_written
    assert str(writer.requests_table()["status"].dtype) == "Int64"


def test_rebuild_rejudges_a_run_from_its_files_alone(tmp_path: Path) -> None:
    directory = tmp_path / "demo-20260101T000000Z"
    writer = RunWriter(directory)
    writer.write_batch(recorded().take_batch())
    first = judge_run(directory, "demo", writer.requests_table(), [Expect("x", None, "status == 200")])
    (directory / "summary.json").write_text(json.dumps({**first, "gates": [], "passed": True}))
    assert rebuild_report(directory) == first


def test_a_killed_run_without_summary_is_judged_by_the_always_on_gates(tmp_path: Path) -> None:
    directory = tmp_path / "demo-20260101T000000Z"
    RunWriter(directory).write_batch(recorded().take_batch())
    summary = rebuild_report(directory)
    assert summary["scenario"] == "demo" and summary["requests"] == 4
    assert [g["name"] for g in summary["gates"]] == [gate.name for gate in ALWAYS_ON]


def test_two_runs_in_one_second_get_two_directories(tmp_path: Path) -> None:
    assert new_run_dir(tmp_path, "same") != new_run_dir(tmp_path, "same")
