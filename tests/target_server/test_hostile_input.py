"""Hostile requests, each one that once broke the server: every one is a 4xx as vLLM 0.32.0 answers
it (its error body, code equal to the status, a message naming the field when there is one, never
the whole value; or the framework's ``{"detail": ...}`` where vLLM sends that), never a 500, and
the server answers ``GET /health`` after it. What vLLM answers was measured
(``tests/differential/test_errors_parity.py`` compares the two servers).

Bodies are raw bytes (see ``hostile_http``): Python's json would refuse to write most of them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from target_server.tokenizer import VOCAB_SIZE
from tests.target_server.hostile_http import assert_healthy, assert_rejected, detail_of, raw_body, send

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
    """Python's json refuses integers of more than 4,300 digits (ValueError, once a 500): FastAPI's
    400 ``There was an error parsing the body``, as vLLM answers. ``extra`` puts it in an unknown
    member, nested in lists."""
    number = "1" + "0" * (digits - 1)
    value = number if member == "max_tokens" else f"[[{number}]]"
    response = send(client, "POST", route, raw_body(VALID[route], **{member: value}))
    assert response.status_code == 400
    detail_of(response)
    assert_healthy(client)


LONE = "LONE"
TEXT_PART = '[{"role": "user", "content": [{"type": "text", "text": "LONE"}]}]'
SURROGATE_SITES = [
    pytest.param(COMPLETIONS, "model", '"LONE"', 404, "model", id="completions-model"),
    pytest.param(COMPLETIONS, "prompt", '"a LONE b"', 400, None, id="completions-prompt"),
    pytest.param(CHAT, "model", '"LONE"', 404, "model", id="chat-model"),
    pytest.param(CHAT, "messages", '[{"role": "user", "content": "LONE"}]', 400, None, id="chat-content"),
    pytest.param(CHAT, "messages", TEXT_PART, 400, None, id="chat-text-part"),
    pytest.param(TOKENIZE, "model", '"LONE"', 404, "model", id="tokenize-model"),
    pytest.param(TOKENIZE, "prompt", '"LONE"', 400, None, id="tokenize-prompt"),
    pytest.param(TOKENIZE, "messages", TEXT_PART, 400, None, id="tokenize-text-part"),
]
"""Where a lone surrogate goes: (route, field, the field's JSON text with ``LONE`` for it, the
status and ``param`` vLLM answers with: an unknown model's 404, or the 400 of a tokenizer that
cannot encode the text, naming no parameter)."""


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff"])
@pytest.mark.parametrize(("route", "field", "template", "status", "param"), SURROGATE_SITES)
def test_a_lone_surrogate_is_a_4xx_as_in_vllm(
    client: httpx.Client, route: str, field: str, template: str, status: int, param: str | None, escape: str
) -> None:
    """A lone surrogate escape (six characters of valid JSON) decodes to a str that cannot be
    encoded as UTF-8 (UnicodeEncodeError, once a 500): a model name holding one is unknown (404,
    the name quoted escaped), a text to tokenize holding one cannot be tokenized (400, param null,
    as vLLM's tokenizer refuses it). The chat body of /tokenize drops ``prompt``."""
    base = {key: value for key, value in VALID[route].items() if not (field == "messages" and key == "prompt")}
    response = send(client, "POST", route, raw_body(base, **{field: template.replace(LONE, escape)}))
    error = assert_rejected(response, status)
    assert error["param"] == param
    assert escape in error["message"]
    assert_healthy(client)


DEPTH = 100_000


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("where", ["member", "body"])
def test_nesting_100k_deep_is_400(client: httpx.Client, route: str, where: str) -> None:
    """JSON nested deeper than Python's recursion limit (RecursionError, once a 500), as the
    value of one member or as the whole body: FastAPI's 400 ``There was an error parsing the
    body``, as vLLM answers."""
    nested = "[" * DEPTH + "]" * DEPTH
    body = raw_body(VALID[route], max_tokens=nested) if where == "member" else nested.encode()
    response = send(client, "POST", route, body)
    assert response.status_code == 400
    detail_of(response)
    assert_healthy(client)


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("GET", "/nope", 404, None),
        ("POST", "/v1/nope", 404, None),
        ("GET", COMPLETIONS, 405, "POST"),
        ("GET", CHAT, 405, "POST"),
        ("GET", TOKENIZE, 405, "POST"),
        ("PUT", "/health", 405, "GET"),
        ("DELETE", "/v1/models", 405, "GET"),
    ],
)
def test_framework_errors_are_fastapis_detail(
    client: httpx.Client, method: str, path: str, status: int, allow: str | None
) -> None:
    """An unknown path or a wrong method gets FastAPI's own ``{"detail": "Not Found"}`` or
    ``{"detail": "Method Not Allowed"}`` (with the ``allow`` header), as vLLM answers: vLLM's
    handler is for FastAPI's HTTPException, which Starlette's router does not raise."""
    response = send(client, method, path)
    assert response.status_code == status
    detail_of(response)
    assert response.headers.get("allow") == allow
    assert_healthy(client)


TOKEN_ID_ROUTES = [COMPLETIONS, TOKENIZE]


@pytest.mark.parametrize("ids", ["[1000000000000000000000000000000]", f"[{VOCAB_SIZE}]", f"[0, 1, {VOCAB_SIZE + 1}]"])
def test_token_ids_outside_the_vocabulary_are_400(client: httpx.Client, ids: str) -> None:
    """A prompt of token ids must hold ids in ``0 .. VOCAB_SIZE - 1`` (once 200). vLLM's engine
    checks them: a 400 naming no parameter (in-band on a stream); ``/tokenize`` names ``prompt``."""
    error = assert_rejected(send(client, "POST", COMPLETIONS, raw_body(VALID[COMPLETIONS], prompt=ids)), 400)
    assert error["param"] is None and "out of vocabulary" in error["message"]
    assert_rejected(send(client, "POST", TOKENIZE, raw_body(VALID[TOKENIZE], prompt=ids)), 400, "prompt")
    assert_healthy(client)


def test_a_negative_token_id_is_a_validation_error(client: httpx.Client) -> None:
    """Token ids are integers >= 0 in vLLM's request model: pydantic's location names the id."""
    error = assert_rejected(send(client, "POST", COMPLETIONS, raw_body(VALID[COMPLETIONS], prompt="[3, -5]")), 400)
    assert (error["type"], error["param"]) == ("Bad Request", "body.prompt.1")
    assert_rejected(send(client, "POST", TOKENIZE, raw_body(VALID[TOKENIZE], prompt="[-5]")), 400, "prompt")


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
    ("field", "value", "tokens", "streamed"),
    [
        ("stream", '"yes"', 1, True),
        ("stream", '"true"', 1, True),
        ("stream", "1", 1, True),
        ("stream", '"no"', 1, False),
        ("max_tokens", '"3"', 3, False),
        ("max_tokens", "3.0", 3, False),
        ("max_tokens", "true", 1, False),
    ],
)
def test_values_are_coerced_as_pydantic_does_in_vllm(
    client: httpx.Client, route: str, field: str, value: str, tokens: int, streamed: bool
) -> None:
    """Types are lax, as in vLLM's request models (pydantic's lax mode): ``"stream": "yes"``
    streams, ``"max_tokens": "3"`` and ``3.0`` generate 3 tokens, ``true`` is 1 (once each a 400)."""
    response = send(client, "POST", route, raw_body(VALID[route], **{field: value}))
    assert response.status_code == 200, response.text[:300]
    if streamed:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.text.rstrip().endswith("data: [DONE]")
    else:
        assert response.json()["usage"]["completion_tokens"] == tokens


@pytest.mark.parametrize("route", GENERATION_ROUTES)
@pytest.mark.parametrize(("field", "value"), [("stream", '"yes please"'), ("max_tokens", "16.5"), ("max_tokens", "[]")])
def test_values_that_do_not_coerce_are_400_at_their_location(
    client: httpx.Client, route: str, field: str, value: str
) -> None:
    """What lax mode cannot coerce is vLLM's validation error: type "Bad Request", ``param``
    the location in the body."""
    error = assert_rejected(send(client, "POST", route, raw_body(VALID[route], **{field: value})), 400)
    assert (error["type"], error["param"]) == ("Bad Request", f"body.{field}")
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
