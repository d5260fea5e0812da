"""``--tokenize-api``: vLLM's ``/tokenize``, a foreign one that takes only ``{"text"}``, or none."""

from __future__ import annotations

import httpx
import pytest

from target_server.config import ServerConfig
from tests.conftest import StartServer
from tests.target_server.cli_run import run_cli

VLLM_PROMPT = {"model": "sse-soak/tiny-sim", "prompt": "w w w"}
VLLM_CHAT = {"model": "sse-soak/tiny-sim", "messages": [{"role": "user", "content": "w w w"}]}


@pytest.mark.fast
def test_vllm_is_the_default_and_the_option_parses_to_the_field() -> None:
    assert ServerConfig().tokenize_api == ServerConfig.from_args([]).tokenize_api == "vllm"
    assert ServerConfig.from_args(["--tokenize-api", "text"]).tokenize_api == "text"
    with pytest.raises(ValueError, match="--tokenize-api got 'tiktoken'; choose from vllm, text, none"):
        ServerConfig(tokenize_api="tiktoken")


def test_an_unknown_tokenize_api_exits_2_naming_the_choices() -> None:
    result = run_cli("--tokenize-api", "tiktoken")
    assert result.returncode == 2
    assert "invalid choice: 'tiktoken' (choose from 'vllm', 'text', 'none')" in result.stderr.strip().splitlines()[-1]


def test_vllm_tokenize_counts_prompts_and_messages(start_server: StartServer) -> None:
    server = start_server("--tokenize-api", "vllm")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/tokenize", json=VLLM_PROMPT).json()["count"] == 3
        assert client.post("/tokenize", json=VLLM_CHAT).json()["count"] > 3  # the chat template adds a few


def test_text_tokenize_takes_only_text_and_refuses_vllms_body_with_vllms_error(start_server: StartServer) -> None:
    server = start_server("--tokenize-api", "text")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/tokenize", json={"text": "w w w"})
        assert answer.status_code == 200
        assert set(answer.json()) == {"tokens"} and len(answer.json()["tokens"]) == 3
        for body in (VLLM_PROMPT, VLLM_CHAT, {"text": 5}, {"text": "w", "model": "sse-soak/tiny-sim"}):
            refused = client.post("/tokenize", json=body)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert (error["type"], error["param"], error["code"]) == ("BadRequestError", "text", 400)
            assert 'takes only {"text": "..."}' in error["message"]
        # the rest of the API is untouched
        assert client.post("/v1/completions", json={"prompt": "w w", "max_tokens": 2}).status_code == 200


def test_no_tokenize_is_an_unknown_path(start_server: StartServer) -> None:
    server = start_server("--tokenize-api", "none")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for body in (VLLM_PROMPT, {"text": "w"}):
            assert client.post("/tokenize", json=body).status_code == 404
        assert client.post("/tokenize", json=VLLM_PROMPT).json() == client.post("/nowhere", json={}).json()
        assert client.get("/v1/models").status_code == 200
