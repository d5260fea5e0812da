"""The run directory: three files, readable back, and a summary computed from the rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from loadtests.gates import evaluate
from loadtests.outcome import RequestPlan, StreamTracker
from loadtests.recorder import Recorder
from loadtests.report import new_run_dir, write_run
from loadtests.sse import Frame


def recorded() -> Recorder:
    recorder = Recorder()
    for index, (status, error) in enumerate([(200, None), (200, "500"), (500, "500"), (400, "400")]):
        stream = StreamTracker(RequestPlan(f"r{index}", "n", "chat"), 0.0)
        stream.headers(status, 0.01)
        if status == 200:
            stream.frame(Frame(t=0, nbytes=14, comments=["keep-alive"]), 0.5)
            if error:
                stream.frame(Frame(t=0, nbytes=40, data=json.dumps({"error": {"message": "x", "code": 500}})), 0.6)
            stream.frame(Frame(t=0, nbytes=14, data="[DONE]"), 0.7)
        else:
            stream.error_body(json.dumps({"error": {"message": "m", "param": None, "code": status}}))
        recorder.add(stream.finish(0.8), stream.frames)
    return recorder


def test_write_run_leaves_three_readable_files_and_a_true_summary(tmp_path: Path) -> None:
    recorder = recorded()
    requests = recorder.requests_table()
    directory = new_run_dir(tmp_path, "demo")
    summary = write_run(directory, "demo", requests, recorder.frames_table(), evaluate(requests))
    assert directory.name.startswith("demo-") and directory.name.endswith("Z")
    assert sorted(p.name for p in directory.iterdir()) == ["frames.parquet", "requests.parquet", "summary.json"]
    assert json.loads((directory / "summary.json").read_text()) == summary
    assert summary["requests"] == 4 and summary["http_500"] == 1 and summary["inband_500"] == 1
    assert summary["outcomes"]["ok"] == 1 and summary["outcomes"]["rejected"] == 1
    assert summary["keepalive_frames"] == 2 and summary["passed"] is False
    assert [g["name"] for g in summary["gates"] if not g["passed"]] == ["no_http_500", "no_inband_500"]
    assert len(pd.read_parquet(directory / "frames.parquet")) == 5
    pd.testing.assert_frame_equal(pd.read_parquet(directory / "requests.parquet"), requests)


def test_two_runs_in_one_second_get_two_directories(tmp_path: Path) -> None:
    assert new_run_dir(tmp_path, "same") != new_run_dir(tmp_path, "same")
