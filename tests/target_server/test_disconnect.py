"""A client that disconnects frees its engine slot at once, streaming or not, as vLLM aborts a
request whose client has gone.

One slot (``--max-num-seqs 1``): a first client sends a request, holds the slot (the server says
it runs) and closes its connection; a second request must then get its answer (or its stream's first byte)
about one time-to-first-token later, not after the first request's simulated generation too.
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from target_server.keep_alive import KEEP_ALIVE_COMMENT
from tests.conftest import StartServer
from tests.server_gauges import RUNNING, gauge, wait_for_scheduler

TTFT = 3.0  # seconds; the slot a departed client kept would add most of a TTFT to the wait
BODY = {"prompt": "hi", "max_tokens": 4}


def request_then_leave(url: str, stream: bool) -> None:
    """Send a completion request on a raw socket, stay until the server says it holds the only
    slot, then close the connection without reading the answer."""
    parts = urlsplit(url)
    payload = json.dumps({**BODY, "stream": stream}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    assert parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head + payload)
        wait_for_scheduler(url, running=1, within_s=TTFT / 2)


def seconds_to_first_answer_byte(url: str, stream: bool) -> float:
    """Seconds from sending a completion request to the first byte of its body that is not an SSE
    keep-alive comment."""
    started = time.monotonic()
    received = b""
    with (
        httpx.Client(base_url=url, timeout=4 * TTFT) as client,
        client.stream("POST", "/v1/completions", json={**BODY, "stream": stream}) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_raw():
            received += chunk
            while received.startswith(KEEP_ALIVE_COMMENT):
                received = received[len(KEEP_ALIVE_COMMENT) :]
            if received:
                return time.monotonic() - started
    raise AssertionError("the answer had no body")


@pytest.mark.parametrize(
    ("stream", "keep_alive"), [(False, "0"), (True, "0"), (True, "0.5")], ids=["whole-body", "stream", "keep-alive"]
)
def test_a_departed_client_frees_its_slot_at_once(start_server: StartServer, stream: bool, keep_alive: str) -> None:
    ttft_ms = str(int(TTFT * 1000))
    server = start_server(
        "--max-num-seqs", "1", "--time-to-first-token", ttft_ms, "--sse-keep-alive-interval", keep_alive
    )
    request_then_leave(server.url, stream)
    waited = seconds_to_first_answer_byte(server.url, stream)
    # its own prefill only; waiting for the departed request's slot as well would take nearly 2 TTFT
    assert 0.95 * TTFT <= waited < 1.5 * TTFT, f"the second request waited {waited:.2f} s"
    assert gauge(server.url, RUNNING) == 0
