"""Keep-alive through a real server: queueing and prefill covered, real clients unharmed."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from target_server.tokenizer import output_token
from tests.conftest import StartServer
from tests.sse_stream import stream

INTERVAL = 0.1
SLACK = 0.25  # scheduling jitter allowed on a loaded 2-core machine (without keep-alive: 1.2 s)


def test_keep_alive_covers_queueing_and_prefill(start_server: StartServer) -> None:
    server = start_server(
        "--max-num-seqs", "1", "--time-to-first-token", "600", "--sse-keep-alive-interval", str(INTERVAL)
    )
    body = {"prompt": "hi", "max_tokens": 2}
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/v1/completions", json={**body, "stream": True}) as first,
    ):
        queued = stream(client, "/v1/completions", body)  # waits ~0.6 s for the slot, then 0.6 s prefill
        first.read()
    kinds = queued.kinds()
    assert kinds[-3:] == ["data", "data", "done"]
    assert kinds.count("keepalive") >= 8  # ~1.2 s of silence at 0.1 s
    times = [queued.headers_at] + [frame.t for frame in queued.frames]
    assert max(b - a for a, b in itertools.pairwise(times)) <= INTERVAL + SLACK


def test_no_comment_when_tokens_flow_faster_than_the_interval(start_server: StartServer) -> None:
    server = start_server("--inter-token-latency", "20", "--sse-keep-alive-interval", "0.5")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 30})
    assert "keepalive" not in result.kinds()


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_openai_client_streams_through_keep_alive_comments(start_server: StartServer, route: str) -> None:
    server = start_server(
        "--time-to-first-token", "400", "--inter-token-latency", "150", "--sse-keep-alive-interval", "0.05"
    )
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    if route == "chat":
        chunks = sdk.chat.completions.create(
            model="sse-soak/tiny-sim",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        usage = None
    else:
        completion_chunks = sdk.completions.create(
            model="sse-soak/tiny-sim", prompt="hi", max_tokens=4, stream=True, stream_options={"include_usage": True}
        )
        collected = list(completion_chunks)
        pieces = [c.choices[0].text for c in collected if c.choices]
        usage = collected[-1].usage
    assert "".join(pieces) == "".join(output_token(0, index) for index in range(4))
    if usage is not None:
        assert usage.completion_tokens == 4
    sdk.close()


def test_metrics_count_what_was_sent(start_server: StartServer) -> None:
    server = start_server("--time-to-first-token", "350", "--sse-keep-alive-interval", "0.1")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "w " * 12, "max_tokens": 3})
        client.post("/v1/completions", json={"prompt": "hi", "model": "nope"})
        text = client.get("/metrics").text
    metrics = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    vllm = '{engine="0",model_name="sse-soak/tiny-sim"}'  # vLLM's labels on its families
    assert float(metrics["sse_keepalive_comments_total"]) == result.kinds().count("keepalive") >= 2
    assert float(metrics["vllm:prompt_tokens_total" + vllm]) == 12
    assert float(metrics["vllm:generation_tokens_total" + vllm]) == 3
    assert float(metrics['http_errors_total{status="404"}']) == 1
    # vLLM's request counter: by route template, method and status class, counted once answered
    assert float(metrics['http_requests_total{handler="/v1/completions",method="POST",status="2xx"}']) == 1
    assert float(metrics['http_requests_total{handler="/v1/completions",method="POST",status="4xx"}']) == 1
    assert not any(key.startswith('http_requests_total{handler="/metrics"') for key in metrics)


def trace_lines_once_flushed(trace: Path, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The trace's lines once it holds ``count`` (a stream's lines are flushed when it has ended on
    the server, which may be just after its client read the last frame)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


def test_trace_file_records_every_frame_the_client_received(start_server: StartServer, tmp_path: Path) -> None:
    trace = tmp_path / "frames.jsonl"
    server = start_server(
        "--trace-file",
        str(trace),
        "--time-to-first-token",
        "250",
        "--sse-keep-alive-interval",
        "0.1",
        "--inter-token-latency",
        "10",
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 5}, **{"X-Request-Id": "traced"})
    lines = trace_lines_once_flushed(trace, len(result.frames))
    assert {line["request_id"] for line in lines} == {"traced"}
    assert [line["kind"] for line in lines] == result.kinds()
    assert [line["bytes"] for line in lines] == [frame.nbytes for frame in result.frames]
    # Same clock (CLOCK_MONOTONIC) in both processes: a frame is sent before it is received.
    assert all(line["t"] <= frame.t for line, frame in zip(lines, result.frames, strict=True))
