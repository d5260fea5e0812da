"""Incremental Server-Sent Events parser that timestamps each frame when its last byte arrives.

Follows the WHATWG event-stream rules: lines end in LF, CR or CRLF (a CR at the end of a read
waits for the next read to know whether an LF follows); ``field:value`` with one optional space
after the colon; several ``data`` lines join with LF; a line starting with ``:`` is a comment;
a blank line ends a frame. Unlike a browser, we keep comment-only frames (``: keep-alive``),
because counting them is the point. Invariant: however a byte stream is split into reads, the
frames (all fields but the arrival time) are the same.

Reads that are nothing but whole one-line ``data:`` frames (almost every read of a token stream)
take a shortcut that gives the same frames without the line-by-line walk.

Two guards for streams nobody here wrote: a line longer than ``max_line_bytes`` raises
``LineTooLong`` (the caller stops reading, so a hostile server cannot grow the harness's memory),
and bytes that are not UTF-8 are decoded with replacement characters while ``invalid_utf8`` records
that they came (a browser would replace them silently; for us they are a protocol error).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadtests.errors import LineTooLong

KEEP_ALIVE_TEXT = "keep-alive"
DEFAULT_MAX_LINE_BYTES = 1 << 20


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


class SSEParser:
    """Feed it reads; it returns the frames each read completed."""

    __slots__ = ("_buffer", "_frame", "_frame_bytes", "_pending_cr", "invalid_utf8", "max_line_bytes")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.invalid_utf8 = False
        """True once any line held bytes that are not UTF-8 (set as the line arrives, whole frame or not)."""
        self._buffer = b""
        self._frame: Frame | None = None
        self._frame_bytes = 0
        self._pending_cr = False

    def feed(self, chunk: bytes, t: float) -> list[Frame]:
        """Parse ``chunk``, received at time ``t``; return the frames it completed, in order.
        Raises ``LineTooLong`` when a line, finished or not, exceeds ``max_line_bytes``, with the
        frames completed before it."""
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
        try:
            if b"\r" not in data:  # the common case: LF line ends only
                if self._frame is None and not self._frame_bytes and data.startswith(b"data: "):
                    start = self._leading_data_frames(data, t, frames)
                while (end := data.find(b"\n", start)) >= 0:
                    self._line(data[start:end], end - start + 1, t, frames)
                    start = end + 1
            else:
                start = self._feed_with_cr(data, t, frames)
            self._buffer = data[start:]
            if len(self._buffer) > self.max_line_bytes:
                raise LineTooLong(self.max_line_bytes)
        except LineTooLong as exc:
            exc.frames = frames
            raise
        return frames

    def _leading_data_frames(self, data: bytes, t: float, frames: list[Frame]) -> int:
        """Between frames, the shape of almost every read of a token stream: whole ``data: <text>``
        frames of one line each, up to the last blank line. Appends them to ``frames`` exactly as
        the line-by-line path would parse them and returns where they end; returns 0 and appends
        nothing if any of them is not of that shape (another field, a comment, a blank line too
        many, a line over the limit, text that is not UTF-8): that path parses them then."""
        size = len(data)
        if data.find(b"\n") == size - 2 and data[-1] == 0x0A:  # one whole frame, and nothing after it
            if size - 2 >= self.max_line_bytes:  # its LF would take it over the limit
                return 0
            try:
                frames.append(Frame(t, size, data[6:-2].decode("utf-8")))
            except UnicodeDecodeError:
                return 0
            return size
        end = data.rfind(b"\n\n") + 2
        if end < 2:  # no blank line: no whole frame yet
            return 0
        lines = data[:end].split(b"\n\n")
        lines.pop()  # what follows the last blank line: empty
        if not lines or data.count(b"\n", 0, end) != 2 * len(lines):  # a line break inside a piece
            return 0
        limit = self.max_line_bytes
        parsed = []
        for line in lines:
            if not line.startswith(b"data: ") or len(line) >= limit:  # its LF would take it over the limit
                return 0
            try:
                parsed.append(Frame(t=t, nbytes=len(line) + 2, data=line[6:].decode("utf-8")))
            except UnicodeDecodeError:
                return 0
        frames.extend(parsed)
        return end

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

    def _line(self, raw: bytes, nbytes: int, t: float, frames: list[Frame]) -> None:
        if nbytes > self.max_line_bytes:
            raise LineTooLong(self.max_line_bytes)
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
