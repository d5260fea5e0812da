"""Incremental Server-Sent Events parser that timestamps each frame when its last byte arrives.

Follows the WHATWG event-stream rules: lines end in LF, CR or CRLF (a CR at the end of a read
waits for the next read to know whether an LF follows); ``field:value`` with one optional space
after the colon; several ``data`` lines join with LF; a line starting with ``:`` is a comment;
a blank line ends a frame. Unlike a browser, we keep comment-only frames (``: keep-alive``),
because counting them is the point. Invariant: however a byte stream is split into reads, the
frames (all fields but the arrival time) are the same.

Two guards for streams nobody here wrote: a line longer than ``max_line_bytes`` raises
``LineTooLong`` (the caller stops reading, so a hostile server cannot grow the harness's memory),
and bytes that are not UTF-8 are decoded with replacement characters while ``invalid_utf8`` records
that they came (a browser would replace them silently; for us they are a protocol error).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

KEEP_ALIVE_TEXT = "keep-alive"
DEFAULT_MAX_LINE_BYTES = 1 << 20


class LineTooLong(ValueError):
    """A line of the event stream exceeded the parser's limit; the stream must not be read further."""

    def __init__(self, limit: int) -> None:
        size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
        super().__init__(f"line longer than {size}")


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
    invalid_utf8: bool = False
    """A line of this frame held bytes that are not UTF-8 (its text has replacement characters)."""

    @property
    def is_comment_only(self) -> bool:
        return self.data is None and self.event is None and self.id is None and self.retry is None


DataSink = Callable[[str, int, float], object]
"""Takes a frame that is one ``data`` line: its text, its wire bytes and its arrival time."""
FrameSink = Callable[[Frame, float], object]
"""Takes any other frame and its arrival time."""


class SSEParser:
    """Feed it reads; it hands over the frames each read completed, in order.

    ``feed`` returns them as ``Frame`` objects. ``feed_into`` is the reader's hot path: it hands a
    frame that is one ``data`` line (the usual ``data: {...}\\n\\n``) to ``on_data(text, nbytes, t)``
    without building a ``Frame``, and every other frame to ``on_frame(frame, t)``; for the same
    reads both give the same frames, in the same order, and raise ``LineTooLong`` at the same read.
    """

    __slots__ = ("_buffer", "_frame", "_frame_bytes", "_pending_cr", "invalid_utf8", "max_line_bytes")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.invalid_utf8 = False
        """True once any line held bytes that are not UTF-8 (set as the line arrives, whole frame or not)."""
        self._buffer = b""
        self._frame: Frame | None = None
        self._frame_bytes = 0
        """Wire bytes of the frame under way so far (an LF left over from a split CRLF included):
        never 0 while ``_frame`` is set, since a line's bytes count before it makes the frame."""
        self._pending_cr = False

    def feed(self, chunk: bytes | bytearray, t: float) -> list[Frame]:
        """Parse ``chunk``, received at time ``t``; return the frames it completed, in order.
        Raises ``LineTooLong`` when a line, finished or not, exceeds ``max_line_bytes``."""
        frames: list[Frame] = []
        append = frames.append
        self._parse(chunk, t, lambda text, nbytes, t: append(Frame(t, nbytes, text)), lambda frame, t: append(frame))
        return frames

    def feed_into(self, chunk: bytes | bytearray, t: float, on_data: DataSink, on_frame: FrameSink) -> bool:
        """``feed``, handing each completed frame over as it is found: a single-line ``data`` frame
        as ``on_data(text, nbytes, t)``, any other as ``on_frame(frame, t)``. When a line of this
        read is too long, ``LineTooLong`` is raised before any frame of the read is handed over.
        Returns ``idle``: whether the parser now holds no part of a frame."""
        data = self._buffer + chunk if self._buffer else chunk
        if (
            not self._frame_bytes  # no frame under way
            and not self._pending_cr
            and len(data) <= self.max_line_bytes
            and data.isascii()
            and "\r" not in (text := data.decode("ascii"))
        ):  # the usual read: ASCII, LF line ends, no frame under way, no line that can be too long
            blocks = text.split("\n\n")  # whole frames, then what follows the last blank line
            tail = blocks.pop()
            for block in blocks:
                name, _, value = block.partition(": ")
                if name == "data" and "\n" not in value:  # the frame is one "data: " line
                    on_data(value, len(block) + 2, t)  # ASCII: a byte a character
                else:
                    self._feed_lf((block + "\n\n").encode("ascii"), t, on_data, on_frame)
            if not tail:
                self._buffer = b""
                return True
            rest = bytes(data[len(data) - len(tail) :])  # lines of a frame not yet ended, the last maybe unfinished
            self._buffer = rest[self._feed_lf(rest, t, on_data, on_frame) :] if "\n" in tail else rest
        elif len(data) > self.max_line_bytes:  # a line may be too long
            for frame in self.feed(chunk, t):  # raises before handing over anything, as feed() does
                on_frame(frame, t)
        else:
            self._parse(chunk, t, on_data, on_frame)
        return self.idle

    @property
    def idle(self) -> bool:
        """True when the parser holds no part of a frame: no bytes of an unfinished line, no frame
        under way, no CR waiting for its LF. Then a read parsed alone gives just its own frames."""
        return not (self._buffer or self._frame_bytes or self._pending_cr)

    def _parse(self, chunk: bytes | bytearray, t: float, on_data: DataSink, on_frame: FrameSink) -> None:
        if not chunk:
            return
        if self._pending_cr:
            self._pending_cr = False
            if chunk.startswith(b"\n"):  # the LF of a CRLF split across reads
                chunk = chunk[1:]
                self._frame_bytes += 1
        data = self._buffer + chunk
        if data.find(b"\r") < 0:  # the common case: LF line ends only (not `in`: it tries int first)
            start = self._feed_lf(data, t, on_data, on_frame)
        else:
            start = self._feed_with_cr(data, t, on_frame)
        self._buffer = data[start:]
        if len(self._buffer) > self.max_line_bytes:
            raise LineTooLong(self.max_line_bytes)

    def _feed_lf(self, data: bytes, t: float, on_data: DataSink, on_frame: FrameSink) -> int:
        """Split on LF; returns where the unfinished line starts. A frame that is one ``data`` line
        of UTF-8 starting a frame goes to ``on_data`` straight from the buffer; any other line goes
        through ``_line``, exactly as if the fast path did not exist."""
        find = data.find
        limit = self.max_line_bytes
        start = 0
        while (end := find(b"\n\n", start)) >= 0:
            if self._frame is None and end > start and data.startswith(b"data:", start) and find(b"\n", start, end) < 0:
                if end - start >= limit:  # the line with its LF is longer than the limit
                    raise LineTooLong(limit)
                value = start + 6 if data.startswith(b"data: ", start) else start + 5
                try:
                    text = data[value:end].decode("utf-8")
                except UnicodeDecodeError:
                    pass  # the general path flags it
                else:
                    on_data(text, self._frame_bytes + end - start + 2, t)
                    self._frame_bytes = 0
                    start = end + 2
                    continue
            stop = end + 2  # the lines up to and including the blank line that ends a frame
            while start < stop:
                lf = find(b"\n", start)
                self._line(data[start:lf], lf - start + 1, t, on_frame)
                start = lf + 1
        while (lf := find(b"\n", start)) >= 0:  # lines of a frame not yet ended
            self._line(data[start:lf], lf - start + 1, t, on_frame)
            start = lf + 1
        return start

    def _feed_with_cr(self, data: bytes, t: float, on_frame: FrameSink) -> int:
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
            self._line(data[start:end], end - start + terminator, t, on_frame)
            start = end + terminator

    def _line(self, raw: bytes, nbytes: int, t: float, on_frame: FrameSink) -> None:
        if nbytes > self.max_line_bytes:
            raise LineTooLong(self.max_line_bytes)
        self._frame_bytes += nbytes
        if not raw:
            frame = self._take_frame(t)
            if frame is not None:
                on_frame(frame, t)
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
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            self.invalid_utf8 = frame.invalid_utf8 = True
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

    @property
    def has_partial_frame(self) -> bool:
        """True when bytes of an unfinished frame are buffered (a cut stream)."""
        return bool(self._buffer) or self._frame is not None
