"""The recorder: rows and frames in shippable batches, nothing lost or doubled."""

from __future__ import annotations

from pathlib import Path

import msgpack

from loadtests.outcome import RequestPlan, StreamTracker
from loadtests.recorder import FRAME_COLUMNS, Recorder
from loadtests.run_writer import RunWriter
from loadtests.sse import Frame


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
    assert sorted(master.requests_table()["request_id"]) == [f"r{i}" for i in range(5)]
    frames = master.frames_table()
    assert list(frames.columns) == list(FRAME_COLUMNS)
    assert frames.groupby("request_id").size().to_dict() == {f"r{i}": i for i in range(1, 5)}


def test_tables_have_nullable_integer_columns() -> None:
    recorder = Recorder()
    recorder.add(StreamTracker(RequestPlan("r", "n", "chat"), 0.0).finish(1.0, "connect_error"), None)
    table = recorder.requests_table()
    assert str(table["status"].dtype) == "Int64" and table["status"].isna().all()
    assert table.loc[0, "outcome"] == "connect_error"
