"""The frame trace: one JSON line per SSE frame the server hands to the transport.

Each line is ``{"request_id", "kind", "t", "bytes"}`` with ``t`` from ``time.monotonic()``
(CLOCK_MONOTONIC, shared by every process on the machine), so a benchmark can line up what the
harness measured with what the server sent. ``kind`` is ``data``, ``keepalive``, ``error`` or
``done``. A frame is stamped just before it goes to the transport, with nothing between the
stamp and the send that waits: lines are buffered, and a stream's lines are flushed when the
stream has ended (a write per line handed the interpreter to the server's intake threads between
stamp and send: stamps early by up to 35 ms at 200 streams). So a stream's lines are in the file
soon after its last frame was sent, and all of them once the server has shut down.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import IO

from target_server.keep_alive import KEEP_ALIVE_COMMENT
from target_server.streaming import DONE_FRAME


def frame_kind(frame: bytes) -> str:
    if frame == KEEP_ALIVE_COMMENT:
        return "keepalive"
    if frame == DONE_FRAME:
        return "done"
    if frame.startswith(b'data: {"error"'):
        return "error"
    return "data"


class FrameTracer:
    """Appends trace lines to one file, in 64 KiB blocks."""

    def __init__(self, path: str) -> None:
        self._file: IO[str] = open(path, "a", buffering=1 << 16, encoding="utf-8")  # noqa: SIM115 - closed in close()

    def record(self, request_id: str, frame: bytes) -> None:
        line = {"request_id": request_id, "kind": frame_kind(frame), "t": time.monotonic(), "bytes": len(frame)}
        self._file.write(json.dumps(line) + "\n")

    async def traced(self, request_id: str, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``frames`` unchanged, each recorded just before it goes to the transport; flushed at the end."""
        try:
            async for frame in frames:
                self.record(request_id, frame)
                yield frame
        finally:
            self._file.flush()

    def close(self) -> None:
        self._file.close()
