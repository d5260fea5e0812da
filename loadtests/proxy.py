"""An embedded reverse proxy with nginx's ``proxy_read_timeout`` semantics, on asyncio.

For each client connection: read one request, send it upstream, and relay the response as it
arrives, without buffering. The read timeout is the longest silence allowed between two reads
from upstream, counted from the moment the request was sent (nginx's rule):

- silent too long BEFORE the response headers: the client gets ``504 Gateway Time-out``;
- silent too long AFTER them: the client connection is closed without the final chunk, as nginx
  does (the client sees an incomplete body: a cut stream).

Any byte re-arms the timer, an SSE comment included, which is why keep-alive works. Headers pass
through unchanged except ``Connection``: one request per connection, both ways, so the relay can
end the response by closing. A client that leaves closes the upstream connection too, so the
server sees the disconnect. Upstream unreachable: ``502 Bad Gateway``.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from urllib.parse import urlsplit

READY_PREFIX = "proxy ready: "
_MAX_HEADER_BYTES = 64 * 1024
_READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class ProxySettings:
    listen_host: str
    listen_port: int
    upstream: str
    read_timeout: float

    @property
    def upstream_address(self) -> tuple[str, int]:
        parts = urlsplit(self.upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"--upstream must be an http:// URL, got {self.upstream!r}")
        return parts.hostname, parts.port or 80


@dataclass
class ProxyStats:
    """What the proxy did, for its log line at exit and for tests."""

    requests: int = 0
    timeouts_before_headers: int = 0
    cuts_after_headers: int = 0
    bad_gateway: int = 0

    def line(self) -> str:
        return (f"proxy: {self.requests} requests, {self.timeouts_before_headers} read timeouts before headers (504), "
                f"{self.cuts_after_headers} after headers (cut), {self.bad_gateway} bad gateway (502)")  # fmt: skip


def _error_response(status: str, detail: str) -> bytes:
    body = f"<html><head><title>{status}</title></head><body><h1>{status}</h1><p>{detail}</p></body></html>\n"
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\nServer: sse-soak-proxy\r\n\r\n"
    )
    return (head + body).encode()


def _with_connection_close(head: bytes) -> bytes:
    """The header block with any ``Connection`` header replaced by ``Connection: close``."""
    lines = head.split(b"\r\n")
    kept = [line for line in lines[1:] if line and not line.lower().startswith(b"connection:")]
    return b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""])


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One whole request (header block + Content-Length body), or None if the client sent none."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
            raise ValueError("chunked request bodies are not supported; send Content-Length")
    body = await reader.readexactly(length) if length else b""
    return _with_connection_close(head[:-4] + b"\r\n") + body


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
                request = await _read_request(client_reader)
            except ValueError as exc:
                client_writer.write(_error_response("411 Length Required", str(exc)))
                return
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
            if not data:
                self.stats.bad_gateway += 1
                client.write(_error_response("502 Bad Gateway", "upstream closed before its headers"))
                return
            head += data
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
    counts when it stops."""
    proxy = ReverseProxy(settings)
    server = await proxy.start()
    host, port = server.sockets[0].getsockname()[:2]
    upstream = f"{settings.upstream} (read timeout {settings.read_timeout:g} s)"
    print(f"{READY_PREFIX}http://{host}:{port} -> {upstream}", flush=True)
    try:
        async with server:
            await server.serve_forever()
    finally:
        print(proxy.stats.line(), flush=True)
