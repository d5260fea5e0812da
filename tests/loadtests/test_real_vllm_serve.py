"""Real vLLM started on this machine's CPU (``python -m loadtests vllm setup`` installs it): one
server for the session (its start takes about a minute), streaming, keep-alive while queued, the
API key, the tiny model's tokenizer; and the model directory's determinism. Without an install
these skip, saying why, unless ``SSE_SOAK_REQUIRE_VLLM=1`` (CI sets it): then they fail."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import httpx

from loadtests import _real_vllm as real
from tests.conftest import VLLM_AUTH as AUTH
from tests.conftest import VLLM_KEEP_ALIVE as INTERVAL
from tests.conftest import require_vllm


def stream_lines(url: str, body: dict[str, object], lines: list[tuple[float, str]], started: threading.Event) -> None:
    """POST a streaming completion; every non-empty line with its arrival time (``time.monotonic()``)."""
    with (
        httpx.Client(timeout=120, headers=AUTH) as client,
        client.stream("POST", f"{url}/v1/completions", json=body) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                lines.append((time.monotonic(), line))
                if line.startswith("data: "):
                    started.set()


def completion(server: real.VllmServer, max_tokens: int) -> dict[str, object]:
    return {
        "model": server.model,
        "prompt": "Hello there",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }


def test_a_queued_stream_gets_keep_alive_comments_until_its_first_token(vllm_server: real.VllmServer) -> None:
    """One slot: a long generation holds it while a second stream waits. The waiting stream gets
    its headers, then a ``: keep-alive`` comment per second of silence, then its tokens; both end
    with ``[DONE]``."""
    long_lines: list[tuple[float, str]] = []
    long_started = threading.Event()
    holder = threading.Thread(
        target=stream_lines, args=(vllm_server.url, completion(vllm_server, 2500), long_lines, long_started)
    )
    holder.start()
    try:
        assert long_started.wait(60), "the long stream sent no token within 60 s"
        queued: list[tuple[float, str]] = []
        sent = time.monotonic()
        stream_lines(vllm_server.url, completion(vllm_server, 8), queued, threading.Event())
    finally:
        holder.join(120)
    assert long_lines[-1][1] == "data: [DONE]" and queued[-1][1] == "data: [DONE]"
    first_data = next(index for index, (_, line) in enumerate(queued) if line.startswith("data: "))
    comments = [line for _, line in queued[:first_data]]
    silence = queued[first_data][0] - sent
    assert comments and set(comments) == {": keep-alive"}, queued[: first_data + 1]
    assert abs(len(comments) - math.floor(silence / INTERVAL)) <= 1, (len(comments), silence)
    assert not any(line.startswith(":") for _, line in queued[first_data:])  # tokens came fast once it ran
    tokens = [line for _, line in queued if line.startswith("data: {")]
    assert len(tokens) == 8


def test_the_api_key_guards_v1_but_not_health(vllm_server: real.VllmServer) -> None:
    with httpx.Client(base_url=vllm_server.url, timeout=30) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/health").status_code == 200
        listed = client.get("/v1/models", headers=AUTH).json()
    assert [model["id"] for model in listed["data"]] == ["tiny-llama"]
    assert listed["data"][0]["max_model_len"] == 8192


def test_the_tiny_models_tokenizer_adds_bos_and_its_chat_template_works(vllm_server: real.VllmServer) -> None:
    with httpx.Client(base_url=vllm_server.url, timeout=60, headers=AUTH) as client:
        tokenized = client.post("/tokenize", json={"model": vllm_server.model, "prompt": "Hello there"}).json()
        chat = client.post(
            "/v1/chat/completions",
            json={"model": vllm_server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        )
    assert tokenized["tokens"][0] == 1 and tokenized["count"] == len(tokenized["tokens"]) > 1
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] > 1


def test_the_model_directory_is_the_same_bytes_each_time_and_reused(tmp_path: Path) -> None:
    install = require_vllm()
    first = real.make_model_dir(tmp_path / "a", install.python)
    second = real.make_model_dir(tmp_path / "b", install.python)
    files = sorted(path.name for path in first.iterdir())
    assert files == sorted(path.name for path in second.iterdir())
    assert files == [
        "config.json",
        "generation_config.json",
        real.MODEL_STAMP,
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert all((first / name).read_bytes() == (second / name).read_bytes() for name in files)
    assert (first / "config.json").read_bytes() == (install.model_dir / "config.json").read_bytes()
    made = (first / "tokenizer.json").stat().st_mtime_ns
    assert real.make_model_dir(first, Path("/nonexistent/python")) == first  # reused: nothing run
    assert (first / "tokenizer.json").stat().st_mtime_ns == made
