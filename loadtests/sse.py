"""Incremental Server-Sent Events parser that timestamps each frame when its last byte arrives.

Follows the WHATWG event-stream rules: lines end in LF, CR or CRLF (a CR at the end of a read
waits for the next read to know whether an LF follows); ``field:value`` with one optional space
after the colon; several ``data`` lines join with LF; a line starting with ``:`` is a comment;
a blank line ends a frame. Unlike a browser, we keep comment-only frames (``: keep-alive``),
because counting them is the point. Invariant: however a byte stream is split into reads, the
frames (all fields but the arrival time) are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

KEEP_ALIVE_TEXT = "keep-alive"


@dataclass(slots=True)
class Frame:
    """One blank-line-terminated block of an event stream."""

    t: float
    """Arrival time of the read that completed the frame (caller's clock)."""
    nbytes: int
    """Bytes of the frame on the wire, its terminating blank line included (a CRLF split across two
    reads counts its LF toward the next frame, because the frame is complete at the CR)."""
    data: str | None = None
    """``data`` lines joined with LF; ``None`` when the frame had no ``data`` field."""
    event: str | None = None
    id: str | None = None
    retry: str | None = None
    comments: list[str] = field(default_factory=list)

    @property
    def is_comment_only(self) -> bool:
        return self.data is None and self.event is None and self.id is None and self.retry is None


class SSEParser:
    """Feed it reads; it returns the frames each read completed."""

    __slots__ = ("_buffer", "_frame", "_frame_bytes", "_pending_cr")

    def __init__(self) -> None:
        self._buffer = b""
        self._frame: Frame | None = None
        self._frame_bytes = 0
        self._pending_cr = False

    def feed(self, chunk: bytes, t: float) -> list[Frame]:
        """Parse ``chunk``, received at time ``t``; return the frames it completed, in order."""
        frames: list[Frame] = []
        if not chunk:
            return frames
        if self._pending_cr:
            self._pending_cr = False
            if chunk.startswith(b"\n"):  # the LF of a CRLF split across reads
                chunk = chunk[1:]
                self._frame_bytes += 1
        data = self._buffer + chunk
        start = 0
        if b"\r" not in data:  # the common case: LF line ends only
            while (end := data.find(b"\n", start)) >= 0:
                self._line(data[start:end], end - start + 1, t, frames)
                start = end + 1
        else:
            start = self._feed_with_cr(data, t, frames)
        self._buffer = data[start:]
        return frames

    def _feed_with_cr(self, data: bytes, t: float, frames: list[Frame]) -> int:
        """Split on CRLF, CR or LF; returns where the unfinished line starts."""
        start = 0
        size = len(data)
        while True:
            lf = data.find(b"\n", start)
            cr = data.find(b"\r", start, lf if lf >= 0 else size)
            if cr < 0 and lf < 0:
                return start
            if cr < 0:
                end, terminator = lf, 1
            elif cr + 1 < size:
                end, terminator = cr, 2 if data[cr + 1] == 0x0A else 1
            else:  # CR ends the read: the line ends here; an LF opening the next read belongs to it
                end, terminator = cr, 1
                self._pending_cr = True
            self._line(data[start:end], end - start + terminator, t, frames)
            start = end + terminator

    def feed_line(self, line: bytes, t: float) -> Sequence[Frame]:
        """``feed()`` for exactly one LF-terminated line (what ``readline(b"\\n")`` returns), with
        a fast path when nothing is buffered and the line has no CR: no joining, no searching."""
        if self._buffer or self._pending_cr or b"\r" in line or not line.endswith(b"\n"):
            return self.feed(line, t)
        self._frame_bytes += len(line)
        if len(line) == 1:
            frame = self._take_frame(t)
            return (frame,) if frame is not None else ()
        self._field(line[:-1], t)
        return ()

    def _line(self, raw: bytes, nbytes: int, t: float, frames: list[Frame]) -> None:
        self._frame_bytes += nbytes
        if not raw:
            frame = self._take_frame(t)
            if frame is not None:
                frames.append(frame)
        else:
            self._field(raw, t)

    def _take_frame(self, t: float) -> Frame | None:
        """A blank line ended the current frame (if any): stamp and hand it over."""
        frame = self._frame
        if frame is not None:
            frame.nbytes = self._frame_bytes
            frame.t = t
            self._frame = None
        self._frame_bytes = 0
        return frame

    def _field(self, raw: bytes, t: float) -> None:
        frame = self._frame
        if frame is None:
            frame = self._frame = Frame(t=t, nbytes=0)
        line = raw.decode("utf-8", errors="replace")
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if not name:
            frame.comments.append(value)
        elif name == "data":
            frame.data = value if frame.data is None else frame.data + "\n" + value
        elif name == "event":
            frame.event = value
        elif name == "id":
            if "\0" not in value:
                frame.id = value
        elif name == "retry":
            frame.retry = value

    def close(self) -> list[Frame]:
        """End of stream: a frame without its blank line is incomplete and, per the spec, dropped.
        Returns nothing; kept for symmetry so callers can say where the stream ended."""
        self._buffer = b""
        self._frame = None
        self._frame_bytes = 0
        self._pending_cr = False
        return []

    @property
    def has_partial_frame(self) -> bool:
        """True when bytes of an unfinished frame are buffered (a cut stream)."""
        return bool(self._buffer) or self._frame is not None
