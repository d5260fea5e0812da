"""``n`` choices, ``continuous_usage_stats`` and the routes beside generation (``/version``,
``/detokenize``, ``/tokenize``'s options, CORS), as vLLM 0.32.0 answers them (``tests/differential``
compares them with vLLM itself; these run without it)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.server_gauges import scheduler, wait_for_scheduler
from tests.sse_stream import stream

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def order_of_choices(payloads: list[Any]) -> list[int]:
    """Each content chunk's choice index, in order (role chunks left out)."""
    return [
        choice["index"]
        for payload in payloads
        if isinstance(payload, dict)
        for choice in payload["choices"]
        if "role" not in choice.get("delta", {})
    ]


def test_with_one_slot_the_choices_stream_one_after_the_other(start_server: StartServer) -> None:
    server = start_server("--max-num-seqs", "1", "--inter-token-latency", "5")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        result = stream(client, "/v1/chat/completions", {**CHAT, "max_tokens": 3, "n": 2})
    payloads = result.payloads()
    assert [payload["choices"][0]["delta"] for payload in payloads[:2]] == [{"role": "assistant", "content": ""}] * 2
    assert [payload["choices"][0]["index"] for payload in payloads[:2]] == [0, 1]
    assert order_of_choices(payloads) == [0, 0, 0, 1, 1, 1]
    finishes = [(p["choices"][0]["index"], p["choices"][0]["finish_reason"]) for p in payloads[2:-1]]
    assert [index for index, reason in finishes if reason == "length"] == [0, 1]


def test_with_a_slot_each_the_choices_interleave_and_share_one_usage(start_server: StartServer) -> None:
    server = start_server("--max-num-seqs", "4", "--inter-token-latency", "20")
    body = {"prompt": "hi", "max_tokens": 4, "n": 2, "stream_options": {"include_usage": True}}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        payloads = stream(client, "/v1/completions", body).payloads()
    order = order_of_choices(payloads)
    assert sorted(order) == [0, 0, 0, 0, 1, 1, 1, 1] and order != sorted(order)
    assert payloads[-2]["choices"] == []
    assert payloads[-2]["usage"] == {"prompt_tokens": 1, "total_tokens": 9, "completion_tokens": 8}


def test_a_whole_answer_has_each_choice(client: httpx.Client) -> None:
    answer = client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2, "n": 3}).json()
    assert [choice["index"] for choice in answer["choices"]] == [0, 1, 2]
    assert all(choice["message"]["content"] for choice in answer["choices"])
    assert answer["usage"]["completion_tokens"] == 6


def test_closing_a_stream_of_several_choices_frees_every_slot(start_server: StartServer) -> None:
    server = start_server("--max-num-seqs", "1", "--inter-token-latency", "50")
    body = {"prompt": "hi", "max_tokens": 200, "n": 3, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/v1/completions", json=body) as response,
    ):
        chunks = response.iter_raw()  # held: an iterator collected closes the response
        next(chunks)  # a token is out: one choice runs, two wait
        assert scheduler(server.url) == (1, 2)
    wait_for_scheduler(server.url, running=0, within_s=5)


def test_an_inband_error_of_several_choices_ends_the_stream_once(start_server: StartServer) -> None:
    server = start_server("--failure-injection-rate", "100", "--failure-types", "inband_error")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "n": 2})
    kinds = result.kinds()
    assert kinds[-2:] == ["error", "done"] and kinds.count("error") == 1
    assert scheduler(server.url) == (0, 0)


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_continuous_usage_stats_count_each_choices_tokens(client: httpx.Client, route: str) -> None:
    source: dict[str, Any] = {"prompt": "hi"} if route == "completions" else CHAT
    options = {"include_usage": True, "continuous_usage_stats": True}
    path = "/v1/completions" if route == "completions" else "/v1/chat/completions"
    payloads = stream(client, path, {**source, "max_tokens": 2, "n": 2, "stream_options": options}).payloads()
    chunks = payloads[:-1]
    assert all("usage" in chunk for chunk in chunks)
    per_choice = [
        (chunk["choices"][0]["index"], chunk["usage"]["completion_tokens"]) for chunk in chunks if chunk["choices"]
    ]
    content = [(index, tokens) for index, tokens in per_choice if tokens]
    assert content == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    if route == "chat":
        assert chunks[0]["usage"]["completion_tokens_details"] is None


def test_continuous_usage_stats_need_include_usage(client: httpx.Client) -> None:
    options = {"continuous_usage_stats": True}
    payloads = stream(
        client, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream_options": options}
    ).payloads()
    assert not any("usage" in payload for payload in payloads[:-1])


def test_version_names_the_vllm_it_answers_as(client: httpx.Client) -> None:
    assert client.get("/version").json() == {"version": "0.32.0"}


def test_tokenize_gives_token_strings_and_leaves_out_the_generation_prompt_when_asked(client: httpx.Client) -> None:
    answer = client.post("/tokenize", json={"prompt": "Hello, world", "return_token_strs": True}).json()
    assert answer == {
        "count": 3,
        "max_model_len": 8192,
        "tokens": answer["tokens"],
        "token_strs": ["Hello", ",", "world"],
    }
    assert list(answer) == ["count", "max_model_len", "tokens", "token_strs"]
    full = client.post("/tokenize", json=CHAT).json()
    bare = client.post("/tokenize", json={**CHAT, "add_generation_prompt": False}).json()
    assert full["tokens"][: bare["count"]] == bare["tokens"] and full["count"] == bare["count"] + 2


def test_detokenize_gives_back_the_prompt_and_refuses_negative_ids(client: httpx.Client) -> None:
    ids = client.post("/tokenize", json={"prompt": "load test tokens"}).json()["tokens"]
    assert client.post("/detokenize", json={"tokens": ids}).json() == {"prompt": "load test tokens"}
    assert client.post("/detokenize", json={"tokens": [-1]}).status_code == 400
    assert client.post("/detokenize", json={"model": "nope", "tokens": ids}).status_code == 404


def test_every_answer_varies_by_origin_and_a_preflight_is_refused(client: httpx.Client) -> None:
    assert client.get("/health").headers["vary"] == "Origin"
    preflight = {"Origin": "http://example.com", "Access-Control-Request-Method": "POST"}
    response = client.options("/v1/completions", headers=preflight)
    assert (response.status_code, response.text) == (400, "Disallowed CORS origin")


def test_requests_are_counted_once_answered(start_server: StartServer) -> None:
    server = start_server("--inter-token-latency", "100")
    seen: list[str] = []

    def streaming() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            seen.extend(stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 10}).kinds())

    streamer = threading.Thread(target=streaming)
    streamer.start()
    wait_for_scheduler(server.url, running=1, within_s=5)  # mid-stream: 10 tokens at 100 ms take a second
    during = httpx.get(server.url + "/metrics", timeout=10).text
    streamer.join()
    after = httpx.get(server.url + "/metrics", timeout=10).text
    counted = 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 1.0'
    assert counted not in during and counted in after and seen[-1] == "done"
