"""A 10 MB prompt does not hold the server's event loop: another stream's keep-alive keeps its beat.

The stream waits in prefill (30 s time to first token) with keep-alive every 0.2 s, so the server
owes it a comment every 0.2 s. While it is open, a 10 MB prompt goes to each route that tokenizes.
Its decoding, validation and tokenization (about a second of CPU) run in a worker thread, in
slices, so the stream's longest silence stays under the interval plus 100 ms; on the event loop it
was 3.9 s.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import StartServer

JSON = {"Content-Type": "application/json"}
KEEP_ALIVE_S = 0.2
ALLOWED_GAP_S = KEEP_ALIVE_S + 0.1
PROMPT = "w " * (5 * 1024 * 1024)  # 10 MiB, 5,242,880 tokens
LONG_REQUESTS: dict[str, tuple[str, dict[str, Any], int]] = {
    "completions truncated": (
        "/v1/completions",
        {"prompt": PROMPT, "max_tokens": 1, "truncate_prompt_tokens": 64, "stream": True},
        200,
    ),
    "chat too long": ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}, 400),
    "tokenize": ("/tokenize", {"prompt": PROMPT}, 200),
}


@dataclass
class KeepAliveListener:
    """A stream that is read on its own thread; ``arrivals`` are the times its bytes came."""

    sock: socket.socket
    arrivals: list[float] = field(default_factory=list)
    thread: threading.Thread | None = None

    def listen(self) -> None:
        def read() -> None:
            with contextlib.suppress(OSError):  # the socket closes under it at teardown
                while data := self.sock.recv(65536):
                    self.arrivals.extend(time.monotonic() for _ in range(data.count(b": keep-alive")))

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    def longest_gap(self, start: float, end: float) -> float:
        """The longest silence between ``start`` and ``end``, edges included."""
        times = [start, *(t for t in self.arrivals if start < t < end), end]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


@pytest.fixture
def waiting_stream(start_server: StartServer) -> Iterator[tuple[str, KeepAliveListener]]:
    server = start_server("--sse-keep-alive-interval", str(KEEP_ALIVE_S), "--time-to-first-token", "30000")
    address = urlsplit(server.url)
    body = json.dumps({"prompt": "hello", "max_tokens": 1, "stream": True}).encode()
    assert address.port is not None
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        listener = KeepAliveListener(sock)
        listener.listen()
        deadline = time.monotonic() + 10
        while len(listener.arrivals) < 2 and time.monotonic() < deadline:  # the beat has started
            time.sleep(0.01)
        assert len(listener.arrivals) >= 2, "no keep-alive before the long prompt"
        yield server.url, listener
        sock.shutdown(socket.SHUT_RDWR)
        assert listener.thread is not None
        listener.thread.join(10)


@pytest.mark.parametrize("case", LONG_REQUESTS)
def test_a_long_prompt_does_not_silence_another_stream(
    waiting_stream: tuple[str, KeepAliveListener], case: str
) -> None:
    url, listener = waiting_stream
    path, payload, status = LONG_REQUESTS[case]
    content = json.dumps(payload).encode()
    started = time.monotonic()
    with httpx.stream("POST", url + path, content=content, headers=JSON, timeout=60) as response:
        answered = time.monotonic()  # a stream's headers come once its prompt is tokenized, before prefill
        if not payload.get("stream"):
            response.read()
            answered = time.monotonic()
            if path == "/tokenize":
                assert response.json()["count"] == 5 * 1024 * 1024
    assert response.status_code == status
    gap = listener.longest_gap(started, answered)
    print(f"{case}: answered in {answered - started:.2f} s, longest keep-alive gap {gap * 1000:.0f} ms")
    assert gap < ALLOWED_GAP_S, f"the stream was silent {gap:.2f} s while a 10 MB prompt was handled"
