"""Recorded batches as the live metrics count them (``loadtests.record.live_metrics``): a few streams
of each kind through the real ``StreamTracker`` and ``Recorder``, for the exporter's tests and the
dashboard's, which checks its queries against the series the exporter really serves."""

from __future__ import annotations

from typing import Any

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.record.live_metrics import RunLabels
from loadtests.record.recorder import Recorder

TOKEN = '{"choices":[{"index":0,"delta":{"content":"a"}}]}'
ERROR = '{"error":{"message":"boom","type":"InternalServerError","code":500}}'
LABELS = RunLabels("mixed", "http://127.0.0.1:8000", "none", "/reports/mixed-1", 0.25)


def ok_stream(request_id: str, tokens: int = 4, keepalives: int = 2) -> StreamTracker:
    """A 200 stream: keep-alives, then ``tokens`` data frames 0.1 s apart, then [DONE]."""
    stream = StreamTracker(RequestPlan(request_id, "chat:x", "chat"), 0.0, "local")
    stream.headers(200, 0.01, "text/event-stream")
    t = 0.01
    for _ in range(keepalives):
        t += 0.25
        stream.frame(Frame(t=t, nbytes=14, comments=["keep-alive"]), t)
    for _ in range(tokens):
        t += 0.1
        stream.frame(Frame(t=t, nbytes=60, data=TOKEN), t)
    stream.frame(Frame(t=t + 0.01, nbytes=14, data="[DONE]"), t + 0.01)
    return stream


def inband_error_stream(request_id: str) -> StreamTracker:
    stream = StreamTracker(RequestPlan(request_id, "completions:x", "completions"), 0.0, "local")
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(Frame(t=0.1, nbytes=60, data=TOKEN), 0.1)
    stream.frame(Frame(t=0.2, nbytes=80, data=ERROR), 0.2)
    return stream


def protocol_error_stream(request_id: str) -> StreamTracker:
    stream = StreamTracker(RequestPlan(request_id, "chat:x", "chat"), 0.0, "local")
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(Frame(t=0.1, nbytes=20, data="not json"), 0.1)
    return stream


def batch(keep_ok_frames: bool = True, started: int = 0, worker: str = "local") -> dict[str, Any]:
    recorder = Recorder()
    for stream in (ok_stream("a1"), ok_stream("a2", tokens=3), inband_error_stream("b1"), protocol_error_stream("c1")):
        row = stream.finish(1.0)
        recorder.add(row, stream.frames if keep_ok_frames or row.outcome != "ok" else None)
    taken = recorder.take_batch()
    taken["started"] = started or taken["started"]
    return {**taken, "worker": worker, "lag": lag_samples(worker, [0.0004, 0.002, 0.03])}


def lag_samples(worker: str, lags: list[float]) -> dict[str, list[Any]]:
    """As ``LagMonitor.take`` gives them."""
    count = len(lags)
    return {"worker": [worker] * count, "time": [0.0] * count, "t_mono": [0.0] * count, "lag_s": lags}
