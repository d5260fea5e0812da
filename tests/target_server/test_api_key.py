"""``--api-key`` as vLLM 0.32.0 checks it (measured: ``tests/differential``), route by route: the
``/v1`` routes read the first ``Authorization`` header, which must be ``Bearer KEY`` (scheme in
any case, token exactly the key); ``/tokenize``, ``/detokenize``, ``/version``, ``/health`` and
``/metrics`` are open; ``OPTIONS`` is never refused for the key. A refusal is 401 with vLLM's body
and names no key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loadtests.services.stack import ChildService, TargetServerProcess

KEY = "sekrit-key"
UNAUTHORIZED = {"error": "Unauthorized"}

ROUTES: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "completions": ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    "chat": ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
    "models": ("GET", "/v1/models", None),
    "tokenize": ("POST", "/tokenize", {"prompt": "hi"}),
    "detokenize": ("POST", "/detokenize", {"tokens": [1, 2]}),
    "version": ("GET", "/version", None),
    "health": ("GET", "/health", None),
    "metrics": ("GET", "/metrics", None),
}
GUARDED = {"completions", "chat", "models"}

# Authorization headers sent, and whether a guarded route lets them in
HEADERS: dict[str, tuple[list[str], bool]] = {
    "no header": ([], False),
    "wrong key": ([f"Bearer not-{KEY}"], False),
    "right key": ([f"Bearer {KEY}"], True),
    "lower-case scheme": ([f"bearer {KEY}"], True),
    "upper-case scheme": ([f"BEARER {KEY}"], True),
    "Basic scheme": ([f"Basic {KEY}"], False),
    "no scheme": ([KEY], False),
    "a prefix of the key": ([f"Bearer {KEY[:-1]}"], False),
    "the key and more": ([f"Bearer {KEY}x"], False),
    "two spaces": ([f"Bearer  {KEY}"], False),
    "scheme only": (["Bearer"], False),
    "wrong then right": ([f"Bearer not-{KEY}", f"Bearer {KEY}"], False),
    "right then wrong": ([f"Bearer {KEY}", f"Bearer not-{KEY}"], True),  # vLLM reads the first
    "right twice": ([f"Bearer {KEY}", f"Bearer {KEY}"], True),
}


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ChildService]:
    server = TargetServerProcess.start(("--api-key", KEY))
    yield server
    server.stop()


def send(url: str, route: str, authorization: list[str], method: str | None = None) -> httpx.Response:
    """One request to ``route`` carrying each of ``authorization`` as its own header."""
    default_method, path, body = ROUTES[route]
    headers = [("Authorization", value) for value in authorization]
    response = httpx.request(method or default_method, url + path, json=body, headers=headers, timeout=10)
    sent = [value for name, value in response.request.headers.raw if name.lower() == b"authorization"]
    assert sent == [value.encode() for value in authorization]  # one header each, none merged
    return response


@pytest.mark.parametrize("case", HEADERS)
@pytest.mark.parametrize("route", ROUTES)
def test_each_route_admits_exactly_what_vllm_admits(keyed_server: TargetServerProcess, route: str, case: str) -> None:
    authorization, admitted = HEADERS[case]
    response = send(keyed_server.url, route, authorization)
    if route in GUARDED and not admitted:
        assert (response.status_code, response.json()) == (401, UNAUTHORIZED)
    else:
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("route", ["completions", "models"])
def test_options_is_not_refused_for_the_key(keyed_server: TargetServerProcess, route: str) -> None:
    response = send(keyed_server.url, route, [], method="OPTIONS")
    assert response.status_code == 405  # the framework's answer to a method the route lacks, not a 401


def test_a_refusal_names_neither_the_key_nor_the_token(keyed_server: TargetServerProcess) -> None:
    for authorization in ([f"Bearer {KEY}x"], [f"Basic {KEY}"], ["Bearer other", f"Bearer {KEY}"]):
        response = send(keyed_server.url, "completions", authorization)
        assert response.status_code == 401 and KEY not in response.text and "other" not in response.text


def test_without_a_key_no_route_asks_for_one(default_server: TargetServerProcess) -> None:
    for route in ROUTES:
        assert send(default_server.url, route, []).status_code == 200, route


@pytest.mark.parametrize("path", ["/v1/no-such", "/v2/no-such", "/inference/no-such", "/cohere/no-such"])
def test_vllms_guarded_prefixes_ask_for_the_key_route_or_not(keyed_server: TargetServerProcess, path: str) -> None:
    response = httpx.get(keyed_server.url + path, timeout=10)
    assert (response.status_code, response.json()) == (401, UNAUTHORIZED)
    keyed = httpx.get(keyed_server.url + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert keyed.status_code == 404
