"""What the openai SDK reads, and what it hides from its caller: one decoding path for both clients.

``WireTap`` is an httpx response hook (the SDK's client takes ``event_hooks``) that wraps each
response's byte stream. Every chunk goes through our own ``SSEParser``, the one the raw client
uses, and the SDK is handed the data events that parser dispatched, written out again as plain
``data:`` lines: so both clients read the same events from the same bytes. Without it they
parted: the SDK dispatches an event for a ``retry:``-only block (the SSE spec dispatches
nothing; the SDK then failed to decode "" as JSON), and it stops at any data starting with
``[DONE]``. Comments (keep-alives) are not handed over: the SDK would drop them anyway.

Below the SDK the tap also notes what the SDK does not say: whether ``[DONE]`` came, the bytes,
a malformed ``[DONE]`` marker or bytes that are not UTF-8 (``problem``), and it raises
``LineTooLong`` when a line exceeds the limit, which ends the SDK's reading of that stream.
Timing stays what the SDK handed over: an event is handed over in the read that completed it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator
from typing import Any

from loadtests.client.outcome import (
    INVALID_UTF8,
    decode_json,
    done_marker_problem,
    frame_kind,
    is_event_stream,
    undecodable_frame,
)
from loadtests.client.sse import SSEParser
from loadtests.errors import StreamBroken, UndecodableJson


class WireEnd:
    """One response's wire, as far as it was read. It reads events by the tracker's rules
    (``loadtests.client.outcome``): the stream ends at its first terminal event, ``[DONE]``, an error
    frame or a frame that breaks the protocol; nothing after it is handed over or counted."""

    __slots__ = (
        "both_lengths",
        "bytes",
        "data_frames",
        "done",
        "ended",
        "parser",
        "problem",
        "server",
        "status",
        "transport_errors",
        "via",
    )

    def __init__(self, max_line_bytes: int, response: Any = None) -> None:
        self.parser = SSEParser(max_line_bytes)
        self.status: int | None = None if response is None else response.status_code
        """The response's status, as it came (None: no response yet)."""
        headers = {} if response is None else response.headers
        self.server: str | None = headers.get("server")
        self.via: str | None = headers.get("via")
        self.both_lengths = "content-length" in headers and "transfer-encoding" in headers
        """Both framings announced (RFC 9112 6.1): the raw client's parser refuses the answer."""
        self.transport_errors: tuple[type[BaseException], ...] = ()
        """The HTTP client's errors of the wire (its ``TransportError``): what the SDK lets out unwrapped
        when it reads an error answer's body."""
        if response is not None:
            module = importlib.import_module(type(response).__module__.partition(".")[0])
            self.transport_errors = (module.TransportError,)
        self.done = False
        self.ended = False
        self.bytes = 0
        self.data_frames = 0
        """Data events up to the terminal one, that one included: the raw client's count."""
        self.problem: str | None = None
        """The protocol error that ended the stream, when the SDK would not report it (None: none)."""

    def saw(self, chunk: bytes) -> bytes:
        """Take one read; return the data events it completed, as ``data:`` lines for the SDK."""
        self.bytes += len(chunk)
        events = []
        for frame in self.parser.feed(chunk, 0.0):
            data = frame.data
            if data is None or self.ended:
                continue  # a comment or a field-only block (nothing dispatched), or after the stream's end
            self.data_frames += 1
            if frame.invalid_utf8:
                self.problem = INVALID_UTF8
            elif data == "[DONE]":
                self.done = True
            else:
                self.problem = done_marker_problem(data)
                if self.problem is None and (undecodable := self._undecodable(data)) is not None:
                    self.problem, self.ended = undecodable, True
                    continue  # never handed over: the SDK's own json.loads would raise past its caller
            self.ended = self.done or self.problem is not None or frame_kind(frame) == "error"
            events.append("".join(f"data: {line}\n" for line in data.split("\n")) + "\n")
        return "".join(events).encode()

    def _undecodable(self, data: str) -> str | None:
        """The protocol error of a data frame no JSON decoder takes (``outcome.decode_json``), in the
        raw client's words; None when it decodes."""
        try:
            decode_json(data)
        except UndecodableJson as exc:
            return undecodable_frame(self.data_frames, data, exc.reason)
        return None


@functools.cache
def _tapped_stream_class(http_module: str) -> type:
    """A byte stream of ``http_module`` (``httpx`` or the newer SDKs' ``httpx2``: responses accept
    only their own module's ``SyncByteStream``) that shows each chunk to a ``WireEnd``."""
    base = importlib.import_module(http_module).SyncByteStream

    class TappedStream(base):  # type: ignore[misc, valid-type]
        def __init__(self, inner: Any, wire: WireEnd) -> None:
            self._inner = inner
            self._wire = wire

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._inner:
                events = self._wire.saw(chunk)
                if events:
                    yield events
                if self._wire.problem is not None:  # the raw client stops at the same frame
                    raise StreamBroken(self._wire.problem)

        def close(self) -> None:
            self._inner.close()

    return TappedStream


class WireTap:
    """Install with ``event_hooks={"response": [tap]}``; ``last`` is the latest response's wire.
    One tap per client, and a client streams one request at a time (one Locust user)."""

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self.last: WireEnd | None = None

    def __call__(self, response: Any) -> None:
        self.last = WireEnd(self.max_line_bytes, response)
        if not (200 <= response.status_code < 300 and is_event_stream(response.headers.get("content-type"))):
            return  # an error body or a page: the SDK reads it as sent (the tracker judges the content type)
        stream_class = _tapped_stream_class(type(response).__module__.partition(".")[0])
        response.stream = stream_class(response.stream, self.last)
