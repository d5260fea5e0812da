"""The frame trace: one JSON line per SSE frame the server hands to the transport.

Each line is ``{"request_id", "kind", "t", "bytes"}`` with ``t`` from ``time.monotonic()``
(CLOCK_MONOTONIC, shared by every process on the machine), so a benchmark can line up what the
harness measured with what the server sent. ``kind`` is ``data``, ``keepalive``, ``error`` or
``done``. Lines are flushed as written: a killed server leaves a complete trace up to its death.
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
    """Appends trace lines to one file, line-buffered."""

    def __init__(self, path: str) -> None:
        self._file: IO[str] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in close()

    def record(self, request_id: str, frame: bytes) -> None:
        line = {"request_id": request_id, "kind": frame_kind(frame), "t": time.monotonic(), "bytes": len(frame)}
        self._file.write(json.dumps(line) + "\n")

    async def traced(self, request_id: str, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``frames`` unchanged, each recorded just before it goes to the transport."""
        async for frame in frames:
            self.record(request_id, frame)
            yield frame

    def close(self) -> None:
        self._file.close()
