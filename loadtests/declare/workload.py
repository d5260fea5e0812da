"""What to send: prompts of exact token sizes, and request mixes that say what they expect back.

Prompt sizes are measured with the server's own ``/tokenize`` when it answers as vLLM's does
(200 with an integer ``count`` for ``{"model", "prompt"}`` or ``{"model", "messages"}``): a
prompt is grown from a filler text until the server counts the wanted number of tokens.
``discover`` probes that once, with a short timeout. Any other answer (404, 405, 400, 5xx,
another body shape, not JSON, no answer), then or later while sizing, turns sizing to estimates
from ``CHARS_PER_TOKEN`` for the rest of the run, with the reason in
``ServerFacts.prompt_sizing``; estimated prompts record ``prompt_tokens`` as ``None``. Sizing
never raises: a server with a foreign ``/tokenize`` still gets its requests. Each ``RequestSpec``
carries the outcome the scenario expects, so a correctly rejected request is a success in
Locust's statistics and a gate checks the rest.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from loadtests.base.locust_entry import refuse_while_locust_imports
from loadtests.client.outcome import Outcome, decode_json
from loadtests.errors import InvalidValue, TargetUnusable, TokenizeError, UndecodableJson, error_kind

Route = Literal["completions", "chat"]
ROUTE_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
FILLER_WORD = "w "
CHARS_PER_TOKEN = 2.0  # our filler "w " is one token per two characters on common BPE vocabularies
EXACT = "exact"
PROBE_TIMEOUT = 10.0
"""Seconds the first ``/tokenize`` request may take before sizing falls back to estimates."""
PROBE_WORDS = 8
OWNED_FIELDS = frozenset(
    {"model", "prompt", "messages", "max_tokens", "truncate_prompt_tokens", "stream", "stream_options"}
)
"""Body fields a ``RequestSpec`` sets itself: ``extra_body`` may not replace them."""
BODY_SHAPES: dict[str, str] = {"completions": '{"model", "prompt"}', "chat": '{"model", "messages"}'}


@dataclass(frozen=True)
class RequestSpec:
    """One kind of request in a mix. ``weight`` is its share of the mix; ``expected`` the outcome
    the scenario requires of it (``ok`` or ``rejected``)."""

    label: str
    route: Route
    prompt_tokens: int
    max_tokens: int = 16
    truncate_prompt_tokens: int | None = None
    expected: str = Outcome.OK
    weight: int = 1
    include_usage: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """More fields of the request body, as sent (sampling parameters: ``{"temperature": 0.7}``);
    they may not replace the fields a spec owns (``prompt``/``messages``, ``max_tokens``,
    ``truncate_prompt_tokens``, ``model``, ``stream``, ``stream_options``)."""
    hold_s: float | None = None
    """How a scenario whose point is silence makes it when prefill is fast. Against a server the run
    did not start (``--host``), a mix with such specs starts the run's slot holders, which fill the
    server's slots and release one at least every ``hold_s``, so its streams wait about this long,
    silent (``loadtests.load.slot_holders``). Should the holders give up (a bound reached), once the
    run's first stream has shown the server's pace, such a request asks for enough tokens to stream
    for about this long, so that it holds a slot and more users than slots queue behind it. None:
    ``max_tokens`` as given, always."""


@dataclass(frozen=True)
class PreparedRequest:
    """A spec with its prompt built and measured: ready to send."""

    spec: RequestSpec
    body: dict[str, Any]
    prompt_tokens: int | None
    """Tokens the server counts for this prompt (chat template included); None when estimated."""
    _payloads: dict[str, bytes] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def path(self) -> str:
        return ROUTE_PATHS[self.spec.route]

    @property
    def max_tokens(self) -> int:
        """What the request asks for: the spec's, or more where it holds a slot (``hold_s``)."""
        return int(self.body["max_tokens"])

    def stream_body(self, model: str) -> dict[str, Any]:
        body = {**self.body, "model": model, "stream": True}
        if self.spec.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body

    def stream_payload(self, model: str) -> bytes:
        """``stream_body(model)`` as JSON bytes, encoded once per model: a long prompt is tens of
        kilobytes to encode, and the raw client sends the same body every time it draws this request."""
        cached = self._payloads.get(model)
        if cached is None:
            cached = self._payloads[model] = json.dumps(self.stream_body(model)).encode()
        return cached


@dataclass
class ServerFacts:
    """What the harness learned from the target: the model to use and how prompts are sized.

    Sizing starts exact and turns estimated for good on the first failure of ``/tokenize``, with
    the reason (``estimate_reason``); it never turns back, so a run sizes its prompts one way.
    """

    model: str
    max_model_len: int | None = None
    estimate_reason: str | None = None
    pace: ServerPace | None = None
    """The server's own pace, from the run's first stream that showed one, when the run holds slots."""

    @property
    def prompt_sizing(self) -> str:
        """``"exact"`` (counted by the server's ``/tokenize``) or ``"estimated (<reason>)"``."""
        return EXACT if self.estimate_reason is None else f"estimated ({self.estimate_reason})"

    @property
    def can_tokenize(self) -> bool:
        return self.estimate_reason is None


DEFAULT_MAX_SLOT_HOLDERS = 256
"""The most slot holders one run sends (``--max-slot-holders``, ``loadtests.load.slot_holders``):
twice vLLM's default concurrency on a CPU (128), one connection and one greenlet each."""

HOLD_MAX_TOKENS = 16384
"""The most tokens a slot-holding request asks for, whatever the pace: a bound on its length."""


def milliseconds(seconds: float) -> str:
    """``seconds`` in milliseconds, to a tenth from 1 ms up and to two significant digits below it
    (a token every 0.04 ms is not "0.0")."""
    ms = seconds * 1000
    return f"{ms:.1f}" if ms >= 1 or ms == 0 else f"{ms:.2g}"


@dataclass(frozen=True)
class ServerPace:
    """The server's own pace, from the first stream of the run that finished ``ok`` with tokens:
    seconds to its first token, and per token after it."""

    first_token_s: float
    per_token_s: float

    @classmethod
    def of(cls, ttft_s: float | None, duration_s: float, tokens: int | None) -> ServerPace | None:
        """The pace one finished stream shows (its ``ttft_s``, ``duration_s`` and completion
        ``tokens``), None when it shows none (no first token, or under two tokens)."""
        if ttft_s is None or tokens is None or tokens < 2:
            return None
        return cls(ttft_s, max(duration_s - ttft_s, 0.0) / (tokens - 1))

    def hold_tokens(self, spec: RequestSpec, room: int | None) -> tuple[int, str | None]:
        """``max_tokens`` for ``spec``, and why it was raised (None when not): raised to stream
        for ``hold_s`` when the server's own first token comes sooner, at most ``room`` (what the
        context leaves) and ``HOLD_MAX_TOKENS``."""
        if spec.hold_s is None or self.first_token_s >= spec.hold_s:
            return spec.max_tokens, None  # nothing to hold, or the server is silent long enough on its own
        wanted = math.ceil(spec.hold_s / max(self.per_token_s, 1e-6))
        tokens = max(spec.max_tokens, min(wanted, HOLD_MAX_TOKENS, room if room is not None else HOLD_MAX_TOKENS))
        if tokens == spec.max_tokens:
            return tokens, None
        return tokens, f"{spec.label} now asks for {tokens} tokens (~{tokens * self.per_token_s:.1f} s)"

    def describe(self) -> str:
        return (
            f"the server sent a first token in {self.first_token_s * 1000:.0f} ms and one every "
            f"{milliseconds(self.per_token_s)} ms after it"
        )


def discover(client: httpx.Client, model: str | None = None, probe_timeout: float = PROBE_TIMEOUT) -> ServerFacts:
    """Read ``/v1/models`` (``model`` defaults to the first one listed; when given, a server
    without a usable ``/v1/models`` is fine), then probe ``/tokenize`` once."""
    cards: list[dict[str, Any]] = []
    try:
        response = client.get("/v1/models")
        response.raise_for_status()
        listed = decode_json(response.content).get("data")
        cards = [card for card in listed if isinstance(card, dict)] if isinstance(listed, list) else []
    except (httpx.HTTPError, ValueError, AttributeError):  # no /v1/models, or not a JSON object
        if model is None:
            raise
    if model is None:
        if not cards:
            raise TargetUnusable(f"{client.base_url}/v1/models lists no model; pass --model")
        model = str(cards[0]["id"])
    card = next((c for c in cards if c.get("id") == model), {})
    facts = ServerFacts(model=model, max_model_len=card.get("max_model_len"))
    facts.estimate_reason = tokenize_failure(client, model, probe_timeout)
    return facts


def tokenize_failure(client: httpx.Client, model: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why prompts cannot be sized with ``/tokenize`` (one request in vLLM's shape, at most
    ``timeout`` seconds), or None when it answers as vLLM does."""
    try:
        count = count_tokens(client, model, "completions", FILLER_WORD * PROBE_WORDS, timeout)
    except TokenizeError as exc:
        return str(exc)
    return None if count > 0 else f"/tokenize counted 0 tokens for {PROBE_WORDS} words of filler"


def probe_prompt_sizing(
    host: str,
    api_key: str | None = None,
    model: str | None = None,
    timeout: float = PROBE_TIMEOUT,
    authorization: str | None = None,
) -> str:
    """``"exact"`` or ``"estimated (<reason>)"`` for the server at ``host``, from one probe of
    ``/tokenize`` (after ``/v1/models`` when ``model`` is None), sending ``authorization`` (else
    ``Bearer api_key``) as the ``Authorization`` header. Never raises; prints nothing."""
    authorization = authorization or (f"Bearer {api_key}" if api_key else None)
    headers = {"Authorization": authorization} if authorization else {}
    try:
        with httpx.Client(base_url=host, headers=headers, timeout=timeout) as client:
            if model is None:
                return discover(client, probe_timeout=timeout).prompt_sizing
            return ServerFacts(model, estimate_reason=tokenize_failure(client, model, timeout)).prompt_sizing
    except Exception as exc:  # the caller may be writing a run's summary: say why, never raise
        return f"estimated (no model to probe /tokenize with: {error_kind(exc)}: {exc})"


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _source(route: Route, text: str) -> dict[str, Any]:
    return {"messages": _messages(text)} if route == "chat" else {"prompt": text}


def count_tokens(client: httpx.Client, model: str, route: Route, text: str, timeout: float | None = None) -> int:
    """Tokens the server counts for ``text`` on ``route`` (vLLM's ``/tokenize``: 200 with an
    integer ``count``); anything else raises ``TokenizeError`` saying what came back."""
    shape = BODY_SHAPES[route]
    limit = client.timeout.read if timeout is None else timeout
    try:
        response = client.post(
            "/tokenize",
            json={"model": model, **_source(route, text)},
            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
        )
    except httpx.TimeoutException:
        raise TokenizeError(f"/tokenize did not answer vLLM's request body ({shape}) within {limit:g} s") from None
    except httpx.HTTPError as exc:
        raise TokenizeError(f"/tokenize failed on vLLM's request body ({shape}): {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise TokenizeError(f"/tokenize answered {response.status_code} to vLLM's request body ({shape})")
    try:
        payload = decode_json(response.content)
    except UndecodableJson:
        kind = response.headers.get("content-type", "no content-type")
        raise TokenizeError(f"/tokenize answered 200 with a body that is not JSON ({kind})") from None
    count = payload.get("count") if isinstance(payload, dict) else None
    if type(count) is not int or count < 0:
        got = f"keys {sorted(payload)}" if isinstance(payload, dict) else f"a JSON {type(payload).__name__}"
        raise TokenizeError(f'/tokenize answered 200 without vLLM\'s integer "count" (got {got})')
    return count


def estimated_text(tokens: int) -> str:
    """A prompt of about ``tokens`` tokens, by ``CHARS_PER_TOKEN``."""
    return FILLER_WORD * max(1, int(tokens * CHARS_PER_TOKEN / len(FILLER_WORD)))


def sized_text(client: httpx.Client, facts: ServerFacts, route: Route, tokens: int) -> tuple[str, int | None]:
    """A prompt text of exactly ``tokens`` tokens as the server counts them on ``route`` (chat
    template included), or an estimate (count None) when the server cannot count; a first failure
    of ``/tokenize`` turns ``facts`` to estimated sizing for the rest of the run."""
    if facts.can_tokenize:
        try:
            return _exact_text(client, facts.model, route, tokens)
        except TokenizeError as exc:
            facts.estimate_reason = str(exc)
    return estimated_text(tokens), None


def _exact_text(client: httpx.Client, model: str, route: Route, tokens: int) -> tuple[str, int]:
    overhead = count_tokens(client, model, route, "")
    per_hundred = count_tokens(client, model, route, FILLER_WORD * 100) - overhead
    if per_hundred < 1:  # a count that does not grow with the text would send the search to infinity
        raise TokenizeError(f"/tokenize counted {per_hundred} tokens for 100 words of filler")
    rate = per_hundred / 100.0
    words = max(1, round((tokens - overhead) / rate))
    for _ in range(8):  # converge on the exact count; a word is one token or a few
        counted = count_tokens(client, model, route, FILLER_WORD * words)
        if counted == tokens:
            return FILLER_WORD * words, counted
        step = round((tokens - counted) / rate) or (1 if counted < tokens else -1)
        words = max(1, words + step)
    return FILLER_WORD * words, count_tokens(client, model, route, FILLER_WORD * words)


@dataclass(frozen=True)
class RequestMix:
    """A weighted mix of specs. ``prepare()`` builds it against one target."""

    specs: Sequence[RequestSpec]
    seed: int = 0

    def __post_init__(self) -> None:
        """A mix Locust would fail on at its first request is refused where it is declared (one line
        and exit 2 in a locustfile Locust imports: ``refuse_while_locust_imports``)."""
        try:
            self._check()
        except InvalidValue as exc:
            refuse_while_locust_imports(exc)
            raise

    def _check(self) -> None:
        if not self.specs:
            raise InvalidValue("a request mix needs at least one spec")
        for spec in self.specs:
            if spec.route not in ROUTE_PATHS:
                routes = ", ".join(sorted(ROUTE_PATHS))
                raise InvalidValue(f"request spec {spec.label}: no route {spec.route!r} (routes: {routes})")
            owned = sorted(set(spec.extra_body) & OWNED_FIELDS)
            if owned:
                raise InvalidValue(f"request spec {spec.label}: extra_body may not set {', '.join(owned)}")

    def prepare(self, client: httpx.Client, facts: ServerFacts) -> PreparedMix:
        """Build and measure every spec's prompt once (one text per route and size)."""
        cache: dict[tuple[str, int], tuple[str, int | None]] = {}
        prepared = []
        for spec in self.specs:
            key = (spec.route, spec.prompt_tokens)
            if key not in cache:
                cache[key] = sized_text(client, facts, spec.route, spec.prompt_tokens)
            text, counted = cache[key]
            body: dict[str, Any] = {**spec.extra_body, **_source(spec.route, text), "max_tokens": spec.max_tokens}
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

    def __post_init__(self) -> None:
        self._cum_weights = list(itertools.accumulate(request.spec.weight for request in self.requests))

    def draw(self) -> PreparedRequest:
        return self.rng.choices(self.requests, cum_weights=self._cum_weights)[0]

    def hold_slots(self, pace: ServerPace, max_model_len: int | None) -> list[str]:
        """Lengthen the requests whose spec has ``hold_s`` to stream that long at ``pace`` (within
        the context), so that more users than the server's slots queue behind them; what was
        lengthened, one phrase each (none: the server is silent long enough on its own)."""
        raised = []
        for index, request in enumerate(self.requests):
            room = max_model_len - (request.prompt_tokens or request.spec.prompt_tokens) - 1 if max_model_len else None
            tokens, why = pace.hold_tokens(request.spec, room)
            if why is not None:
                body = {**request.body, "max_tokens": tokens}
                self.requests[index] = PreparedRequest(request.spec, body, request.prompt_tokens)
                raised.append(why)
        return sorted(set(raised))
