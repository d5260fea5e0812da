"""Hostile requests, each one that once broke the server: every one is a 4xx in vLLM's error body
(code equal to the status, a message naming the field when there is one, never the whole value),
never a 500, and the server answers ``GET /health`` after it.

Bodies are raw bytes (see ``hostile_http``): Python's json would refuse to write most of them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from target_server.tokenizer import VOCAB_SIZE
from tests.target_server.hostile_http import assert_healthy, assert_rejected, raw_body, send

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
TOKENIZE = "/tokenize"

VALID: dict[str, dict[str, Any]] = {
    COMPLETIONS: {"prompt": "hi", "max_tokens": 1},
    CHAT: {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    TOKENIZE: {"prompt": "hi"},
}
"""A small valid body per route; each test spoils one member of it."""

GENERATION_ROUTES = [COMPLETIONS, CHAT]
ROUTES = [*GENERATION_ROUTES, TOKENIZE]


def test_the_unspoiled_bodies_are_accepted(client: httpx.Client) -> None:
    """The baseline the other tests spoil: each route answers 200 to its ``VALID`` body."""
    for route, body in VALID.items():
        assert send(client, "POST", route, raw_body(body)).status_code == 200, route


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("digits", [4301, 5001, 100_000])
@pytest.mark.parametrize("member", ["max_tokens", "extra"])
def test_an_integer_past_pythons_digit_limit_is_400(client: httpx.Client, route: str, digits: int, member: str) -> None:
    """Python's json refuses integers of more than 4,300 digits (ValueError, once a 500); the
    client sent malformed input. ``extra`` puts it in an unknown member, nested in lists."""
    number = "1" + "0" * (digits - 1)
    value = number if member == "max_tokens" else f"[[{number}]]"
    assert_rejected(send(client, "POST", route, raw_body(VALID[route], **{member: value})), 400)
    assert_healthy(client)


LONE = "LONE"
TEXT_PART = '[{"role": "user", "content": [{"type": "text", "text": "LONE"}]}]'
SURROGATE_SITES = [
    pytest.param(COMPLETIONS, "model", '"LONE"', id="completions-model"),
    pytest.param(COMPLETIONS, "prompt", '"a LONE b"', id="completions-prompt"),
    pytest.param(CHAT, "model", '"LONE"', id="chat-model"),
    pytest.param(CHAT, "messages", '[{"role": "user", "content": "LONE"}]', id="chat-content"),
    pytest.param(CHAT, "messages", TEXT_PART, id="chat-text-part"),
    pytest.param(TOKENIZE, "model", '"LONE"', id="tokenize-model"),
    pytest.param(TOKENIZE, "prompt", '"LONE"', id="tokenize-prompt"),
    pytest.param(TOKENIZE, "messages", TEXT_PART, id="tokenize-text-part"),
]
"""Where a lone surrogate goes: (route, field, the field's JSON text with ``LONE`` for it)."""


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff"])
@pytest.mark.parametrize(("route", "field", "template"), SURROGATE_SITES)
def test_a_lone_surrogate_is_400_naming_the_field(
    client: httpx.Client, route: str, field: str, template: str, escape: str
) -> None:
    """A lone surrogate escape (six characters of valid JSON) decodes to a str that cannot be
    encoded as UTF-8 (UnicodeEncodeError, once a 500). The chat body of /tokenize drops ``prompt``."""
    base = {key: value for key, value in VALID[route].items() if not (field == "messages" and key == "prompt")}
    response = send(client, "POST", route, raw_body(base, **{field: template.replace(LONE, escape)}))
    assert_rejected(response, 400, field)
    assert_healthy(client)


DEPTH = 100_000


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("where", ["member", "body"])
def test_nesting_100k_deep_is_400(client: httpx.Client, route: str, where: str) -> None:
    """JSON nested deeper than Python's recursion limit (RecursionError, once a 500), as the
    value of one member or as the whole body."""
    nested = "[" * DEPTH + "]" * DEPTH
    body = raw_body(VALID[route], max_tokens=nested) if where == "member" else nested.encode()
    assert_rejected(send(client, "POST", route, body), 400)
    assert_healthy(client)


@pytest.mark.parametrize(
    ("method", "path", "status", "phrase"),
    [
        ("GET", "/nope", 404, "Not Found"),
        ("POST", "/v1/nope", 404, "Not Found"),
        ("GET", COMPLETIONS, 405, "Method Not Allowed"),
        ("GET", CHAT, 405, "Method Not Allowed"),
        ("GET", TOKENIZE, 405, "Method Not Allowed"),
        ("PUT", "/health", 405, "Method Not Allowed"),
        ("DELETE", "/v1/models", 405, "Method Not Allowed"),
    ],
)
def test_framework_errors_use_vllms_body(
    client: httpx.Client, method: str, path: str, status: int, phrase: str
) -> None:
    """An unknown path or a wrong method gets vLLM's body, as vLLM's HTTPException handler writes
    it: ``type`` is the status phrase and ``param`` is null (once FastAPI's ``{"detail": ...}``)."""
    error = assert_rejected(send(client, method, path), status)
    assert error["type"] == phrase
    assert error["param"] is None
    assert_healthy(client)


TOKEN_ID_ROUTES = [COMPLETIONS, TOKENIZE]


@pytest.mark.parametrize("route", TOKEN_ID_ROUTES)
@pytest.mark.parametrize(
    "ids", ["[-5]", "[1000000000000000000000000000000]", f"[{VOCAB_SIZE}]", f"[0, 1, {VOCAB_SIZE + 1}]"]
)
def test_token_ids_outside_the_vocabulary_are_400(client: httpx.Client, route: str, ids: str) -> None:
    """A prompt of token ids must hold ids in ``0 .. VOCAB_SIZE - 1``, as vLLM checks them (once 200)."""
    assert_rejected(send(client, "POST", route, raw_body(VALID[route], prompt=ids)), 400, "prompt")
    assert_healthy(client)


@pytest.mark.parametrize("route", TOKEN_ID_ROUTES)
@pytest.mark.parametrize("ids", ["[0]", f"[{VOCAB_SIZE - 1}]", f"[0, {VOCAB_SIZE - 1}, 7]"])
def test_token_ids_inside_the_vocabulary_are_accepted(client: httpx.Client, route: str, ids: str) -> None:
    """The edges of the vocabulary are valid ids: the check above must not be off by one."""
    response = send(client, "POST", route, raw_body(VALID[route], prompt=ids))
    assert response.status_code == 200, response.text[:300]


def test_an_empty_id_list_is_tokenized_to_nothing(client: httpx.Client) -> None:
    """Found by the fuzz test: the vocabulary check took the max of no ids (a 500)."""
    response = send(client, "POST", "/tokenize", raw_body(VALID["/tokenize"], prompt="[]"))
    assert response.status_code == 200, response.text[:300]
    assert response.json()["count"] == 0


@pytest.mark.parametrize("route", GENERATION_ROUTES)
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", '"yes"'),
        ("stream", '"true"'),
        ("stream", "1"),
        ("max_tokens", '"16"'),
        ("max_tokens", "16.5"),
        ("max_tokens", "true"),
    ],
)
def test_values_of_the_wrong_type_are_400_not_coerced(client: httpx.Client, route: str, field: str, value: str) -> None:
    """Types are strict, as vLLM's request models are: no string, number or float is coerced into
    a bool or an int, nor a bool into an int (``"stream": "yes"`` once streamed, ``"max_tokens": "16"``
    once generated 16 tokens, ``"max_tokens": true`` one)."""
    response = send(client, "POST", route, raw_body(VALID[route], **{field: value}))
    assert_rejected(response, 400, field)
    assert_healthy(client)


TEN_MIB = 10 * 1024 * 1024


@pytest.mark.parametrize("route", GENERATION_ROUTES)
def test_a_10_mib_string_in_max_tokens_is_not_echoed(client: httpx.Client, route: str) -> None:
    """The 400 for a 10 MiB ``max_tokens`` names the field and quotes a little of the value, not
    all of it (once a 10,485,931-byte response)."""
    response = send(client, "POST", route, raw_body(VALID[route], max_tokens='"' + "x" * TEN_MIB + '"'))
    error = assert_rejected(response, 400, "max_tokens")
    assert len(error["message"]) <= 500, f"message of {len(error['message'])} characters"
    assert len(response.content) <= 1_000, f"body of {len(response.content)} bytes"
    assert_healthy(client)


@pytest.mark.parametrize("route", ROUTES)
def test_a_10_mib_model_name_is_not_echoed(client: httpx.Client, route: str) -> None:
    """An unknown model is a 4xx whose message quotes at most a little of the name: the same
    bound as any value (400 or vLLM's 404 for an unknown model, both in vLLM's body)."""
    response = send(client, "POST", route, raw_body(VALID[route], model='"' + "m" * TEN_MIB + '"'))
    assert response.status_code in (400, 404), response.text[:300]
    error = assert_rejected(response, response.status_code, "model")
    assert len(error["message"]) <= 500, f"message of {len(error['message'])} characters"
    assert len(response.content) <= 1_000, f"body of {len(response.content)} bytes"
    assert_healthy(client)
