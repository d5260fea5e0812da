"""Errors and request validation: the same request to real vLLM 0.32.0 and to the bundled server.

Each case is one request and the answer vLLM gave it when it was measured, reduced to what must
match (``Verdict``): the status; for an error, the envelope's ``type``, ``param`` and ``code``, or
the framework's ``{"detail": ...}`` (with its ``allow`` header), or the bare 401 body; for a
stream, its in-band error (and how many data frames came before it) and whether ``[DONE]`` ended
it; and, where the case says so, ``usage`` (prompt and completion tokens). A case passes when vLLM
still answers that way (the measured fact still holds) and the bundled server answers the same.

Messages are never compared: they quote token counts, and the two tokenizers differ. For the
same reason a prompt that must have a size is sized by each server's own ``/tokenize``
(``SIZED``). Cases that compare generated token counts set ``ignore_eos`` (a vLLM extension the
bundled server accepts and ignores): vLLM's random-weight model would otherwise stop at a random
end-of-sequence token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.differential.parity import MODEL, SIZED, Answer, Pair

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
MAX_MODEL_LEN = 8192
"""The pair's context length (tests/differential/conftest.py)."""
JSON = {"Content-Type": "application/json"}
HI = [{"role": "user", "content": "hi"}]

Usage = tuple[int, int]


@dataclass(frozen=True)
class Verdict:
    """What of an answer must match: see the module docstring."""

    status: int
    kind: str
    """``error`` (vLLM's envelope), ``detail`` (the framework's body), ``bare`` (the 401 body),
    ``stream`` (an event stream) or ``ok`` (a JSON answer that is no error)."""
    error: tuple[Any, ...] | None = None
    """``(type, param, code)`` of an envelope or of a stream's in-band error; the ``detail``
    text and ``allow`` header; the bare body."""
    before_error: int | None = None
    """Data frames a stream sent before its in-band error."""
    done: bool | None = None
    usage: Usage | None = None


def verdict(answer: Answer, usage: bool) -> Verdict:
    """``answer`` reduced to a ``Verdict``; ``usage`` says whether its token counts count."""
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        payloads = [event for event in answer.events if event != "[DONE]"]
        inband = answer.inband_error
        before = None
        if inband is not None:
            before = next(i for i, event in enumerate(payloads) if isinstance(event, dict) and "error" in event)
        counted = [event["usage"] for event in payloads if isinstance(event, dict) and event.get("usage")]
        return Verdict(
            answer.status,
            "stream",
            None if inband is None else (inband.get("type"), inband.get("param"), inband.get("code")),
            before,
            bool(answer.events) and answer.events[-1] == "[DONE]",
            _usage(counted[-1]) if usage and counted else None,
        )
    body = answer.json
    if answer.error is not None:
        error = answer.error
        return Verdict(answer.status, "error", (error.get("type"), error.get("param"), error.get("code")))
    if isinstance(body, dict) and set(body) == {"detail"}:
        return Verdict(answer.status, "detail", (body["detail"], answer.headers.get("allow")))
    if isinstance(body, dict) and set(body) == {"error"}:
        return Verdict(answer.status, "bare", (body["error"],))
    counts = _usage(body["usage"]) if usage and isinstance(body, dict) and "usage" in body else None
    return Verdict(answer.status, "ok", usage=counts)


def _usage(usage: dict[str, Any]) -> Usage:
    return usage["prompt_tokens"], usage["completion_tokens"]


# -- Expected verdicts, as vLLM 0.32.0 answered ----------------------------------------------------


def error(param: str | None, kind: str = "BadRequestError", status: int = 400) -> Verdict:
    """vLLM's envelope: an engine-side check (``BadRequestError``) unless ``kind`` says otherwise."""
    return Verdict(status, "error", (kind, param, status))


def invalid(param: str | None) -> Verdict:
    """A request validation error: ``type`` "Bad Request", ``param`` pydantic's location."""
    return error(param, "Bad Request")


def detail(text: str, status: int = 400, allow: str | None = None) -> Verdict:
    return Verdict(status, "detail", (text, allow))


def inband(param: str | None) -> Verdict:
    """HTTP 200, then at once ``data: {"error": {..., "code": 400}}`` and ``data: [DONE]``."""
    return Verdict(200, "stream", ("BadRequestError", param, 400), before_error=0, done=True)


def ok(usage: Usage | None = None) -> Verdict:
    return Verdict(200, "ok", usage=usage)


def streamed(usage: Usage | None = None) -> Verdict:
    return Verdict(200, "stream", done=True, usage=usage)


# -- The cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request: a JSON ``body`` (``MODEL``/``SIZED`` substituted per server) or ``raw`` bytes."""

    id: str
    expect: Verdict
    path: str = COMPLETIONS
    body: dict[str, Any] | None = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    key: bool = True
    usage: bool = False
    """Compare usage counts (a sized prompt, ``ignore_eos``); a stream then asks for its usage chunk."""

    def kwargs(self) -> dict[str, Any]:
        if self.raw is not None:
            return {"content": self.raw, "headers": {**JSON, **self.headers}}
        if self.body is None:
            return {"headers": self.headers}
        body = dict(self.body)
        if self.usage and body.get("stream") is True:
            body.setdefault("stream_options", {"include_usage": True})
        return {"json": body, "headers": self.headers}


def gen(route: str, stream: Any, **fields: Any) -> dict[str, Any]:
    """A generation body for ``route``: ``prompt`` on completions, ``messages`` on chat (``SIZED``
    or text either way; ``hi`` when neither is given)."""
    body: dict[str, Any] = {"model": MODEL, "stream": stream}
    source = fields.pop("prompt", "hi")
    if route == CHAT:
        body["messages"] = source if not isinstance(source, str) else [{"role": "user", "content": source}]
    else:
        body["prompt"] = source
    return {**body, **fields}


ROUTES = {"completions": COMPLETIONS, "chat": CHAT}


def every_route(name: str, expect: Verdict | dict[bool, Verdict], usage: bool = False, **fields: Any) -> list[Case]:
    """The case on both routes, streaming and not; ``expect`` may differ by ``stream``."""
    cases = []
    for label, route in ROUTES.items():
        for stream in (False, True):
            wanted = expect[stream] if isinstance(expect, dict) else expect
            body = gen(route, stream, **fields)
            cases.append(Case(f"{name}-{label}-{'stream' if stream else 'whole'}", wanted, route, body, usage=usage))
    return cases


def by_stream(whole: Verdict, stream: Verdict) -> dict[bool, Verdict]:
    return {False: whole, True: stream}


def digits(count: int) -> bytes:
    return b"1" + b"0" * (count - 1)


DEEP = 100_000
BROKEN = b'{"prompt": "hi", "max_tokens": 2'
"""JSON cut short: the decoder stops at its end, so the error's location is ``body.<its length>``."""

FRAMEWORK = [
    Case("unknown-path", detail("Not Found", 404), "/nope", method="GET"),
    Case("unknown-v1-path", detail("Not Found", 404), "/v1/nope", method="GET"),
    Case("wrong-method-completions", detail("Method Not Allowed", 405, allow="POST"), COMPLETIONS, method="GET"),
    Case("wrong-method-chat", detail("Method Not Allowed", 405, allow="POST"), CHAT, method="GET"),
    Case("wrong-method-health", detail("Method Not Allowed", 405, allow="GET"), "/health", method="DELETE"),
    Case("broken-json", invalid(f"body.{len(BROKEN)}"), raw=BROKEN),
    Case("broken-json-chat", invalid("body.1"), CHAT, raw=b"{not json}"),
    Case("body-a-list", invalid("body"), raw=b"[1, 2]"),
    Case("body-a-string", invalid("body"), CHAT, raw=b'"hi"'),
    Case("body-null", invalid("body"), raw=b"null"),
    Case("body-empty", invalid("body"), raw=b""),
    Case(
        "integer-past-4300-digits",
        detail("There was an error parsing the body"),
        raw=b'{"max_tokens": ' + digits(4301) + b"}",
    ),
    Case("nesting-100k-deep", detail("There was an error parsing the body"), CHAT, raw=b"[" * DEEP + b"]" * DEEP),
    Case("body-not-utf8", detail("There was an error parsing the body"), raw=b'{"prompt": "\xff\xfe"}'),
    Case("content-type-text-plain", invalid(None), raw=b'{"prompt": "hi"}', headers={"Content-Type": "text/plain"}),
    Case("content-type-text-plain-broken", invalid(None), CHAT, raw=b"{", headers={"Content-Type": "text/plain"}),
    Case(
        "content-type-vendor-json",
        invalid(None),
        raw=b'{"prompt": "hi"}',
        headers={"Content-Type": "application/vnd.x+json"},
    ),
    Case(
        "content-type-vendor-json-broken",
        invalid("body.1"),
        raw=b"{",
        headers={"Content-Type": "application/vnd.x+json"},
    ),
    Case(
        "content-type-with-charset",
        ok(),
        raw=b'{"prompt": "hi", "max_tokens": 2}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    ),
    Case(
        "content-type-uppercase",
        ok(),
        raw=b'{"prompt": "hi", "max_tokens": 2}',
        headers={"Content-Type": "Application/JSON"},
    ),
]

AUTH = [
    Case("no-api-key", Verdict(401, "bare", ("Unauthorized",)), body=gen(COMPLETIONS, False), key=False),
    Case(
        "wrong-api-key",
        Verdict(401, "bare", ("Unauthorized",)),
        CHAT,
        gen(CHAT, True),
        headers={"Authorization": "Bearer wrong"},
    ),
]

MODELS = [
    Case("unknown-model", error("model", "NotFoundError", 404), body={**gen(COMPLETIONS, False), "model": "nope"}),
    Case("unknown-model-chat-stream", error("model", "NotFoundError", 404), CHAT, {**gen(CHAT, True), "model": "nope"}),
    Case("no-model", ok(), body={"prompt": "hi", "max_tokens": 2}),
    Case("model-not-a-string", invalid("body.model"), body={**gen(COMPLETIONS, False), "model": 5}),
]

CONTEXT = [
    *every_route("prompt-over-max-model-len", error("input_tokens"), prompt=SIZED(MAX_MODEL_LEN + 1), max_tokens=4),
    *every_route("prompt-at-max-model-len", error("max_tokens"), prompt=SIZED(MAX_MODEL_LEN), max_tokens=4),
    *every_route(
        "max-tokens-clamped-to-the-context",
        {False: ok((8000, 192)), True: streamed((8000, 192))},
        usage=True,
        prompt=SIZED(8000),
        max_tokens=1000,
        ignore_eos=True,
    ),
    Case("max-tokens-over-max-model-len", error("max_tokens"), body=gen(COMPLETIONS, False, max_tokens=9000)),
    Case("max-tokens-over-max-model-len-chat", error("max_tokens"), CHAT, gen(CHAT, True, max_tokens=9000)),
    Case(
        "max-completion-tokens-over-max-model-len",
        error("max_completion_tokens"),
        CHAT,
        gen(CHAT, False, max_completion_tokens=9000),
    ),
]

TRUNCATION = [
    *every_route(
        "truncate-none",
        {False: ok((100, 4)), True: streamed((100, 4))},
        usage=True,
        prompt=SIZED(100),
        max_tokens=4,
        truncate_prompt_tokens=None,
        ignore_eos=True,
    ),
    *every_route(
        "truncate-keeps-k",
        {False: ok((10, 4)), True: streamed((10, 4))},
        usage=True,
        prompt=SIZED(100),
        max_tokens=4,
        truncate_prompt_tokens=10,
        ignore_eos=True,
    ),
    *every_route(
        "truncate-over-max-model-len",
        error("truncate_prompt_tokens"),
        prompt=SIZED(100),
        max_tokens=4,
        truncate_prompt_tokens=MAX_MODEL_LEN + 1,
    ),
    *every_route(
        "truncate-max-model-len-minus-2",
        {False: ok((MAX_MODEL_LEN - 2, 2)), True: streamed((MAX_MODEL_LEN - 2, 2))},
        usage=True,
        prompt=SIZED(9000),
        max_tokens=8,
        truncate_prompt_tokens=MAX_MODEL_LEN - 2,
        ignore_eos=True,
    ),
    *every_route(
        "truncate-minus-1",
        {False: ok((MAX_MODEL_LEN - 1, 1)), True: streamed((MAX_MODEL_LEN - 1, 1))},
        usage=True,
        prompt=SIZED(9000),
        max_tokens=4,
        truncate_prompt_tokens=-1,
        ignore_eos=True,
    ),
    *every_route("truncate-zero", by_stream(error(None), inband(None)), prompt=SIZED(100), truncate_prompt_tokens=0),
    *every_route("truncate-minus-2", invalid("body.truncate_prompt_tokens"), truncate_prompt_tokens=-2),
]

LAX = [
    Case("stream-yes", streamed(), body=gen(COMPLETIONS, "yes", max_tokens=2)),
    Case("stream-null", ok(), CHAT, gen(CHAT, None, max_tokens=2)),
    Case(
        "max-tokens-string",
        ok((100, 16)),
        body=gen(COMPLETIONS, False, prompt=SIZED(100), max_tokens="16", ignore_eos=True),
        usage=True,
    ),
    Case(
        "max-tokens-float",
        ok((100, 2)),
        CHAT,
        gen(CHAT, False, prompt=SIZED(100), max_tokens=2.0, ignore_eos=True),
        usage=True,
    ),
    Case(
        "max-tokens-null",
        ok((100, 16)),
        body=gen(COMPLETIONS, False, prompt=SIZED(100), max_tokens=None, ignore_eos=True),
        usage=True,
    ),
    Case("max-tokens-fraction", invalid("body.max_tokens"), body=gen(COMPLETIONS, False, max_tokens=2.5)),
    Case(
        "truncate-string",
        ok((5, 2)),
        body=gen(COMPLETIONS, False, prompt=SIZED(100), max_tokens=2, truncate_prompt_tokens="5", ignore_eos=True),
        usage=True,
    ),
    Case(
        "truncate-fraction", invalid("body.truncate_prompt_tokens"), CHAT, gen(CHAT, False, truncate_prompt_tokens=5.5)
    ),
    Case("seed-string", ok(), body=gen(COMPLETIONS, False, max_tokens=2, seed="1")),
    Case("echo-yes", ok(), body=gen(COMPLETIONS, False, max_tokens=2, echo="yes")),
    Case(
        "include-usage-yes",
        streamed((100, 2)),
        body=gen(
            COMPLETIONS, True, prompt=SIZED(100), max_tokens=2, ignore_eos=True, stream_options={"include_usage": "yes"}
        ),
        usage=True,
    ),
    Case("temperature-not-a-number", invalid("body.temperature"), body=gen(COMPLETIONS, False, temperature="abc")),
    Case("top-k-not-an-integer", invalid("body.top_k"), CHAT, gen(CHAT, True, top_k="abc")),
    Case("user-not-a-string", invalid("body.user"), body=gen(COMPLETIONS, False, max_tokens=2, user=5)),
    Case("seed-past-int64", invalid("body.seed"), CHAT, gen(CHAT, True, seed=2**64)),
    Case(
        "logit-bias-value-not-a-number",
        invalid("body.logit_bias.5"),
        body=gen(COMPLETIONS, False, logit_bias={"5": "abc"}),
    ),
    Case(
        "stream-options-not-an-object",
        invalid("body.stream_options"),
        body=gen(COMPLETIONS, True, stream_options="yes"),
    ),
    Case("chat-logprobs-not-a-bool", invalid("body.logprobs"), CHAT, gen(CHAT, False, logprobs=5)),
    Case("unknown-fields-ignored", ok(), body=gen(COMPLETIONS, False, max_tokens=2, frobnicate=1, extra={"a": [1]})),
]

STREAM_OPTIONS = [
    Case(
        "stream-options-without-stream",
        error("stream_options"),
        body=gen(COMPLETIONS, False, stream_options={"include_usage": True}),
    ),
    Case(
        "stream-options-without-stream-chat",
        error("stream_options"),
        CHAT,
        {**gen(CHAT, False, stream_options={"include_usage": True}), "stream": None},
    ),
    Case("stream-options-empty-without-stream", ok(), body=gen(COMPLETIONS, False, max_tokens=2, stream_options={})),
    Case("stream-options-null-without-stream", ok(), CHAT, gen(CHAT, False, max_tokens=2, stream_options=None)),
]


def sampling(
    name: str, expect: Verdict | dict[bool, Verdict], routes: tuple[str, ...] = (COMPLETIONS, CHAT), **fields: Any
) -> list[Case]:
    """A sampling parameter's case, streaming and not, on ``routes``."""
    cases = []
    for route in routes:
        label = "chat" if route == CHAT else "completions"
        for stream in (False, True):
            wanted = expect[stream] if isinstance(expect, dict) else expect
            body = gen(route, stream, **{"max_tokens": 2, **fields})
            cases.append(Case(f"{name}-{label}-{'stream' if stream else 'whole'}", wanted, route, body))
    return cases


SAMPLING = [
    *sampling("temperature-negative", error("temperature"), temperature=-1),
    *sampling("temperature-over-2", error("temperature"), (COMPLETIONS,), temperature=2.5),
    *sampling("top-p-zero", error("top_p"), (CHAT,), top_p=0),
    *sampling("top-k-below-minus-1", error(None), (COMPLETIONS,), top_k=-2),
    *sampling("presence-penalty-over-2", error(None), (CHAT,), presence_penalty=3),
    *sampling("frequency-penalty-under-minus-2", error(None), (COMPLETIONS,), frequency_penalty=-3),
    *sampling("repetition-penalty-zero", error(None), (COMPLETIONS,), repetition_penalty=0),
    *sampling("min-p-over-1", error(None), (CHAT,), min_p=2),
    *sampling("min-tokens-negative", error(None), (COMPLETIONS,), min_tokens=-1),
    *sampling("min-tokens-over-max-tokens", error(None), (COMPLETIONS,), min_tokens=5),
    *sampling("stop-empty-string", error(None), (CHAT,), stop=[""]),
    *sampling("max-tokens-zero", error("max_tokens"), max_tokens=0),
    *sampling("max-completion-tokens-zero", error("max_tokens"), (CHAT,), max_completion_tokens=0),
    *sampling("logit-bias-key-not-an-id", error("logit_bias"), logit_bias={"abc": 1}),
    *sampling(
        "logit-bias-out-of-vocabulary", by_stream(error("logit_bias"), inband("logit_bias")), logit_bias={"999999": 1}
    ),
    *sampling("logprobs-over-20", by_stream(error("logprobs"), inband("logprobs")), (COMPLETIONS,), logprobs=50),
    *sampling("logprobs-below-minus-1", error("logprobs"), (COMPLETIONS,), logprobs=-2),
    *sampling("top-logprobs-without-logprobs", error("top_logprobs"), (CHAT,), top_logprobs=50),
    *sampling(
        "top-logprobs-over-20",
        by_stream(error("logprobs"), inband("logprobs")),
        (CHAT,),
        logprobs=True,
        top_logprobs=50,
    ),
    *sampling("top-logprobs-below-minus-1", error("top_logprobs"), (CHAT,), logprobs=True, top_logprobs=-2),
]

IMAGE = {"url": "http://127.0.0.1/nothing.png"}
WAV = {"data": "AAAA", "format": "wav"}


def part(content: dict[str, Any], role: str = "user") -> list[dict[str, Any]]:
    """One message whose content is the one part ``content``."""
    return [{"role": role, "content": [content]}]


NAN_TEMPERATURE = b'{"prompt": "hi", "max_tokens": 2, "temperature": NaN}'

PROMPTS = [
    Case("temperature-nan", error("temperature"), raw=NAN_TEMPERATURE),
    Case("max-tokens-nan", invalid("body.max_tokens"), raw=b'{"prompt": "hi", "max_tokens": NaN}'),
    Case("no-prompt", error("prompt"), body={"model": MODEL, "max_tokens": 2}),
    Case("empty-prompt", error("prompt"), body=gen(COMPLETIONS, True, prompt="")),
    Case("prompt-not-text-or-ids", invalid("body.prompt"), body=gen(COMPLETIONS, False, prompt=5)),
    Case("prompt-empty-id-list", error(None), body=gen(COMPLETIONS, True, prompt=[])),
    Case("prompt-negative-id", invalid("body.prompt.1"), body=gen(COMPLETIONS, False, prompt=[1, -5])),
    Case("prompt-id-out-of-vocabulary", error(None), body=gen(COMPLETIONS, False, prompt=[1, 999999])),
    Case("prompt-id-out-of-vocabulary-stream", inband(None), body=gen(COMPLETIONS, True, prompt=[1, 999999])),
    Case("prompt-lone-surrogate", error(None), raw=b'{"prompt": "a\\ud800b", "max_tokens": 2, "stream": true}'),
    Case("no-messages", invalid("body.messages"), CHAT, {"model": MODEL, "max_tokens": 2}),
    Case("messages-empty", error(None), CHAT, gen(CHAT, False, prompt=[])),
    Case("messages-not-a-list", invalid("body.messages"), CHAT, gen(CHAT, True, prompt="hi") | {"messages": "hi"}),
    Case(
        "message-role-unknown", ok(), CHAT, gen(CHAT, False, max_tokens=2, prompt=[{"role": "wizard", "content": "hi"}])
    ),
    Case("message-lone-surrogate", error(None), CHAT, raw=b'{"messages": [{"role": "user", "content": "a\\udfffb"}]}'),
    Case(
        "message-image-part",
        error(None),
        CHAT,
        gen(CHAT, False, prompt=part({"type": "image_url", "image_url": IMAGE})),
    ),
    Case(
        "message-audio-part",
        error(None),
        CHAT,
        gen(CHAT, True, prompt=part({"type": "input_audio", "input_audio": WAV})),
    ),
    Case("message-unknown-part", error(None), CHAT, gen(CHAT, False, prompt=part({"type": "foo", "text": "x"}))),
    Case("message-text-part-without-text", error(None), CHAT, gen(CHAT, True, prompt=part({"type": "text"}))),
    Case("message-text-parts", ok(), CHAT, gen(CHAT, False, max_tokens=2, prompt=part({"type": "text", "text": "a"}))),
    Case(
        "message-refusal-part",
        ok(),
        CHAT,
        gen(CHAT, False, max_tokens=2, prompt=part({"type": "refusal", "refusal": "no"}, role="assistant")),
    ),
]

ORDER = [
    Case(
        "unknown-model-before-sampling",
        error("model", "NotFoundError", 404),
        body={**gen(COMPLETIONS, False, temperature=-1), "model": "nope"},
    ),
    Case(
        "validation-before-unknown-model",
        invalid("body.temperature"),
        body={**gen(COMPLETIONS, False, temperature="abc"), "model": "nope"},
    ),
    Case(
        "stream-options-before-validation",
        error("stream_options"),
        body=gen(COMPLETIONS, False, stream_options={"include_usage": True}, temperature="abc"),
    ),
    Case(
        "prompt-check-before-stream-options",
        error("prompt"),
        body={"model": MODEL, "stream_options": {"include_usage": True}},
    ),
    Case(
        "top-logprobs-check-before-stream-options",
        error("top_logprobs"),
        CHAT,
        gen(CHAT, False, stream_options={"include_usage": True}, top_logprobs=5),
    ),
    Case(
        "unknown-model-before-context",
        error("model", "NotFoundError", 404),
        CHAT,
        {**gen(CHAT, False, prompt=SIZED(9000)), "model": "nope"},
    ),
    Case(
        "context-before-sampling",
        error("input_tokens"),
        body=gen(COMPLETIONS, True, prompt=SIZED(9000), temperature=-1),
    ),
]

CASES = [*FRAMEWORK, *AUTH, *MODELS, *CONTEXT, *TRUNCATION, *LAX, *STREAM_OPTIONS, *SAMPLING, *PROMPTS, *ORDER]


def run(pair: Pair, case: Case) -> tuple[Verdict, Verdict]:
    """``case`` sent to each server: ``(vllm's verdict, the bundled server's)``."""
    vllm, bundled = pair.both(case.method, case.path, key=case.key, **case.kwargs())
    return verdict(vllm, case.usage), verdict(bundled, case.usage)


@pytest.mark.fast
def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.vllm
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_both_answer_as_vllm_was_measured_to(pair: Pair, case: Case) -> None:
    vllm, bundled = run(pair, case)
    assert vllm == case.expect, f"vLLM no longer answers as measured: {vllm}"
    assert bundled == vllm
