"""vLLM's request and response shapes, through real HTTP against a running server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.sse_stream import stream

MAX_MODEL_LEN = 8192  # the server's default, as in vLLM's deleted test_async_tokenization.py


def words(count: int) -> str:
    """A prompt of exactly ``count`` tokens for the bundled tokenizer."""
    return "w " * count


def assert_error(response: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status
    assert error["param"] == param
    assert error["message"]
    return error


def test_models_lists_the_served_model_with_its_context_length(client: httpx.Client) -> None:
    cards = client.get("/v1/models").json()["data"]
    assert [card["id"] for card in cards] == ["sse-soak/tiny-sim"]
    assert cards[0]["max_model_len"] == MAX_MODEL_LEN


def test_health_answers_200(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_tokenize_count_equals_usage_prompt_tokens(client: httpx.Client, route: str) -> None:
    if route == "chat":
        source: dict[str, Any] = {"messages": [{"role": "user", "content": "How long is this, exactly?"}]}
        path = "/v1/chat/completions"
    else:
        source = {"prompt": "How long is this, exactly?"}
        path = "/v1/completions"
    tokenized = client.post("/tokenize", json=source).json()
    assert tokenized["count"] == len(tokenized["tokens"])
    assert tokenized["max_model_len"] == MAX_MODEL_LEN
    usage = client.post(path, json={**source, "max_tokens": 2}).json()["usage"]
    assert usage["prompt_tokens"] == tokenized["count"]
    assert usage["completion_tokens"] == 2


def test_token_ids_are_accepted_as_a_prompt(client: httpx.Client) -> None:
    body = client.post("/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 1}).json()
    assert body["usage"]["prompt_tokens"] == 3


def test_completions_generate_sixteen_tokens_by_default(client: httpx.Client) -> None:
    usage = client.post("/v1/completions", json={"prompt": "hi"}).json()["usage"]
    assert usage["completion_tokens"] == 16


@pytest.mark.parametrize("keep", [1000, 1, MAX_MODEL_LEN - 16])
def test_truncation_keeps_exactly_the_requested_number_of_tokens(client: httpx.Client, keep: int) -> None:
    body = {"prompt": words(10_000), "truncate_prompt_tokens": keep}
    usage = client.post("/v1/completions", json=body).json()["usage"]
    assert usage["prompt_tokens"] == keep


def test_truncation_keeps_the_last_tokens(client: httpx.Client) -> None:
    prompt = words(50) + "alpha beta gamma"
    kept = client.post("/tokenize", json={"prompt": "alpha beta gamma"}).json()["tokens"]
    # echo is not implemented, so check through the tokenizer: the same last three ids survive.
    full = client.post("/tokenize", json={"prompt": prompt}).json()["tokens"]
    assert full[-3:] == kept
    usage = client.post("/v1/completions", json={"prompt": prompt, "truncate_prompt_tokens": 3}).json()["usage"]
    assert usage["prompt_tokens"] == 3


def test_truncation_minus_one_keeps_the_most_that_fits(client: httpx.Client) -> None:
    body = {"prompt": words(10_000), "truncate_prompt_tokens": -1, "max_tokens": 100}
    assert client.post("/v1/completions", json=body).json()["usage"]["prompt_tokens"] == MAX_MODEL_LEN - 100


def test_truncation_shorter_prompt_is_left_whole(client: httpx.Client) -> None:
    body = {"prompt": words(10), "truncate_prompt_tokens": 1000}
    assert client.post("/v1/completions", json=body).json()["usage"]["prompt_tokens"] == 10


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_truncation_larger_than_max_input_is_rejected(client: httpx.Client, route: str) -> None:
    source = {"prompt": "hi"} if "chat" not in route else {"messages": [{"role": "user", "content": "hi"}]}
    body = {**source, "truncate_prompt_tokens": MAX_MODEL_LEN, "max_tokens": 16}
    error = assert_error(client.post(route, json=body), 400, "truncate_prompt_tokens")
    assert str(MAX_MODEL_LEN - 16) in error["message"]


@pytest.mark.parametrize("value", [-2, -100])
def test_truncation_below_minus_one_is_a_validation_error(client: httpx.Client, value: int) -> None:
    body = {"prompt": "hi", "truncate_prompt_tokens": value}
    assert_error(client.post("/v1/completions", json=body), 400, "truncate_prompt_tokens")


@pytest.mark.parametrize("stream_it", [False, True])
def test_overlong_untruncated_prompt_is_rejected_with_input_tokens(client: httpx.Client, stream_it: bool) -> None:
    body = {"prompt": words(10_000), "max_tokens": 16, "stream": stream_it}
    error = assert_error(client.post("/v1/completions", json=body), 400, "input_tokens")
    for figure in ("10000", "16", str(MAX_MODEL_LEN), str(MAX_MODEL_LEN - 16)):
        assert figure in error["message"], error["message"]


def test_prompt_plus_max_tokens_over_the_context_is_rejected(client: httpx.Client) -> None:
    body = {"prompt": words(MAX_MODEL_LEN - 10), "max_tokens": 11}
    assert_error(client.post("/v1/completions", json=body), 400, "input_tokens")
    body["max_tokens"] = 10
    assert client.post("/v1/completions", json=body).status_code == 200


def test_unknown_model_is_404(client: httpx.Client) -> None:
    error = assert_error(client.post("/v1/completions", json={"prompt": "hi", "model": "gpt-9"}), 404, "model")
    assert error["type"] == "NotFoundError"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "hi", "max_tokens": "many"}, "max_tokens"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"prompt": 42}, "prompt"),
        ({"prompt": ["batch", "of two"]}, "prompt"),
        ({"prompt": "hi", "stream": "yes please"}, "stream"),
        ({"max_tokens": 3}, "prompt"),
        ({"prompt": "hi", "n": 0}, "n"),
        ({"prompt": "hi", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": "hi", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"prompt": ""}, "prompt"),
    ],
)
def test_bad_completion_fields_are_400_naming_the_field(client: httpx.Client, body: dict[str, Any], param: str) -> None:
    assert_error(client.post("/v1/completions", json=body), 400, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -1}, "max_completion_tokens"),
    ],
)
def test_bad_chat_fields_are_400_naming_the_field(client: httpx.Client, body: dict[str, Any], param: str) -> None:
    assert_error(client.post("/v1/chat/completions", json=body), 400, param)


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_malformed_bodies_are_400_never_500(client: httpx.Client, raw: bytes) -> None:
    for route in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        response = client.post(route, content=raw, headers={"Content-Type": "application/json"})
        assert_error(response, 400, None)


def test_stream_headers_are_event_stream_and_the_request_id_becomes_the_id(client: httpx.Client) -> None:
    result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, **{"X-Request-Id": "req-42"})
    assert result.response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "x-request-id" not in result.response.headers  # vLLM does not echo it
    assert all(p["id"] == "cmpl-req-42" for p in result.payloads()[:-1])


def test_completion_stream_has_one_chunk_per_token_then_usage_then_done(client: httpx.Client) -> None:
    body = {"prompt": "hi", "max_tokens": 4, "stream_options": {"include_usage": True}}
    payloads = stream(client, "/v1/completions", body).payloads()
    tokens, usage, done = payloads[:4], payloads[4], payloads[5]
    assert [chunk["object"] for chunk in tokens] == ["text_completion"] * 4
    assert [chunk["choices"][0]["finish_reason"] for chunk in tokens] == [None, None, None, "length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4
    assert done == "[DONE]" and len(payloads) == 6


def test_chat_stream_is_role_then_deltas_then_usage_then_done(client: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream_options": {"include_usage": True}}
    payloads = stream(client, "/v1/chat/completions", body).payloads()
    role, deltas, usage, done = payloads[0], payloads[1:4], payloads[4], payloads[5]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(d["object"] == "chat.completion.chunk" and d["choices"][0]["delta"]["content"] for d in deltas)
    assert deltas[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert done == "[DONE]" and len(payloads) == 6


def test_stream_without_include_usage_has_no_usage_chunk(client: httpx.Client) -> None:
    payloads = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).payloads()
    assert len(payloads) == 3 and all("usage" not in p for p in payloads[:-1])


def test_chat_without_max_tokens_stops_at_the_server_cap(start_server: StartServer) -> None:
    server = start_server("--default-chat-max-tokens", "7")
    body = {"messages": [{"role": "user", "content": "hi"}]}
    usage = httpx.post(server.url + "/v1/chat/completions", json=body).json()["usage"]
    assert usage["completion_tokens"] == 7


def test_api_key_is_required_when_set(start_server: StartServer) -> None:
    server = start_server("--api-key", "sekrit")
    body = {"prompt": "hi", "max_tokens": 1}
    denied = httpx.post(server.url + "/v1/completions", json=body)
    assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
    allowed = httpx.post(server.url + "/v1/completions", json=body, headers={"Authorization": "Bearer sekrit"})
    assert allowed.status_code == 200
    assert httpx.get(server.url + "/health").status_code == 200
