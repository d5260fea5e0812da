"""vLLM's request and response shapes, through real HTTP against a running server."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.sse_stream import stream

MAX_MODEL_LEN = 8192  # the server's default, as in vLLM's deleted test_async_tokenization.py
HI = [{"role": "user", "content": "hi"}]


def words(count: int) -> str:
    """A prompt of exactly ``count`` tokens for the bundled tokenizer."""
    return "w " * count


def assert_error(
    response: httpx.Response, status: int, param: str | None, kind: str = "BadRequestError"
) -> dict[str, Any]:
    """``response`` is vLLM's error body with this status, ``param`` and ``type`` (``kind``: a
    check of vLLM's engine or request model by default; ``"Bad Request"`` for a validation error)."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status
    assert (error["type"], error["param"]) == (kind, param)
    assert error["message"]
    return error


def assert_invalid(response: httpx.Response, param: str) -> dict[str, Any]:
    """A request validation error at ``param`` (pydantic's location under ``body``)."""
    return assert_error(response, 400, param, "Bad Request")


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


def test_truncation_minus_one_keeps_one_token_of_room(client: httpx.Client) -> None:
    """-1 keeps ``max_model_len - 1`` tokens whatever ``max_tokens`` asks, which is then clamped
    to the one token left, as in vLLM (once ``max_model_len - max_tokens`` tokens were kept)."""
    body = {"prompt": words(10_000), "truncate_prompt_tokens": -1, "max_tokens": 100}
    usage = client.post("/v1/completions", json=body).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (MAX_MODEL_LEN - 1, 1)


def test_truncation_shorter_prompt_is_left_whole(client: httpx.Client) -> None:
    body = {"prompt": words(10), "truncate_prompt_tokens": 1000}
    assert client.post("/v1/completions", json=body).json()["usage"]["prompt_tokens"] == 10


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_truncation_larger_than_max_model_len_is_rejected(client: httpx.Client, route: str) -> None:
    source = {"prompt": "hi"} if "chat" not in route else {"messages": [{"role": "user", "content": "hi"}]}
    body = {**source, "truncate_prompt_tokens": MAX_MODEL_LEN + 1, "max_tokens": 16}
    error = assert_error(client.post(route, json=body), 400, "truncate_prompt_tokens")
    assert str(MAX_MODEL_LEN) in error["message"]


def test_truncation_leaving_no_room_clamps_max_tokens(client: httpx.Client) -> None:
    """``max_model_len - 2`` kept of a longer prompt leaves 2 tokens: ``max_tokens`` 8 becomes 2;
    ``max_model_len`` kept leaves none: ``max_tokens`` becomes 0, a 400 naming it (as vLLM)."""
    body = {"prompt": words(10_000), "truncate_prompt_tokens": MAX_MODEL_LEN - 2, "max_tokens": 8}
    usage = client.post("/v1/completions", json=body).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (MAX_MODEL_LEN - 2, 2)
    body["truncate_prompt_tokens"] = MAX_MODEL_LEN
    assert_error(client.post("/v1/completions", json=body), 400, "max_tokens")


@pytest.mark.parametrize("value", [-2, -100])
def test_truncation_below_minus_one_is_a_validation_error(client: httpx.Client, value: int) -> None:
    body = {"prompt": "hi", "truncate_prompt_tokens": value}
    assert_invalid(client.post("/v1/completions", json=body), "body.truncate_prompt_tokens")


def test_truncation_to_zero_leaves_an_empty_prompt(client: httpx.Client) -> None:
    """vLLM's engine refuses the empty prompt: a 400 naming no parameter, in-band on a stream."""
    body = {"prompt": words(100), "truncate_prompt_tokens": 0}
    assert_error(client.post("/v1/completions", json=body), 400, None)
    payloads = stream(client, "/v1/completions", body).payloads()
    assert len(payloads) == 2 and payloads[1] == "[DONE]"
    assert payloads[0]["error"]["code"] == 400 and payloads[0]["error"]["param"] is None


@pytest.mark.parametrize("stream_it", [False, True])
def test_overlong_untruncated_prompt_is_rejected_with_input_tokens(client: httpx.Client, stream_it: bool) -> None:
    body = {"prompt": words(10_000), "max_tokens": 16, "stream": stream_it}
    error = assert_error(client.post("/v1/completions", json=body), 400, "input_tokens")
    for figure in ("10000", str(MAX_MODEL_LEN)):
        assert figure in error["message"], error["message"]


def test_max_tokens_past_the_context_is_clamped_not_refused(client: httpx.Client) -> None:
    """A prompt that fits generates at most what the context leaves, as vLLM does (this was a 400)."""
    body = {"prompt": words(MAX_MODEL_LEN - 10), "max_tokens": 11}
    usage = client.post("/v1/completions", json=body).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (MAX_MODEL_LEN - 10, 10)


def test_a_prompt_of_max_model_len_leaves_no_room(client: httpx.Client) -> None:
    """It fits the context but leaves no token to generate: vLLM's 400 names ``max_tokens``."""
    body = {"prompt": words(MAX_MODEL_LEN), "max_tokens": 4}
    assert_error(client.post("/v1/completions", json=body), 400, "max_tokens")


def test_max_tokens_past_max_model_len_is_rejected(client: httpx.Client) -> None:
    body = {"prompt": "hi", "max_tokens": MAX_MODEL_LEN + 1}
    assert_error(client.post("/v1/completions", json=body), 400, "max_tokens")


def test_unknown_model_is_404(client: httpx.Client) -> None:
    assert_error(client.post("/v1/completions", json={"prompt": "hi", "model": "gpt-9"}), 404, "model", "NotFoundError")


@pytest.mark.parametrize(
    ("body", "param", "kind"),
    [
        ({"prompt": "hi", "max_tokens": "many"}, "body.max_tokens", "Bad Request"),
        ({"prompt": "hi", "max_tokens": 0}, "max_tokens", "BadRequestError"),
        ({"prompt": 42}, "body.prompt", "Bad Request"),
        ({"prompt": ["batch", "of two"]}, "prompt", "BadRequestError"),
        ({"prompt": "hi", "stream": "yes please"}, "body.stream", "Bad Request"),
        ({"max_tokens": 3}, "prompt", "BadRequestError"),
        ({"prompt": "hi", "stream_options": {"include_usage": True}}, "stream_options", "BadRequestError"),
        ({"prompt": ""}, "prompt", "BadRequestError"),
        ({"prompt": []}, None, "BadRequestError"),
        ({"prompt": "hi", "temperature": -1}, "temperature", "BadRequestError"),
        ({"prompt": "hi", "top_k": -2}, None, "BadRequestError"),
        ({"prompt": "hi", "logprobs": -2}, "logprobs", "BadRequestError"),
        ({"prompt": "hi", "logprobs": 21}, "logprobs", "BadRequestError"),
        ({"prompt": "hi", "logit_bias": {"x": 1}}, "logit_bias", "BadRequestError"),
        ({"prompt": "hi", "logit_bias": {"99999": 1}}, "logit_bias", "BadRequestError"),
    ],
)
def test_bad_completion_fields_are_400_as_in_vllm(
    client: httpx.Client, body: dict[str, Any], param: str | None, kind: str
) -> None:
    """Each names the field as vLLM does: a validation error its location under ``body``, a
    check of vLLM's (request model, sampling parameters, engine) the parameter or nothing."""
    assert_error(client.post("/v1/completions", json=body), 400, param, kind)


@pytest.mark.parametrize(
    ("body", "param", "kind"),
    [
        ({"messages": []}, None, "BadRequestError"),
        ({"messages": "hi"}, "body.messages", "Bad Request"),
        ({"max_tokens": 2}, "body.messages", "Bad Request"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -1},
            "max_tokens",
            "BadRequestError",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs", "BadRequestError"),
    ],
)
def test_bad_chat_fields_are_400_as_in_vllm(
    client: httpx.Client, body: dict[str, Any], param: str | None, kind: str
) -> None:
    assert_error(client.post("/v1/chat/completions", json=body), 400, param, kind)


def test_a_message_of_any_role_is_accepted(client: httpx.Client) -> None:
    """vLLM takes custom roles (this was a 400)."""
    body = {"messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 1}
    assert client.post("/v1/chat/completions", json=body).status_code == 200


@pytest.mark.parametrize(
    ("part", "accepted"),
    [
        ({"type": "text", "text": "hi"}, True),
        ({"type": "input_text", "text": "hi"}, True),
        ({"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}, False),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, False),
        ({"type": "text"}, False),
        ({"type": "hologram", "text": "hi"}, False),
    ],
)
def test_content_parts_a_text_only_model_takes(client: httpx.Client, part: dict[str, Any], accepted: bool) -> None:
    """Text parts count; media parts, unknown parts and text parts without text are a 400 naming
    no parameter, as vLLM serving a text-only model answers (media parts were once ignored)."""
    body = {"messages": [{"role": "user", "content": [part]}], "max_tokens": 1}
    response = client.post("/v1/chat/completions", json=body)
    if accepted:
        assert response.status_code == 200, response.text
    else:
        assert_error(response, 400, None)


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_engine_checks_arrive_in_band_on_a_stream(client: httpx.Client, route: str) -> None:
    """vLLM's engine checks its request after a stream's headers went out: HTTP 200, then the 400
    as the one data frame, then ``[DONE]``; without ``stream`` the same check is a plain 400."""
    source = {"prompt": "hi"} if "chat" not in route else {"messages": [{"role": "user", "content": "hi"}]}
    body = {**source, "logit_bias": {"99999": 1}}
    assert_error(client.post(route, json=body), 400, "logit_bias")
    result = stream(client, route, body)
    assert result.response.status_code == 200
    error, done = result.payloads()
    assert done == "[DONE]"
    assert (error["error"]["type"], error["error"]["param"], error["error"]["code"]) == (
        "BadRequestError",
        "logit_bias",
        400,
    )


@pytest.mark.parametrize(
    ("raw", "param"), [(b"{not json", "body.1"), (b"[1, 2]", "body"), (b"", "body"), (b"null", "body")]
)
def test_malformed_bodies_are_validation_errors(client: httpx.Client, raw: bytes, param: str) -> None:
    for route in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        response = client.post(route, content=raw, headers={"Content-Type": "application/json"})
        assert_invalid(response, param)


def test_a_body_the_decoder_gives_up_on_is_fastapis_400(client: httpx.Client) -> None:
    """Bytes that are not UTF-8 are not a syntax error: FastAPI's ``detail``, as vLLM answers."""
    for route in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        response = client.post(route, content=b'{"prompt": "\xff\xfe"}', headers={"Content-Type": "application/json"})
        assert response.status_code == 400
        assert response.json() == {"detail": "There was an error parsing the body"}


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/vnd.x+json"])
def test_only_a_json_body_is_accepted(client: httpx.Client, content_type: str | None) -> None:
    """vLLM takes ``application/json`` only (any case, any parameters): anything else is a 400
    naming no parameter, even a body that is valid JSON."""
    headers = {"Content-Type": content_type} if content_type else {}
    for route in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        response = client.post(route, content=b'{"prompt": "hi"}', headers=headers)
        error = assert_error(response, 400, None, "Bad Request")
        assert "application/json" in error["message"]
    response = client.post(
        "/v1/completions",
        content=b'{"prompt": "hi", "max_tokens": 1}',
        headers={"Content-Type": "Application/JSON; charset=utf-8"},
    )
    assert response.status_code == 200


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
