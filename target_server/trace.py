"""The frame trace: one JSON line per SSE frame the server hands to the transport.

Each line is ``{"request_id", "kind", "t", "bytes", "pid"}`` with ``t`` from ``time.monotonic()``
(CLOCK_MONOTONIC, shared by every process on the machine), so a benchmark can line up what the
harness measured with what the server sent. ``kind`` is ``data``, ``keepalive``, ``error`` or
``done``; ``pid`` is the server process that sent it. A frame is stamped just before it goes to
the transport, with nothing between the stamp and the send that waits: lines are buffered, and
a stream's lines are flushed when the stream has ended (a write per line handed the interpreter
to the server's intake threads between stamp and send: stamps early by up to 35 ms at 200
streams). So a stream's lines are in the file
soon after its last frame was sent, and all of them once the server has shut down.

Every process of ``--api-server-count`` appends to the same file, so a reader reads one file as
before. Invariant: each ``write`` is whole lines, on a descriptor opened ``O_APPEND``, so lines
from different processes never interleave within a line (Linux appends one ``write`` to a regular
file whole, under the file's lock); only the order of blocks between processes is arbitrary.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator

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


BLOCK_BYTES = 1 << 16


class FrameTracer:
    """Appends trace lines to one file, in blocks of whole lines of about ``BLOCK_BYTES``."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._pid = os.getpid()
        self._pending: list[str] = []
        self._pending_chars = 0

    def record(self, request_id: str, frame: bytes) -> None:
        kind, now = frame_kind(frame), time.monotonic()
        line = {"request_id": request_id, "kind": kind, "t": now, "bytes": len(frame), "pid": self._pid}
        text = json.dumps(line) + "\n"
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= BLOCK_BYTES:
            self.flush()

    def flush(self) -> None:
        """Append the pending lines in one ``write`` (more only if the kernel takes part of it)."""
        if not self._pending:
            return
        block = memoryview("".join(self._pending).encode())
        self._pending.clear()
        self._pending_chars = 0
        while block:
            block = block[os.write(self._fd, block) :]

    async def traced(self, request_id: str, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``frames`` unchanged, each recorded just before it goes to the transport; flushed at the end."""
        try:
            async for frame in frames:
                self.record(request_id, frame)
                yield frame
        finally:
            self.flush()

    def close(self) -> None:
        self.flush()
        os.close(self._fd)
