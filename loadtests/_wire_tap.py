"""What the openai SDK hides from its caller, seen from below it: the end of the event stream.

The SDK stops at ``data: [DONE]`` without saying so, and a body that simply ends looks the same to
its caller; nor does it limit the length of a line. ``WireTap`` is an httpx response hook (the
SDK's client takes ``event_hooks``) that wraps each response's byte stream: it passes every chunk
through unchanged while an ``SSEParser`` notes whether a ``[DONE]`` frame came, counts the bytes,
and raises ``LineTooLong`` when a line exceeds the limit, which ends the SDK's reading of that
stream. Nothing else is taken from the wire: timing and payloads stay what the SDK handed over.
Invariant: the SDK sees exactly the bytes it would see without the tap, up to a line too long.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator
from typing import Any

from loadtests._sse import SSEParser


class WireEnd:
    """One response's wire, as far as it was read."""

    __slots__ = ("bytes", "done", "parser")

    def __init__(self, max_line_bytes: int) -> None:
        self.parser = SSEParser(max_line_bytes)
        self.done = False
        self.bytes = 0

    def saw(self, chunk: bytes) -> None:
        self.bytes += len(chunk)
        for frame in self.parser.feed(chunk, 0.0):
            if frame.data == "[DONE]":
                self.done = True


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
                self._wire.saw(chunk)
                yield chunk

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
        self.last = WireEnd(self.max_line_bytes)
        stream_class = _tapped_stream_class(type(response).__module__.partition(".")[0])
        response.stream = stream_class(response.stream, self.last)
