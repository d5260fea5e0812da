"""Scheduling and timing of the simulated engine, observed from a real client."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.conftest import StartServer
from tests.server_gauges import RUNNING, gauge, wait_for_scheduler
from tests.sse_stream import Streamed, stream


def first_data_at(result: Streamed) -> float:
    return next(frame.t for frame in result.frames if frame.data is not None)


def test_headers_arrive_before_prefill_and_the_first_token_after_it(start_server: StartServer) -> None:
    server = start_server("--time-to-first-token", "800")
    with httpx.Client(base_url=server.url) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 1})
    assert result.headers_at - result.started_at < 0.4, "headers waited for prefill"
    assert first_data_at(result) - result.started_at >= 0.8


def test_prefill_time_grows_with_prompt_tokens(start_server: StartServer) -> None:
    server = start_server("--prefill-time-per-token", "0.1")  # 5000 tokens -> 0.5 s
    with httpx.Client(base_url=server.url) as client:
        short = stream(client, "/v1/completions", {"prompt": "w " * 10, "max_tokens": 1})
        long = stream(client, "/v1/completions", {"prompt": "w " * 5000, "max_tokens": 1})
    assert first_data_at(long) - long.started_at >= 0.5
    assert first_data_at(short) - short.started_at < 0.25


def test_tokens_are_spaced_by_the_inter_token_latency(start_server: StartServer) -> None:
    server = start_server("--inter-token-latency", "60")
    with httpx.Client(base_url=server.url) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 6})
    token_times = [frame.t for frame in result.frames if frame.data and frame.data != "[DONE]"]
    assert len(token_times) == 6
    assert token_times[-1] - token_times[0] >= 5 * 0.06 * 0.9  # deadlines are the server's; 10% for client jitter


async def _stream_until_done(client: httpx.AsyncClient, started: asyncio.Event, name: str) -> tuple[str, float]:
    body = {"prompt": "hi", "max_tokens": 1, "stream": True}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        started.set()  # headers are back: the request is queued on the server
        first_token = None
        async for line in response.aiter_lines():
            if first_token is None and line.startswith("data: {"):
                first_token = time.monotonic()
    assert first_token is not None
    return name, first_token


def test_requests_beyond_max_num_seqs_wait_first_come_first_served(start_server: StartServer) -> None:
    server = start_server("--max-num-seqs", "1", "--time-to-first-token", "300")

    async def scenario() -> tuple[list[tuple[str, float]], float]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            tasks = []
            for name in "ABC":
                headers_back = asyncio.Event()
                tasks.append(asyncio.create_task(_stream_until_done(client, headers_back, name)))
                await headers_back.wait()  # arrival order is A, B, C
            waiting = await asyncio.to_thread(gauge, server.url, "vllm:num_requests_waiting")
            return await asyncio.gather(*tasks), waiting

    finished, waiting_while_a_runs = asyncio.run(scenario())
    assert waiting_while_a_runs == 2
    order = [name for name, _ in sorted(finished, key=lambda pair: pair[1])]
    assert order == ["A", "B", "C"]
    times = sorted(t for _, t in finished)
    assert times[1] - times[0] >= 0.3 * 0.9 and times[2] - times[1] >= 0.3 * 0.9  # a prefill apart, less jitter


def test_a_client_disconnect_frees_its_slot_at_once(start_server: StartServer) -> None:
    server = start_server("--max-num-seqs", "1", "--time-to-first-token", "30000")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        body = {"prompt": "hi", "max_tokens": 1, "stream": True}
        with client.stream("POST", "/v1/completions", json=body):
            assert gauge(server.url, RUNNING) == 1
        # The stream is closed: the 30 s prefill must not hold the only slot.
        wait_for_scheduler(server.url, running=0, within_s=5)


def test_kv_cache_usage_is_the_running_requests_tokens_over_the_cache_and_back_to_zero(
    start_server: StartServer,
) -> None:
    """vLLM V1's gauge name; the simulated cache holds max_num_seqs * max_model_len tokens."""
    server = start_server("--max-num-seqs", "2", "--max-model-len", "100", "--time-to-first-token", "2000")
    assert gauge(server.url, "vllm:kv_cache_usage_perc") == 0.0
    body = {"prompt": "w " * 40, "max_tokens": 2, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/v1/completions", json=body) as response,
    ):
        assert response.status_code == 200  # headers come back before the slot is taken, and prefill
        deadline = time.monotonic() + 1.5  # within the 2 s prefill: no token generated yet
        while (usage := gauge(server.url, "vllm:kv_cache_usage_perc")) == 0.0 and time.monotonic() < deadline:
            pass
        assert usage == 40 / (2 * 100)
        response.read()
    assert gauge(server.url, "vllm:kv_cache_usage_perc") == 0.0  # released before [DONE] was sent
