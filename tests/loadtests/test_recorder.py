"""The recorder: rows and frames in shippable batches, nothing lost or doubled."""

from __future__ import annotations

import msgpack

from loadtests.outcome import RequestPlan, StreamTracker
from loadtests.recorder import FRAME_COLUMNS, Recorder
from loadtests.sse import Frame


def finished(request_id: str, frames: int) -> StreamTracker:
    stream = StreamTracker(RequestPlan(request_id, "n", "chat"), 0.0)
    stream.headers(200, 0.01)
    for index in range(frames):
        stream.frame(Frame(t=0.0, nbytes=14, comments=["keep-alive"]), 0.1 * (index + 1))
    return stream


def test_batches_are_plain_msgpack_types_and_lose_nothing() -> None:
    worker, master = Recorder(), Recorder()
    for index in range(5):
        stream = finished(f"r{index}", index)
        worker.add(stream.finish(1.0), stream.frames)
        if index == 2:
            master.ingest(msgpack.unpackb(msgpack.packb(worker.take_batch())))
    master.ingest(msgpack.unpackb(msgpack.packb(worker.take_batch())))
    assert len(worker) == 0
    assert sorted(row["request_id"] for row in master.rows) == [f"r{i}" for i in range(5)]
    frames = master.frames_table()
    assert list(frames.columns) == list(FRAME_COLUMNS)
    assert frames.groupby("request_id").size().to_dict() == {f"r{i}": i for i in range(1, 5)}


def test_tables_have_nullable_integer_columns() -> None:
    recorder = Recorder()
    recorder.add(StreamTracker(RequestPlan("r", "n", "chat"), 0.0).finish(1.0, "connect_error"), None)
    table = recorder.requests_table()
    assert str(table["status"].dtype) == "Int64" and table["status"].isna().all()
    assert table.loc[0, "outcome"] == "connect_error"
