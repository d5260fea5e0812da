"""What to send: prompts of exact token sizes, and request mixes that say what they expect back.

Prompt sizes are measured with the server's own ``/tokenize`` when it has one (vLLM and the
bundled server do): a prompt is grown from a filler text until the server counts the wanted
number of tokens. Without ``/tokenize`` the size is estimated from ``CHARS_PER_TOKEN`` and the
plan records that it is an estimate (``prompt_tokens`` is then ``None``). Each ``RequestSpec``
carries the outcome the scenario expects, so a correctly rejected request is a success in
Locust's statistics and a gate checks the rest.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

Route = Literal["completions", "chat"]
ROUTE_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
FILLER_WORD = "w "
CHARS_PER_TOKEN = 2.0  # our filler "w " is one token per two characters on common BPE vocabularies


@dataclass(frozen=True)
class RequestSpec:
    """One kind of request in a mix. ``weight`` is its share of the mix; ``expected`` the outcome
    the scenario requires of it (``ok`` or ``rejected``)."""

    label: str
    route: Route
    prompt_tokens: int
    max_tokens: int = 16
    truncate_prompt_tokens: int | None = None
    expected: str = "ok"
    weight: int = 1
    include_usage: bool = True


@dataclass(frozen=True)
class PreparedRequest:
    """A spec with its prompt built and measured: ready to send."""

    spec: RequestSpec
    body: dict[str, Any]
    prompt_tokens: int | None
    """Tokens the server counts for this prompt (chat template included); None when estimated."""

    @property
    def path(self) -> str:
        return ROUTE_PATHS[self.spec.route]

    def stream_body(self, model: str) -> dict[str, Any]:
        body = {**self.body, "model": model, "stream": True}
        if self.spec.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body


@dataclass
class ServerFacts:
    """What the harness learned from the target: the model to use and whether it can tokenize."""

    model: str
    max_model_len: int | None = None
    can_tokenize: bool = True


def discover(client: httpx.Client, model: str | None = None) -> ServerFacts:
    """Read ``/v1/models``; ``model`` defaults to the first one listed."""
    response = client.get("/v1/models")
    response.raise_for_status()
    cards = response.json().get("data") or []
    if model is None:
        if not cards:
            raise RuntimeError(f"{client.base_url}/v1/models lists no model; pass --model")
        model = cards[0]["id"]
    card = next((c for c in cards if c.get("id") == model), {})
    return ServerFacts(model=model, max_model_len=card.get("max_model_len"))


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _source(route: Route, text: str) -> dict[str, Any]:
    return {"messages": _messages(text)} if route == "chat" else {"prompt": text}


def count_tokens(client: httpx.Client, facts: ServerFacts, route: Route, text: str) -> int | None:
    """Tokens the server counts for ``text`` on ``route``; None when it has no ``/tokenize``."""
    if not facts.can_tokenize:
        return None
    response = client.post("/tokenize", json={"model": facts.model, **_source(route, text)})
    if response.status_code in (404, 405):
        facts.can_tokenize = False
        return None
    response.raise_for_status()
    return int(response.json()["count"])


def sized_text(client: httpx.Client, facts: ServerFacts, route: Route, tokens: int) -> tuple[str, int | None]:
    """A prompt text of exactly ``tokens`` tokens as the server counts them on ``route`` (chat
    template included), or an estimate when the server cannot tokenize."""
    overhead = count_tokens(client, facts, route, "")
    per_word = count_tokens(client, facts, route, FILLER_WORD * 100)
    if overhead is None or per_word is None:
        return FILLER_WORD * max(1, int(tokens * CHARS_PER_TOKEN / len(FILLER_WORD))), None
    rate = max((per_word - overhead) / 100.0, 1e-6)
    words = max(1, round((tokens - overhead) / rate))
    for _ in range(8):  # converge on the exact count; a word is one token or a few
        counted = count_tokens(client, facts, route, FILLER_WORD * words)
        assert counted is not None
        if counted == tokens:
            return FILLER_WORD * words, counted
        step = round((tokens - counted) / rate) or (1 if counted < tokens else -1)
        words = max(1, words + step)
    return FILLER_WORD * words, count_tokens(client, facts, route, FILLER_WORD * words)


@dataclass(frozen=True)
class RequestMix:
    """A weighted mix of specs. ``prepare()`` builds it against one target."""

    specs: Sequence[RequestSpec]
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.specs:
            raise ValueError("a request mix needs at least one spec")

    def prepare(self, client: httpx.Client, facts: ServerFacts) -> PreparedMix:
        """Build and measure every spec's prompt once (one text per route and size)."""
        cache: dict[tuple[str, int], tuple[str, int | None]] = {}
        prepared = []
        for spec in self.specs:
            key = (spec.route, spec.prompt_tokens)
            if key not in cache:
                cache[key] = sized_text(client, facts, spec.route, spec.prompt_tokens)
            text, counted = cache[key]
            body: dict[str, Any] = {**_source(spec.route, text), "max_tokens": spec.max_tokens}
            if spec.truncate_prompt_tokens is not None:
                body["truncate_prompt_tokens"] = spec.truncate_prompt_tokens
            prepared.append(PreparedRequest(spec, body, counted))
        return PreparedMix(prepared, random.Random(self.seed))


@dataclass
class PreparedMix:
    """Prepared requests drawn by weight in an order fixed by the mix's seed (a shuffle, not a
    sequence: concurrent users interleave truncated and untruncated requests)."""

    requests: list[PreparedRequest]
    rng: random.Random

    def draw(self) -> PreparedRequest:
        return self.rng.choices(self.requests, weights=[r.spec.weight for r in self.requests])[0]
