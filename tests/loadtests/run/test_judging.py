"""Judging a --host run whose server's keep-alive interval was not given: inferred from its comments."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import KEEP_ALIVE_TEXT, Frame
from loadtests.record.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, Recorder
from loadtests.record.run_dir import RunDir, RunRecord
from loadtests.run.judging import JudgeOptions, judge
from tests.loadtests.locust_run import rejudged_alike

pytestmark = pytest.mark.fast

HOST_SETTINGS = {"proxy": "none", "keep_alive_interval": None, "server_args": None, "host": "http://vllm:8000"}


def run_with(tmp_path: Path, comments_at: list[list[float]]) -> RunDir:
    """A run directory of raw streams, each with keep-alive comments at the given times, then a token."""
    recorder = Recorder()
    for index, times in enumerate(comments_at):
        tracker = StreamTracker(RequestPlan(f"r{index}", "n", "completions"), 0.0)
        tracker.headers(200, 0.1, "text/event-stream")
        for t in times:
            tracker.frame(Frame(t, 14, comments=[KEEP_ALIVE_TEXT]), t)
        first_token = (times[-1] if times else 0.1) + 0.3
        tracker.frame(Frame(first_token, 30, data='{"choices": [{"text": "a"}]}'), first_token)
        tracker.frame(Frame(first_token, 14, data="[DONE]"), first_token)
        recorder.add(tracker.finish(first_token), tracker.frames)
    run = RunDir(tmp_path / "s-20260101T000000Z")
    run.path.mkdir()
    pq.write_table(pa.Table.from_pylist(recorder.rows, schema=REQUEST_SCHEMA), run.path / RunDir.REQUESTS)
    pq.write_table(pa.Table.from_pydict(recorder.frames, schema=FRAME_SCHEMA), run.path / RunDir.FRAMES)
    return run


def test_an_unknown_interval_is_inferred_from_the_comments_and_recorded_as_inferred(tmp_path: Path) -> None:
    run = run_with(tmp_path, [[1.1, 2.1, 3.1], [1.1, 2.102], [1.1]])
    settings = {**HOST_SETTINGS, "keep_alive_interval_source": "unknown"}
    summary = judge(RunRecord(run), JudgeOptions([], scenario="s", settings=settings), html=False)
    assert summary.settings["keep_alive_interval"] == 1.0
    assert summary.settings["keep_alive_interval_source"] == "inferred"
    covered = next(gate for gate in summary.gates if gate.name == "keepalive_covered")
    assert covered.passed and not covered.skipped, covered.detail
    assert "the interval inferred from 5 comments on 2 streams" in covered.detail
    assert rejudged_alike(run.path)["settings"]["keep_alive_interval"] == 1.0  # a re-judgement keeps it


def test_with_no_comments_to_infer_from_the_keepalive_gate_is_skipped_and_the_run_passes(tmp_path: Path) -> None:
    run = run_with(tmp_path, [[], []])
    summary = judge(
        RunRecord(run),
        JudgeOptions([], scenario="s", settings={**HOST_SETTINGS, "keep_alive_interval_source": "unknown"}),
    )
    assert summary.settings["keep_alive_interval_source"] == "unknown" and summary.passed
    (covered,) = [gate for gate in summary.gates if gate.name == "keepalive_covered"]
    assert covered.skipped and "pass --keep-alive-interval S" in covered.detail
    assert rejudged_alike(run.path)["gates"] == summary.to_json()["gates"]


def test_a_given_interval_is_not_second_guessed(tmp_path: Path) -> None:
    run = run_with(tmp_path, [[1.1, 2.1, 3.1]])
    settings = {**HOST_SETTINGS, "keep_alive_interval": 0.5, "keep_alive_interval_source": "given"}
    summary = judge(RunRecord(run), JudgeOptions([], scenario="s", settings=settings), html=False)
    assert summary.settings == settings and "keepalive_covered" not in [gate.name for gate in summary.gates]


def test_a_proxy_gate_told_no_interval_names_the_one_inferred(tmp_path: Path) -> None:
    from loadtests.judge.gates import NoProxyTimeouts

    run = run_with(tmp_path, [[1.1, 2.1, 3.1], [1.1, 2.1]])
    settings = {**HOST_SETTINGS, "keep_alive_interval_source": "unknown", "proxy_read_timeout": 2.0}
    summary = judge(
        RunRecord(run), JudgeOptions([NoProxyTimeouts(2.0, None)], scenario="s", settings=settings), html=False
    )
    (stored,) = [spec for spec in summary.gate_specs if spec["type"] == "NoProxyTimeouts"]
    assert stored["keep_alive_interval"] == 1.0


def test_a_judgement_that_writes_the_report_reads_the_frames_file_once_and_judges_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's end reads every frame once (the report shows them all); the inference and the
    figures slice that table, and the summary is the one a judgement reading columns writes."""
    run = run_with(tmp_path, [[1.1, 2.1, 3.1], [1.1, 2.102]])
    settings = {**HOST_SETTINGS, "keep_alive_interval_source": "unknown"}
    by_columns = judge(RunRecord(run), JudgeOptions([], scenario="s", settings=settings), html=False).to_json()
    reads: list[list[str] | None] = []
    read_frames = RunDir.read_frames

    def counted(self: RunDir, columns: list[str] | None = None) -> pd.DataFrame:
        reads.append(columns)
        return read_frames(self, columns)

    monkeypatch.setattr(RunDir, "read_frames", counted)
    record = RunRecord(run)
    record.read_every_frame()
    once = judge(record, JudgeOptions([], scenario="s", settings=settings), html=False).to_json()
    assert reads == [None]  # one read of every column; without read_every_frame, two of some columns
    assert once == by_columns


def test_a_damaged_frames_file_read_whole_is_left_to_the_reads_that_say_so(tmp_path: Path) -> None:
    """The run's end must reach its verdict: reading every frame up front raises nothing, and a
    later read of the file fails as it did before (the figures' read is left out, saying so)."""
    run = run_with(tmp_path, [[1.1, 2.1]])
    (run.path / RunDir.FRAMES).write_bytes(b"not parquet")
    record = RunRecord(run)
    record.read_every_frame()
    with pytest.raises(ValueError, match="Parquet"):
        record.frame_columns(["t"])
