"""A gateway in front of an OpenAI-compatible server that behaves as the LiteLLM proxy does with
streams (DESIGN.md, "Proxies"): it withholds the response headers until the first data frame and
strips every SSE comment, so no keep-alive reaches the client. Raw asyncio toward the client (each
byte written here, chunked, one answer per connection), httpx toward the server. It runs its own
event loop in a thread of the test process; ``stop()`` ends it and its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import httpx

HOP_BY_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive", "host"}


def _is_comment(frame: bytes) -> bool:
    """A frame of comment lines only (``: keep-alive``): what the gateway drops."""
    return all(line.startswith(b":") for line in frame.splitlines() if line)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class HeaderHoldingGateway:
    """``HeaderHoldingGateway(upstream).url`` forwards every request to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
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
        async with httpx.AsyncClient(timeout=None) as client:
            server = await asyncio.start_server(
                lambda reader, writer: self._answer(client, reader, writer), "127.0.0.1", 0
            )
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await self._stopped.wait()

    async def _answer(
        self, client: httpx.AsyncClient, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            split = (line.partition(":") for line in lines if line)
            headers = {name.strip(): value.strip() for name, _, value in split}
            length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), "0"))
            body = await reader.readexactly(length) if length else b""
            forwarded = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
            request = client.build_request(method, self.upstream + path, headers=forwarded, content=body)
            response = await client.send(request, stream=True)
            try:
                await self._relay(response, writer)
            finally:
                await response.aclose()
        except (OSError, asyncio.IncompleteReadError, httpx.HTTPError):
            pass  # the client or the server went away: nothing to relay
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _relay(self, response: httpx.Response, writer: asyncio.StreamWriter) -> None:
        """Headers only once the first data frame is there; comment frames dropped; chunked, then close."""
        head = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n".encode()
        for name, value in response.headers.items():
            if name.lower() not in HOP_BY_HOP:
                head += f"{name}: {value}\r\n".encode("latin-1")
        head += b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        pending = b""
        held = True
        async for data in response.aiter_raw():
            pending += data
            for frame in self._frames(pending):
                pending = pending[len(frame) :]
                if _is_comment(frame):
                    continue
                if held:
                    writer.write(head)
                    held = False
                writer.write(_chunk(frame))
                await writer.drain()
        if held:
            writer.write(head)
        if pending:
            writer.write(_chunk(pending))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    def _frames(buffer: bytes) -> Iterator[bytes]:
        """The complete frames at the start of ``buffer``, each with its blank line."""
        start = 0
        while (end := buffer.find(b"\n\n", start)) != -1:
            yield buffer[start : end + 2]
            start = end + 2

    def stop(self) -> None:
        if self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)
