"""``--proxy embedded``: a reverse proxy of our own with nginx's ``proxy_read_timeout`` semantics, on
asyncio, run as ``python -m loadtests proxy`` (``start_embedded_proxy``). Unlike the real proxies it
listens where the server the run starts listens (``--server-bind``), not on loopback only.

For each client connection: read one request, send it upstream, and relay the response as it
arrives, without buffering. The read timeout is the longest silence allowed between two reads
from upstream, counted from the moment the request was sent (nginx's rule):

- silent too long BEFORE the response headers: the client gets ``504 Gateway Time-out``;
- silent too long AFTER them: the client connection is closed without the final chunk, as nginx
  does (the client sees an incomplete body: a cut stream).

Any byte re-arms the timer, an SSE comment included, which is why keep-alive works. Headers pass
through unchanged except ``Connection``: one request per connection, both ways, so the relay can
end the response by closing; ``Expect: 100-continue``, which the proxy answers itself; and a
repeated identical Content-Length, sent once. A client that leaves closes the upstream connection
too, so the server sees the disconnect. Upstream unreachable, or closing or resetting the
connection before its headers: ``502 Bad Gateway``.

A request the proxy cannot forward safely gets a plain-text answer from the proxy itself, never
a silent close and never an echo of what was sent: a malformed request line or header line, a
Content-Length that is not a number of bytes or appears twice with two values, Transfer-Encoding
with Content-Length, or a missing Host (400); a Transfer-Encoding body (411); a header block over
``_MAX_HEADER_BYTES`` (431; 414 when the request line alone is); a body over ``_MAX_BODY_BYTES``
(413); an unknown Expect (417); HTTP other than 1.x (505); a request that does not arrive within
``client_timeout`` (408). The proxy then reads what the client still sends for a moment before it
closes, so the kernel does not reset the connection under the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from loadtests.base.safe_text import redacted_url
from loadtests.errors import BadRequest, InvalidValue
from loadtests.services.child import ChildService
from loadtests.services.parent_watch import exit_when_stdin_closes
from loadtests.services.proxies.base import Front, ProxyKind

READY_PREFIX = "proxy ready: "
_MAX_HEADER_BYTES = 64 * 1024  # request line + header lines
_MAX_BODY_BYTES = 64 * 1024 * 1024  # as client_max_body_size in our nginx config
_READ_SIZE = 64 * 1024
_LINGER_S = 2.0  # how long the proxy reads the rest of a refused request before it closes

_TCHAR = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_HEADER_NAME = re.compile(_TCHAR + rb"+")
_REQUEST_LINE = re.compile(_TCHAR + rb"+ [\x21-\x7e\x80-\xff]+ HTTP/(?P<version>[0-9]\.[0-9])")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # in a header value; HTAB is allowed


@dataclass(frozen=True)
class ProxySettings:
    listen_host: str
    listen_port: int
    upstream: str
    read_timeout: float
    client_timeout: float = 60.0  # nginx's client_header_timeout and client_body_timeout

    @property
    def upstream_address(self) -> tuple[str, int]:
        parts = urlsplit(self.upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise InvalidValue(f"--upstream must be an http:// URL, got {redacted_url(self.upstream)!r}")
        return parts.hostname, parts.port or 80


@dataclass
class ProxyStats:
    """What the proxy did, for its log line at exit and for tests."""

    requests: int = 0
    timeouts_before_headers: int = 0
    cuts_after_headers: int = 0
    bad_gateway: int = 0
    refused: int = 0

    def line(self) -> str:
        return (
            f"proxy: {self.requests} requests, {self.timeouts_before_headers} read timeouts before headers (504), "
            f"{self.cuts_after_headers} after headers (cut), {self.bad_gateway} bad gateway (502), "
            f"{self.refused} bad requests answered by the proxy"
        )


def _error_response(status: str, detail: str) -> bytes:
    body = f"{status}: {detail}\n".encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "X-Content-Type-Options: nosniff\r\nConnection: close\r\nServer: sse-soak-proxy\r\n\r\n"
    )
    return head.encode() + body


def _with_connection_close(head: bytes) -> bytes:
    """The header block with any ``Connection`` header replaced by ``Connection: close``."""
    lines = head.split(b"\r\n")
    kept = [line for line in lines[1:] if line and not line.lower().startswith(b"connection:")]
    return b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""])


@dataclass(frozen=True)
class _Head:
    """A parsed request head: what goes upstream, and what the proxy must do before the body."""

    upstream: bytes  # request line and headers, ``Connection: close``, the blank line
    length: int  # of the body, from Content-Length
    expect_continue: bool


async def _read_head_lines(reader: asyncio.StreamReader) -> list[bytes] | None:
    """The request line and header lines without their CRLF (a bare LF ends a line too, as RFC 9112
    allows), or None when the client closed without sending a byte."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if not lines and not exc.partial.strip():
                return None
            raise BadRequest("400 Bad Request", "the connection ended inside the request head") from None
        except asyncio.LimitOverrunError:
            line = b""
            size = _MAX_HEADER_BYTES + 1
        size += len(line)
        if size > _MAX_HEADER_BYTES:
            if not lines:
                raise BadRequest("414 URI Too Long", f"the request line is longer than {_MAX_HEADER_BYTES} bytes")
            raise BadRequest("431 Request Header Fields Too Large", f"headers over {_MAX_HEADER_BYTES} bytes")
        line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        if line:
            lines.append(line)
        elif lines:
            return lines
        # blank lines before the request line are skipped (RFC 9112, section 2.2)


def _parse_head(lines: list[bytes]) -> _Head:
    """Check the head strictly enough that the proxy and the server cannot read it differently."""
    request_line, *header_lines = lines
    match = _REQUEST_LINE.fullmatch(request_line)
    if match is None:
        raise BadRequest("400 Bad Request", "malformed request line; expected: METHOD TARGET HTTP/1.1")
    version = match["version"]
    if not version.startswith(b"1."):
        raise BadRequest("505 HTTP Version Not Supported", "this proxy speaks HTTP/1.x")
    headers: list[tuple[bytes, bytes]] = []
    for line in header_lines:
        name, colon, value = line.partition(b":")
        if not colon or _HEADER_NAME.fullmatch(name) is None:  # also a folded line, a space before the colon
            raise BadRequest("400 Bad Request", "malformed header line; expected: Name: value")
        value = value.strip(b" \t")
        if _CONTROL.search(value):
            raise BadRequest("400 Bad Request", "a header value holds a control character")
        headers.append((name, value))

    def values(wanted: bytes) -> list[bytes]:
        return [value for name, value in headers if name.lower() == wanted]

    hosts, lengths, expect = values(b"host"), values(b"content-length"), values(b"expect")
    if len(hosts) > 1 or (not hosts and version != b"1.0"):
        raise BadRequest("400 Bad Request", "an HTTP/1.1 request needs exactly one Host header")
    if values(b"transfer-encoding"):
        if lengths:
            raise BadRequest("400 Bad Request", "Transfer-Encoding and Content-Length together")
        raise BadRequest("411 Length Required", "send the body with Content-Length; Transfer-Encoding is not supported")
    if len(set(lengths)) > 1:
        raise BadRequest("400 Bad Request", "Content-Length given twice with different values")
    length_text = lengths[0] if lengths else b"0"
    if not length_text.isdigit():  # ASCII digits only: no sign, space, underscore or list
        raise BadRequest("400 Bad Request", "Content-Length must be a number of bytes")
    if len(length_text) > 12 or int(length_text) > _MAX_BODY_BYTES:
        raise BadRequest("413 Content Too Large", f"request bodies are limited to {_MAX_BODY_BYTES} bytes")
    if expect and [value.lower() for value in expect] != [b"100-continue"]:
        raise BadRequest("417 Expectation Failed", "the only expectation understood is 100-continue")
    replaced = (b"connection", b"expect", b"content-length")  # hop by hop, answered here, or said once below
    kept = [name + b": " + value for name, value in headers if name.lower() not in replaced]
    if lengths:
        kept.append(b"Content-Length: " + length_text)
    upstream = b"\r\n".join([request_line, *kept, b"Connection: close", b"", b""])
    return _Head(upstream, int(length_text), bool(expect))


async def _read_body(reader: asyncio.StreamReader, length: int, timeout: float) -> bytes:
    chunks: list[bytes] = []
    while length:
        try:
            data = await asyncio.wait_for(reader.read(min(length, _READ_SIZE)), timeout)
        except asyncio.TimeoutError:
            raise BadRequest("408 Request Timeout", f"the request body stalled for {timeout:g} s") from None
        if not data:
            raise BadRequest("400 Bad Request", "the request body is shorter than its Content-Length")
        chunks.append(data)
        length -= len(data)
    return b"".join(chunks)


async def _read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> bytes | None:
    """One whole request, rewritten for upstream, or None if the client sent none. A request the
    proxy will not forward raises ``BadRequest``."""
    try:
        lines = await asyncio.wait_for(_read_head_lines(reader), timeout)
    except asyncio.TimeoutError:
        raise BadRequest("408 Request Timeout", f"no whole request head within {timeout:g} s") from None
    if lines is None:
        return None
    head = _parse_head(lines)
    if head.expect_continue and head.length:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    return head.upstream + await _read_body(reader, head.length, timeout)


async def _answer_and_linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: bytes) -> None:
    """Send ``response``, then read and drop what the client still sends (the rest of a header
    block too large, a body) for up to ``_LINGER_S``: closing a socket with unread bytes makes the
    kernel send a reset, which can destroy the answer before the client has read it."""
    writer.write(response)
    with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(_wait_for_eof(reader), _LINGER_S)


class ReverseProxy:
    """The proxy server; ``serve()`` runs until cancelled."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.stats = ProxyStats()

    async def start(self) -> asyncio.Server:
        return await asyncio.start_server(
            self._handle, self.settings.listen_host, self.settings.listen_port, limit=_MAX_HEADER_BYTES
        )

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await _read_request(client_reader, client_writer, self.settings.client_timeout)
            except BadRequest as bad:
                self.stats.refused += 1
                await _answer_and_linger(client_reader, client_writer, _error_response(bad.status, bad.reason))
                return
            except ConnectionError:
                return  # the client is gone: there is no one to answer
            if request is None:
                return
            self.stats.requests += 1
            await self._relay(request, client_reader, client_writer)
        finally:
            client_writer.close()
            with contextlib.suppress(ConnectionError):
                await client_writer.wait_closed()

    async def _relay(
        self, request: bytes, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.settings.upstream_address)
        except OSError as exc:
            self.stats.bad_gateway += 1
            client_writer.write(_error_response("502 Bad Gateway", f"upstream unreachable: {exc.strerror}"))
            return
        # A client that goes away must take the upstream connection with it (the server frees its slot).
        watch = asyncio.ensure_future(_wait_for_eof(client_reader))
        try:
            upstream_writer.write(request)
            with contextlib.suppress(ConnectionError):  # an upstream that reset shows when its answer is read
                await upstream_writer.drain()
            relay = asyncio.ensure_future(self._pump_response(upstream_reader, client_writer))
            await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not relay.done():
                relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)
        except ConnectionError:
            pass
        finally:
            watch.cancel()
            upstream_writer.close()
            with contextlib.suppress(ConnectionError):
                await upstream_writer.wait_closed()

    async def _pump_response(self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        timeout = self.settings.read_timeout
        head = b""
        while b"\r\n\r\n" not in head:  # until the response headers are complete
            try:
                data = await asyncio.wait_for(upstream.read(_READ_SIZE), timeout)
            except asyncio.TimeoutError:
                self.stats.timeouts_before_headers += 1
                client.write(_error_response("504 Gateway Time-out", f"upstream silent for {timeout:g} s"))
                return
            except ConnectionError:
                data = b""  # reset before its headers: the same 502 as a close
            if not data:
                self.stats.bad_gateway += 1
                client.write(_error_response("502 Bad Gateway", "upstream closed before its headers"))
                return
            head += data
            if len(head) > _MAX_HEADER_BYTES and b"\r\n\r\n" not in head:
                self.stats.bad_gateway += 1
                client.write(_error_response("502 Bad Gateway", f"upstream headers over {_MAX_HEADER_BYTES} bytes"))
                return
        header_block, _, rest = head.partition(b"\r\n\r\n")
        client.write(_with_connection_close(header_block + b"\r\n") + rest)
        await client.drain()
        while True:
            try:
                data = await asyncio.wait_for(upstream.read(_READ_SIZE), timeout)
            except asyncio.TimeoutError:
                self.stats.cuts_after_headers += 1
                return  # closing without the final chunk is the cut
            if not data:
                return
            client.write(data)
            await client.drain()


async def _wait_for_eof(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(_READ_SIZE):
            pass


async def serve(settings: ProxySettings) -> None:
    """Run the proxy until cancelled; prints the ready line once it accepts connections and its
    counts when it stops. Started by the harness, it also stops when the harness dies."""
    exit_when_stdin_closes()
    proxy = ReverseProxy(settings)
    server = await proxy.start()
    host, port = server.sockets[0].getsockname()[:2]
    upstream = f"{redacted_url(settings.upstream)} (read timeout {settings.read_timeout:g} s)"
    print(f"{READY_PREFIX}http://{host}:{port} -> {upstream}", flush=True)
    try:
        async with server:
            await server.serve_forever()
    finally:
        print(proxy.stats.line(), flush=True)


def start_embedded_proxy(
    upstream: str, read_timeout: float, timeout: float = 30.0, listen_host: str = "127.0.0.1"
) -> ChildService:
    """``python -m loadtests proxy`` in front of ``upstream``, on a free port of ``listen_host``
    (loopback unless the run's server listens elsewhere: ``--server-bind``)."""
    listen = f"[{listen_host}]:0" if ":" in listen_host else f"{listen_host}:0"
    argv = [
        sys.executable,
        "-m",
        "loadtests",
        "proxy",
        "--listen",
        listen,
        "--upstream",
        upstream,
        "--read-timeout",
        repr(read_timeout),
    ]
    return ChildService.launch(argv, "embedded proxy", timeout)


@dataclass(frozen=True, kw_only=True)
class EmbeddedProxy(ProxyKind):
    """Our own proxy, started as a child that prints its ready line."""

    def start(self, front: Front) -> ChildService:
        return start_embedded_proxy(front.upstream, front.read_timeout, listen_host=front.listen_host)


KIND = EmbeddedProxy(
    name="embedded",
    order=1,
    display_name="the embedded proxy",
    loopback_only=False,
    described="asyncio, with nginx's read-timeout semantics",
    read_timeout_setting="the embedded proxy's, as nginx's proxy_read_timeout",
)
