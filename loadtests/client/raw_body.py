"""One raw response's body read as its bytes arrive, split into frames, timed and judged.

The raw user's hot path (``loadtests.load.users.SSEUser`` reads every stream through it): each receive
goes through the HTTP parser (``loadtests.client.response_end.FramedResponse``), the SSE parser and the
tracker. Here, below Locust, so that it can be replayed and timed without a Locust process
(``tests/loadtests/load/golden_reads.py``, ``bench/hot_path.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
from types import ModuleType
from typing import Any

from geventhttpclient.response import HTTPParseError

from loadtests.client import kernel_stamps as arrival_clock
from loadtests.client import response_end
from loadtests.client.body_mux import MuxedBody, TLSReads
from loadtests.client.outcome import StreamTracker
from loadtests.client.sse import SSEParser

_feed_body = response_end.feed_body

PURE_PYTHON_READS = "SSE_SOAK_PURE_PYTHON_READS"
"""Set to 1: read through the Python path even where the compiled one is built."""


def _compiled_reads() -> ModuleType | None:
    """``loadtests.client._fastread`` when it was built (``pip install -e .`` compiles it; without a C
    compiler the install goes on without it) and not refused by ``SSE_SOAK_PURE_PYTHON_READS=1``."""
    if os.environ.get(PURE_PYTHON_READS, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module("loadtests.client._fastread")
    except ImportError:
        return None


_fastread = _compiled_reads()
READ_PATH = "python" if _fastread is None else "compiled"
"""How this process reads raw bodies: "compiled" (``_fastread``) or "python"."""


def _reads_without_waiting(os_socket: Any, size: int) -> bool:
    """The compiled reader's preconditions on the socket: non-blocking (gevent's OS socket is), and
    reads within its buffer (``_fastread.MAX_READ``)."""
    assert _fastread is not None
    return bool(os_socket.gettimeout() == 0.0 and 0 < size <= _fastread.MAX_READ)


class RawBody:
    """One raw response's body as its bytes arrive: split into frames, each timed (its read's kernel
    arrival stamp, ``loadtests.client.kernel_stamps``, never before the headers or the previous read) and
    judged by the tracker. Every body is read in the hub with every other one
    (``loadtests.client.body_mux``); a TLS body's bytes are decrypted above the OS socket, so they come
    unstamped, timed as the hub reads them.

    (geventhttpclient's ``readline()`` would wait for a whole line however long it grows, and its
    ``read(n)`` for ``n`` bytes; this takes what each receive brought, so frames are timed as they
    arrive and the parser bounds the line length.)"""

    __slots__ = ("_direct", "_feed", "_frame", "_started", "parser", "raw", "t", "tracker", "wait")

    def __init__(self, raw: Any, parser: SSEParser, tracker: StreamTracker, started: float) -> None:
        self.raw = raw
        self.parser = parser
        self.tracker = tracker
        self._feed, self._frame = parser.feed, tracker.frame
        self._direct = isinstance(raw, response_end.FramedResponse) and raw.feeds_body_directly()
        """Reads go straight to llhttp (``response_end.feed_body``), not through ``raw.feed``."""
        self._started = started
        self.t = tracker.ttfb or 0.0
        """Seconds after the send at which the last read arrived."""
        self.wait: float | None = None
        """How long the last read's bytes lay in the kernel before they were read (None: unknown)."""

    def read_to_end(self) -> bool:
        """Read and judge the body to its end; True when the stream ended at a frame (``[DONE]``, an
        error frame or one that broke the protocol): nothing after it is read or waited for, as the
        openai SDK stops there, so the row's duration ends at that frame, not at the body's end.
        Raises ``TimeoutError`` after the client's idle timeout without a byte, ``OSError`` or
        ``HTTPParseError`` when the connection ends mid-body (the frames before it kept), ``LineTooLong``."""
        raw = self.raw
        if raw._body_buffer and self.take(take_buffered(raw), None, time.monotonic()):  # came with the headers
            return True
        if raw.body_failure is not None:  # bad framing in those bytes: the frames before it are taken
            raise raw.body_failure
        if raw.message_complete:
            return False
        sock = raw._sock
        if sock is None:
            raise ConnectionResetError("connection released mid-body")
        if isinstance(sock, arrival_clock.TLS_SOCKETS):
            return self._read_tls(sock)
        stamped = arrival_clock.stamp_arrivals(sock)
        muxed = MuxedBody(sock._sock, stamped, raw.block_size, sock.timeout, self.take_read)
        if _fastread is not None and stamped and self._direct and _reads_without_waiting(sock._sock, raw.block_size):
            muxed.reader = _fastread.Reader(self, muxed)  # the same records; the plain reads in C
        muxed.read()
        return self.tracker.stream_ended

    def _read_tls(self, sock: Any) -> bool:
        with TLSReads(sock) as reads:
            MuxedBody(reads, False, self.raw.block_size, reads.idle_timeout, self.take_read).read(read_first=True)
        return self.tracker.stream_ended

    def keep_connection_if_whole(self) -> None:
        """The stream ended at a frame: if the rest of the body has arrived already (the last chunk
        after ``[DONE]``, usually), read it without waiting, so the connection can be reused; otherwise
        it is closed on release, as the openai SDK closes it."""
        if not self.raw.message_complete:
            with contextlib.suppress(HTTPParseError, OSError):
                arrived_already(self.raw)

    def take_read(self, data: bytes, arrived: float | None, read_at: float) -> bool:
        """One receive (``b""``: the peer closed) through the HTTP parser; True when the body needs
        no more: it ended, or the stream ended at a frame."""
        raw = self.raw
        try:
            if self._direct:
                _feed_body(raw, data)
            else:
                raw.feed(data)
        except HTTPParseError as exc:
            return self.take_failed_feed(exc, data, arrived, read_at)
        return self.take_fed(data, arrived, read_at)

    def take_fed(self, data: bytes, arrived: float | None, read_at: float) -> bool:
        """``take_read`` once the HTTP parser has been fed ``data``: what it decoded, taken."""
        raw = self.raw
        if not data and not raw.message_complete:
            raise ConnectionResetError("connection closed mid-body")
        if raw._body_buffer and self.take(take_buffered(raw), arrived, read_at):
            return True
        return raw.message_complete

    def take_failed_feed(self, failure: HTTPParseError, data: bytes, arrived: float | None, read_at: float) -> bool:
        """``take_read`` once the HTTP parser refused ``data`` with ``failure``: bad framing (a chunk
        size, say), the frames before it the stream's; or excess after the body's end, dropped."""
        raw = self.raw
        if not (self._direct and response_end.excess_dropped(raw)):
            if raw._body_buffer and self.take(take_buffered(raw), arrived, read_at):
                return True  # it ended before the bad bytes, as the SDK ends it there
            raise failure
        return self.take_fed(data, arrived, read_at)

    def take(self, chunk: bytes, arrived: float | None, read_at: float) -> bool:
        """Body bytes that arrived at ``arrived`` (None: unknown) and were read at ``read_at``; True
        when the stream ended at one of their frames (however the reads were split)."""
        self.wait = None if arrived is None else read_at - arrived
        t = self.t = max(self.t, (read_at if arrived is None else arrived) - self._started)
        on_frame, wait, tracker = self._frame, self.wait, self.tracker
        for frame in self._feed(chunk, t):
            on_frame(frame, t, wait)
            if tracker.stream_ended:
                return True
        return False

    def take_whole_frames(self, frames: list[Any]) -> None:
        """Frames that came whole in the read that also brought a line over the limit."""
        for frame in frames:
            self._frame(frame, self.t, self.wait)

    def take_arrived_already(self) -> None:
        """The run stopped the reader: what had arrived is the stream's (the frames still on the wire
        are not waited for), timed now."""
        self.t = max(self.t, time.monotonic() - self._started)
        for frame in self._feed(arrived_already(self.raw), self.t):
            self._frame(frame, self.t, None)


def arrived_already(raw: Any) -> bytes:
    """The body bytes that had arrived when the run stopped the reader: read but not parsed yet, or
    waiting in the socket's receive buffer (read without waiting: gevent's socket wraps the OS one,
    which is non-blocking; a TLS one is read decrypted, through ``TLSReads``, never its OS socket's
    ciphertext). Frames still on the wire are not waited for."""
    gevent_socket = raw._sock
    if gevent_socket is None:
        return take_buffered(raw)
    tls = isinstance(gevent_socket, arrival_clock.TLS_SOCKETS)
    reading = TLSReads(gevent_socket) if tls else contextlib.nullcontext(gevent_socket._sock)
    with reading as sock, contextlib.suppress(OSError):  # BlockingIOError: nothing more has arrived
        while not raw.message_complete:
            data = sock.recv(raw.block_size)
            if not data:
                break
            raw.feed(data)
    return take_buffered(raw)


def take_buffered(raw: Any) -> bytes:
    """The body bytes the HTTP parser has decoded and nobody has taken yet; taken now."""
    buffer = raw._body_buffer
    chunk = bytes(buffer)
    buffer.clear()
    return chunk
