"""Reverse proxies that time out as real ones were measured to (DESIGN.md, "Proxies"), on raw
sockets, for the smoke tests of ``loadtests._causes``. One mode per gateway:

- ``held_writes`` (HAProxy 2.6 without ``option http-no-delay``): every write toward the client is
  held ``HOLD_S`` (0.2 s) and sent with whatever came meanwhile; after ``timeout`` s without a byte
  from upstream it closes the connection (after the headers: no final chunk; before: a 504).
- ``bad_gateway`` (Apache 2.4 mod_proxy): it holds the upstream's response until its first body
  bytes, and when none came within ``timeout`` s of the request it answers ``502 Proxy Error`` with
  Apache's ``Server`` header and page.
- ``litellm_408`` (the LiteLLM proxy): it waits for the first data frame (comments count for nothing:
  LiteLLM strips them) and when none came within ``timeout`` s answers 408 with LiteLLM's
  OpenAI-style error (``"code": "408"``, a ``litellm.Timeout`` message).

Each forwards the request as it came, with ``Connection: close``, and otherwise relays the upstream's
bytes as they arrive (the preflight's ``/v1/models`` and the ``/tokenize`` probe go through). It runs
its own event loop in a thread of the test process; ``stop()`` ends it and its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

HOLD_S = 0.2
"""How long HAProxy without ``option http-no-delay`` held each write (measured ~200 ms)."""
MODES = ("held_writes", "bad_gateway", "litellm_408")
APACHE_502 = (
    b'<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n<html><head>\n<title>502 Proxy Error</title>\n'
    b"</head><body>\n<h1>Proxy Error</h1>\n<p>The proxy server received an invalid\nresponse from an upstream "
    b"server.<br />\nThe proxy server could not handle the request<p>Reason: <strong>Error reading from remote "
    b"server</strong></p></p>\n<hr>\n<address>Apache/2.4.62 (Debian) Server at 127.0.0.1 Port 80</address>\n"
    b"</body></html>\n"
)
LITELLM_408 = json.dumps(
    {
        "error": {
            "message": "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out. "
            "LiteLLM Retried: 0 times",
            "type": None,
            "param": None,
            "code": "408",
        }
    }
).encode()


def _answer(status: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers.items())]
    lines += [f"content-length: {len(body)}", "connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class TimeoutGateway:
    """``TimeoutGateway(upstream, mode, timeout).url`` forwards every request to ``upstream``."""

    def __init__(self, upstream: str, mode: str, timeout: float = 2.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        host, _, port = upstream.removeprefix("http://").rstrip("/").partition(":")
        self.upstream = (host, int(port))
        self.mode = mode
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)
        self.port = 0
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the gateway did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        relays: set[asyncio.Task[None]] = set()

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            relay = asyncio.ensure_future(self._connection(reader, writer))  # ours to end, not the server's
            relays.add(relay)
            relay.add_done_callback(relays.discard)

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stopped.wait()
            for relay in list(relays):  # relays still going end with the gateway, their sockets closed
                relay.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            kept = [line for line in lines[1:] if line and not line.lower().startswith(("connection:", "keep-alive:"))]
            lengths = [line.split(":", 1)[1] for line in kept if line.lower().startswith("content-length:")]
            length = int(lengths[0]) if lengths else 0
            body = await reader.readexactly(length) if length else b""
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            forwarded = "\r\n".join([lines[0], *kept, "connection: close"]) + "\r\n\r\n"
            upstream_writer.write(forwarded.encode("latin-1") + body)
            await upstream_writer.drain()
            sent = time.monotonic()
            if self.mode == "held_writes":
                await self._held_writes(upstream_reader, writer)
            else:
                await self._first_bytes_or_timeout(upstream_reader, writer, sent)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client or the server went away: nothing more to relay
        finally:
            for side in (writer, upstream_writer):
                if side is not None:
                    side.close()
                    with contextlib.suppress(OSError):
                        await side.wait_closed()

    async def _held_writes(self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        """Relay with every write held ``HOLD_S``; close after ``timeout`` s of upstream silence."""
        pending = bytearray()
        flushed = asyncio.Event()
        flushed.set()
        started = False

        async def flush_later() -> None:
            await asyncio.sleep(HOLD_S)
            client.write(bytes(pending))
            pending.clear()
            flushed.set()

        while True:
            try:
                data = await asyncio.wait_for(upstream.read(65536), self.timeout)
            except TimeoutError:
                await flushed.wait()
                if not started:
                    page = b"<html><body><h1>504 Gateway Time-out</h1></body></html>"
                    client.write(_answer("504 Gateway Time-out", {"content-type": "text/html"}, page))
                return  # after the headers: the connection closes without the final chunk
            if not data:
                await flushed.wait()
                return
            started = True
            pending += data
            if flushed.is_set():
                flushed.clear()
                asyncio.get_running_loop().create_task(flush_later())

    async def _first_bytes_or_timeout(
        self, upstream: asyncio.StreamReader, client: asyncio.StreamWriter, sent: float
    ) -> None:
        """Hold the upstream's response until its first body bytes (``bad_gateway``) or its first data
        frame (``litellm_408``); answer the mode's timeout when none came within ``timeout`` s."""
        received = b""
        while True:
            _, _, after_head = received.partition(b"\r\n\r\n")
            wanted = b"data:" in after_head if self.mode == "litellm_408" else bool(after_head)
            if wanted or (b"\r\n\r\n" in received and b"content-length: 0" in received.lower()):
                break
            left = self.timeout - (time.monotonic() - sent)
            try:
                data = await asyncio.wait_for(upstream.read(65536), max(left, 0.0))
            except TimeoutError:
                client.write(self._timeout_answer())
                await client.drain()
                return
            if not data:
                break
            received += data
        client.write(received)
        await client.drain()
        while data := await upstream.read(65536):
            client.write(data)
            await client.drain()

    def _timeout_answer(self) -> bytes:
        if self.mode == "bad_gateway":
            headers = {"server": "Apache/2.4.62 (Debian)", "content-type": "text/html; charset=iso-8859-1"}
            return _answer("502 Proxy Error", headers, APACHE_502)
        return _answer("408 Request Timeout", {"server": "uvicorn", "content-type": "application/json"}, LITELLM_408)

    def stop(self) -> None:
        if self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
