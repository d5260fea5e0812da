"""Raw requests and vLLM's error bodies, shared by the hostile-input and fuzz tests.

Bodies go out as bytes, so a test can send what no JSON library writes: integers past Python's
4,300-digit limit, lone surrogate escapes, nesting deeper than any recursion limit, invalid UTF-8.
Each request has its own connection (``Connection: close``): a server that breaks a kept-alive
connection after a bad request (as uvicorn does after an unhandled exception) then fails only
that request, not the next one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

MAX_MESSAGE_CHARS = 2_000
"""An error message quotes at most ~100 characters of a value; this bound leaves room for the
explanation around it and still catches a body that echoes a whole hostile value."""

RAW_HEADERS = {"Content-Type": "application/json", "Connection": "close"}


def send(client: httpx.Client, method: str, path: str, body: bytes = b"") -> httpx.Response:
    """``method path`` with ``body`` sent as-is, on a connection of its own."""
    return client.request(method, path, content=body, headers=RAW_HEADERS)


def raw_body(base: dict[str, Any], **raw_members: str) -> bytes:
    """``base`` as a JSON object with ``raw_members`` added verbatim (each value is JSON text,
    written unparsed); a raw member replaces a ``base`` member of the same name."""
    members = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in base.items() if key not in raw_members]
    members += [f"{json.dumps(key)}: {text}" for key, text in raw_members.items()]
    return ("{" + ", ".join(members) + "}").encode()


FRAMEWORK_DETAILS = {404: "Not Found", 405: "Method Not Allowed", 400: "There was an error parsing the body"}
"""FastAPI's own answers, which vLLM sends as they are: ``{"detail": ...}`` for an unknown path, a
wrong method, and a body its JSON decoder gave up on (other than by a syntax error)."""


def json_body(response: httpx.Response) -> Any:
    status = response.status_code
    assert response.headers.get("content-type", "").startswith("application/json"), (status, response.headers)
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AssertionError(f"{status} body is not JSON: {response.content[:200]!r}") from exc


def detail_of(response: httpx.Response) -> str:
    """The ``detail`` of a framework error, asserted to be FastAPI's body with its status's words."""
    body = json_body(response)
    assert isinstance(body, dict) and set(body) == {"detail"}, f"{response.status_code}: {response.text[:300]}"
    assert body["detail"] == FRAMEWORK_DETAILS.get(response.status_code), _short(body)
    return str(body["detail"])


def answers_as_vllm(response: httpx.Response) -> None:
    """A 4xx/5xx ``response`` is one vLLM could send: its error body, or the framework's."""
    body = json_body(response)
    if isinstance(body, dict) and set(body) == {"detail"}:
        detail_of(response)
    else:
        error_of(response)


def error_of(response: httpx.Response) -> dict[str, Any]:
    """The ``error`` object of a 4xx/5xx ``response``, asserted to be vLLM's ``ErrorResponse``:
    ``{"error": {"message": str, "type": str, "param": str | null, "code": <the status>}}``,
    served as JSON, with a message of bounded size."""
    status = response.status_code
    body = json_body(response)
    assert isinstance(body, dict) and set(body) == {"error"}, f"{status}: {response.text[:300]}"
    error = body["error"]
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}, _short(body)
    assert error["code"] == status, f"code {_short(error['code'])} != HTTP {status}"
    assert isinstance(error["message"], str) and error["message"], _short(error)
    assert isinstance(error["type"], str) and error["type"], _short(error)
    assert error["param"] is None or isinstance(error["param"], str), _short(error)
    assert len(error["message"]) <= MAX_MESSAGE_CHARS, f"{status} message of {len(error['message'])} characters"
    return error


def assert_rejected(response: httpx.Response, status: int = 400, field: str | None = None) -> dict[str, Any]:
    """``response`` is a ``status`` in vLLM's body; with ``field``, the error names it (as its
    ``param`` or in its message). Returns the error object."""
    assert response.status_code == status, f"HTTP {response.status_code}, wanted {status}: {response.text[:300]}"
    error = error_of(response)
    if field is not None:
        assert error["param"] == field or field in error["message"], f"{field!r} not named: {_short(error)}"
    return error


def _short(value: object) -> str:
    """``value``'s repr, cut to a length an assertion message can carry."""
    text = repr(value)
    return text if len(text) <= 300 else f"{text[:300]}... ({len(text)} characters)"


def assert_healthy(client: httpx.Client) -> None:
    """The server still answers ``GET /health`` with 200."""
    assert send(client, "GET", "/health").status_code == 200
