"""The recorder: rows and frames in shippable batches, nothing lost or doubled."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack  # type: ignore[import-untyped]  # ships no types
import pytest

from loadtests.client.outcome import Outcome, RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.record.parts_writer import UNWRITABLE_ROWS, RunWriter
from loadtests.record.recorder import FRAME_COLUMNS, Recorder
from tests.loadtests.tables import requests_of

pytestmark = pytest.mark.fast


def finished(request_id: str, frames: int) -> StreamTracker:
    stream = StreamTracker(RequestPlan(request_id, "n", "chat"), 0.0)
    stream.headers(200, 0.01, "text/event-stream")
    for index in range(frames):
        stream.frame(Frame(t=0.0, nbytes=14, comments=["keep-alive"]), 0.1 * (index + 1))
    return stream


def test_batches_are_plain_msgpack_types_and_lose_nothing(tmp_path: Path) -> None:
    """What a worker ships, through msgpack as Locust sends it, into the master's run directory."""
    worker, master = Recorder(), RunWriter(tmp_path)
    for index in range(5):
        stream = finished(f"r{index}", index)
        worker.add(stream.finish(1.0), stream.frames)
        if index == 2:
            master.write_batch(msgpack.unpackb(msgpack.packb(worker.take_batch())))
    master.write_batch(msgpack.unpackb(msgpack.packb(worker.take_batch())))
    assert len(worker) == 0
    assert sorted(master.run.read_requests()["request_id"]) == [f"r{i}" for i in range(5)]
    frames = master.run.read_frames()
    assert list(frames.columns) == list(FRAME_COLUMNS)
    assert frames.groupby("request_id").size().to_dict() == {f"r{i}": i for i in range(1, 5)}


def test_tables_have_nullable_integer_columns() -> None:
    recorder = Recorder()
    recorder.add(StreamTracker(RequestPlan("r", "n", "chat"), 0.0).finish(1.0, Outcome.CONNECT_ERROR), None)
    table = requests_of(recorder)
    assert str(table["status"].dtype) == "Int64" and table["status"].isna().all()
    assert table.loc[0, "outcome"] == "connect_error"


def test_a_row_that_does_not_fit_the_schema_is_kept_as_text_and_the_rest_written(tmp_path: Path) -> None:
    recorder, writer = Recorder(), RunWriter(tmp_path / "run")
    for index in range(3):
        stream = finished(f"r{index}", 1)
        recorder.add(stream.finish(1.0), stream.frames)
    batch = recorder.take_batch()
    batch["rows"][1]["usage_prompt_tokens"] = 2**64  # what the tracker never lets through: a bug of ours
    writer.write_batch(batch)
    assert sorted(writer.run.read_requests()["request_id"]) == ["r0", "r2"]
    assert (writer.rows_written, writer.rows_unwritable) == (2, 1)
    (kept,) = [json.loads(line) for line in (writer.directory / UNWRITABLE_ROWS).read_text().splitlines()]
    assert kept["request_id"] == "r1" and kept["usage_prompt_tokens"] == 2**64
    assert len(writer.run.read_frames()) == 3  # frames are not lost with their row


def test_a_batch_that_cannot_be_written_stays_in_memory_and_is_written_later(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    writer = RunWriter(directory)
    recorder = Recorder()
    recorder.add(finished("early", 0).finish(1.0), None)
    writer.requests_dir.rmdir()
    writer.requests_dir.write_text("in the way")  # writing a part now fails with an OSError
    writer.write_batch(recorder.take_batch())
    assert writer.rows_pending == 1 and writer.rows_written == 0
    writer.requests_dir.unlink()
    writer.requests_dir.mkdir()
    recorder.add(finished("late", 0).finish(1.0), None)
    writer.write_batch(recorder.take_batch())
    assert writer.rows_pending == 0
    assert sorted(writer.run.read_requests()["request_id"]) == ["early", "late"]


def test_a_retry_after_a_failed_frames_write_writes_no_row_twice(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    recorder = Recorder()
    stream = finished("once", 3)
    recorder.add(stream.finish(1.0), stream.frames)
    writer.frames_dir.rmdir()
    writer.frames_dir.write_text("in the way")  # the requests part is written, then the frames part fails
    writer.write_batch(recorder.take_batch())
    assert (writer.rows_written, writer.rows_pending) == (1, 0)  # the row is on disk, its frames are not
    writer.frames_dir.unlink()
    writer.frames_dir.mkdir()
    writer.write_batch(recorder.take_batch())  # the retry
    assert list(writer.run.read_requests()["request_id"]) == ["once"]
    assert set(writer.run.read_frames()["request_id"]) == {"once"} and len(writer.run.read_frames()) == len(
        stream.frames
    )
