"""A raw response is framed as the openai client frames it: its head read by h11 (the parser below
the SDK), its end where its framing says, whatever follows it.

The head. geventhttpclient's parser (llhttp, strict) refuses heads that h11 reads, and the same
bytes got two verdicts: an obs-fold or a control character in any header was a ``protocol_error``
for the raw user on every request, and on a 504 its ``gateway_timeout`` became a ``protocol_error``.
``FramedResponse`` hands each response head to h11 first, as the SDK's httpcore does (100 KiB at
most): what h11 refuses is refused with h11's words; what it accepts (obs-fold replaced by a space,
RFC 9112 section 5.2; controls other than NUL, CR and LF kept, RFC 9110 section 5.5; a duplicated
equal Content-Length; LF line ends) is what the raw user reads, its headers as h11 gives them. llhttp
is given only the framing h11 concluded (status, Content-Length, Transfer-Encoding, whether the
connection persists) and decodes the body as before, in C: nothing is added per frame. An interim
response (``100 Continue``, ``103 Early Hints``) is skipped, as httpx skips it; a connection that
closes before a final head is complete closed "without sending a response", as httpcore says.

The end. RFC 9112 (section 6.3) lets a client discard what follows a complete response, and never
process it as a separate response; httpx reads the announced bytes and stops. llhttp instead parses
whatever follows as the next response: with ``Connection: close`` it raised "Data after
``Connection: close``" and threw the whole response away, and on a kept-alive connection it began a
new message and failed it ("Expected HTTP/"), so the same bytes were a cut stream, a malformed
response or a good one depending on how the reads were split. ``FramedResponse`` drops every byte
that follows the final response's end and closes the connection (never reused: the excess would be
read as the next request's answer). Bytes that arrive before a response is complete still raise.

The rules both clients follow on these bytes, row by row, are ``loadtests.client.framing.RULES``.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import geventhttpclient.client
import h11
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse

MAX_HEAD_BYTES = 100 * 1024
"""The largest response head either client takes: httpcore's limit below the openai client."""
HEAD_TOO_LARGE = "Receive buffer too long"
"""h11's words for a head over the limit (``loadtests.load.users`` words both clients' alike)."""
CLOSED_IN_HEAD = "connection closed without sending a response"
_HEAD_END = re.compile(b"\n\r?\n")
"""Where h11 ends a head: the first blank line, LF or CRLF (h11's ``ReceiveBuffer``)."""


class FramedResponse(HTTPSocketPoolResponse):
    """geventhttpclient's pooled response, its head read by h11 and excess after its end dropped."""

    _head: bytes | None = b""
    """Head bytes received while no final head is complete; None once the final head was read."""
    _status = 0
    body_failure: HTTPParseError | None = None
    """Bad framing found in the body while the request read the head (the bytes came in one read) or
    while an error answer's body was read whole (``read``). The body is what came before it, as
    httpx hands it over: the stream's reader takes those frames, then raises it; the request never
    raises it (that would throw the response away). The connection is closed at once."""

    def feed(self, data: str | bytes) -> None:
        head = self._head
        if head is not None:
            self._feed_head(head, data)
            return
        try:  # every read of a body: nothing here beyond what geventhttpclient does
            super().feed(data)
        except HTTPParseError:
            if not excess_dropped(self):
                raise

    def feeds_body_directly(self) -> bool:
        """Its head is read and it is no answer to a HEAD: from now on, reads may go to llhttp
        through ``feed_body`` (no Python call per read or per chunk; ``excess_dropped`` after an
        ``HTTPParseError``) instead of ``feed``, with the same effect. Makes each decoded chunk go
        to the body buffer without a Python frame."""
        if self._head is not None or self.method == "HEAD":  # HEAD: geventhttpclient's own rule in feed
            return False
        # what HTTPResponse._on_body does, in C (llhttp looks the callback up on the instance each chunk)
        self._on_body = self._body_buffer.extend  # type: ignore[method-assign,assignment]
        return True

    def _feed_head(self, head: bytes, data: str | bytes) -> None:
        """Bytes while no final head is whole: once one is, llhttp gets its framing, the headers are
        h11's, and the body bytes that came with it are fed (bad framing in them deferred)."""
        if not data:
            raise HTTPConnectionClosed(CLOSED_IN_HEAD)
        final = self._read_heads(head + (data.encode("latin-1") if isinstance(data, str) else bytes(data)))
        if final is None:
            return
        response, body = final
        self._status = response.status_code
        self.feed(_framing_head(response))
        self.status_message = response.reason.decode("latin-1")
        index = self._headers_index
        index.clear()
        for name, value in response.headers.raw_items():
            index.add(name.decode("latin-1"), value.decode("latin-1"))
        if body:
            try:
                self.feed(body)
            except HTTPParseError as exc:
                self.body_failure = exc
                self.release()  # closed: a reader of the body gets what came before the failure

    def _read_heads(self, received: bytes) -> tuple[h11.Response, bytes] | None:
        """The final response's head and the bytes after it, once it is whole (interim heads
        skipped); None while it is not (the bytes kept). Raises ``HTTPParseError`` with h11's words."""
        while True:
            if received[:1] == b"\n" or received[:2] == b"\r\n":
                end = 1 if received[:1] == b"\n" else 2  # h11 reads it as a head without a status line
            else:
                found = _HEAD_END.search(received)
                end = -1 if found is None else found.end()
            if end < 0 or end > MAX_HEAD_BYTES:
                if len(received) > MAX_HEAD_BYTES:
                    raise HTTPParseError(HEAD_TOO_LARGE)
                self._head = received
                return None
            event = _parse_head(received[:end], self.method)
            received = received[end:]
            if isinstance(event, h11.Response):
                self._head = None
                return event, received

    def read(self, length: int | None = None) -> bytes:
        """The body as a whole (an error answer's, read by Locust's client): when its framing breaks,
        it is what came before the break (``body_failure`` says why), as httpx hands it over."""
        try:
            return super().read(length)
        except HTTPParseError as exc:  # the connection is released: what was buffered follows
            self.body_failure = exc
            return super().read(length)

    def get_code(self) -> int:
        """The final response's status, as h11 read it (llhttp forgets it once the body's framing broke)."""
        return self._status or super().get_code()

    def _on_message_begin(self) -> None:
        if self.message_complete:  # interim heads never reach llhttp: the final response has ended
            raise HTTPParseError("excess after the response's end")  # raised before llhttp forgets the end
        super()._on_message_begin()


@functools.lru_cache(maxsize=16)
def _sent(method: str) -> h11.Request:
    """The request a head is read after: h11's events are immutable, so one per method serves every
    response (building it, with its header checks, was a sixth of ``_parse_head``)."""
    return h11.Request(method=method, target="/", headers=[("Host", "h"), ("Content-Length", "0")])


_END_OF_MESSAGE = h11.EndOfMessage()


feed_body = HTTPResponseParser.feed
"""Body bytes straight to llhttp, for a response whose ``feeds_body_directly()`` said yes."""


def excess_dropped(response: FramedResponse) -> bool:
    """After llhttp raised ``HTTPParseError`` on a read: True when the final response had ended and
    the error is bytes after its end, dropped (the connection is then never reused); False when the
    error is the response's own."""
    if not (response.message_complete and response.get_code() >= 200):
        return False
    response._trailing_data_dropped = True  # should_close() is now True: the connection is never reused
    return True


def _parse_head(head: bytes, method: str) -> Any:
    """One response head as h11 reads it after ``method`` was sent: ``h11.Response`` or
    ``h11.InformationalResponse``; raises ``HTTPParseError`` with h11's words."""
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
    connection.send(_sent(method))
    connection.send(_END_OF_MESSAGE)
    connection.receive_data(head)
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError as exc:
        raise HTTPParseError(str(exc)) from None
    if not isinstance(event, (h11.Response, h11.InformationalResponse)):  # a whole head always gives one
        raise HTTPParseError(f"no response in the head: {event!r}")
    return event


def _framing_head(response: h11.Response) -> bytes:
    """The head llhttp is given: the status and what frames the body, as h11 concluded them."""
    lines = [b"HTTP/1.1 %d -\r\n" % response.status_code]
    tokens: list[bytes] = []
    for name, value in response.headers:  # h11's names are lower case, its values checked
        if name in (b"content-length", b"transfer-encoding"):
            lines.append(name + b": " + value + b"\r\n")
        elif name == b"connection":
            tokens += (token.strip().lower() for token in value.split(b","))
    if b"close" in tokens or response.http_version < b"1.1":  # h11's rule for a connection that persists
        lines.append(b"connection: close\r\n")
    return b"".join(lines) + b"\r\n"


def install() -> None:
    """Make every geventhttpclient request in this process answer with a ``FramedResponse``."""
    # Rebinding the class is the point: request() looks the name up each time it builds a response.
    geventhttpclient.client.HTTPSocketPoolResponse = FramedResponse  # type: ignore[misc]
