"""A request's bytes turned into an admitted request, off the event loop, with vLLM's checks in vLLM's order.

Decoding JSON, validating it and tokenizing grow with the request: on the event loop, one 10 MB
prompt silenced every other stream's keep-alive for 3.9 s. ``prepare`` runs that work in a
worker thread, as vLLM's async tokenization does, and the tokenizer works in short slices so the
loop gets the interpreter between them.

The order is vLLM 0.32.0's, measured: the body is decoded (only a JSON content type is; a body
that cannot be decoded is the framework's ``{"detail": ...}``, broken JSON a validation error at
``body.<position>``), then its content type must be ``application/json``, then the request model
validates it (``protocol``), then the model is looked up (404), then the prompt is rendered
(``max_tokens`` and ``truncate_prompt_tokens`` against ``max_model_len``, tokenization,
truncation keeping the LAST tokens, the ``input_tokens`` check), then ``max_tokens`` is clamped
to what the context leaves and the sampling parameters are checked. The engine's own checks
(logprobs past 20, ``logit_bias`` ids outside the vocabulary, an empty prompt, prompt ids outside
the vocabulary) come last and are not raised but returned as ``Admitted.rejection``: vLLM makes
them when the stream has already started, so a stream carries them in-band.

Invariant: whatever a client sends, the work here either returns or raises ``APIError`` (a 4xx in
vLLM's body) or the framework's ``HTTPException(400)``, never anything else; a message quotes at
most ``QUOTE_CHARS`` characters of a value (integers past Python's 4,300-digit limit, lone
surrogates, nesting deeper than the JSON decoder goes, wrong types, token ids outside the
vocabulary).
"""

from __future__ import annotations

import email.message
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from target_server import tokenizer
from target_server.config import ServerConfig
from target_server.protocol import (
    INVALID,
    APIError,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    invalid_request,
    quote,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

UNPARSABLE = "There was an error parsing the body"
"""FastAPI's words (under ``detail``) for a JSON body its decoder gave up on other than by a syntax error."""
MAX_LOGPROBS = 20
"""vLLM's default ``--max-logprobs``: more logprobs per token is an engine-side 400."""
JSON_ONLY = "Unsupported Media Type: Only 'application/json' is allowed"


async def prepare(request: Request, parse: Callable[[bytes], T]) -> T:
    """Read the body on the loop (it arrives in chunks) and check its content type and ``parse``
    it in a worker thread."""
    content_type = request.headers.get("content-type")
    return await run_in_threadpool(_typed, parse, await request.body(), content_type)


def _typed(parse: Callable[[bytes], T], raw: bytes, content_type: str | None) -> T:
    """``parse(raw)`` when the content type is vLLM's one: ``application/json`` (any case, any
    parameters). FastAPI decodes a body of any JSON type (``application/*+json`` too) before vLLM
    checks the type, so such a body's decoding errors come first; any other type's body is not
    decoded at all."""
    if (content_type or "").lower().split(";", 1)[0] != "application/json":
        if raw and _decoded_as_json(content_type):
            decode(raw)
        raise APIError(400, f"1 validation error:\n  {JSON_ONLY}", None, INVALID)
    return parse(raw)


def _decoded_as_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def decode(raw: bytes) -> Any:
    """The JSON value of a non-empty ``raw``, as FastAPI decodes it: a syntax error is a validation
    error at ``body.<position>``; anything else the decoder refuses (an integer past Python's
    4,300-digit limit, nesting deeper than the recursion limit, bytes that are not UTF-8) is the
    framework's 400 ``{"detail": UNPARSABLE}``."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        failure = {"type": "json_invalid", "loc": (exc.pos,), "msg": "JSON decode error", "input": {}}
        raise invalid_request([{**failure, "ctx": {"error": exc.msg}}]) from None
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise HTTPException(400, UNPARSABLE) from None


def json_body(raw: bytes) -> Any:
    """The decoded body; an empty one, or JSON ``null``, is a missing body (a validation error at ``body``)."""
    data = decode(raw) if raw else None
    if data is None:
        raise invalid_request([{"type": "missing", "loc": (), "msg": "Field required", "input": None}])
    return data


def validate(data: Any, model: type[M]) -> M:
    """``data`` as ``model``; a field that fails is vLLM's validation error (``invalid_request``);
    the model's raw-body checks raise their own ``APIError``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_request(exc.errors(include_url=False)) from None


def check_model(requested: str | None, served: str) -> None:
    """vLLM's 404 for a model it does not serve (no model named is the served one)."""
    if requested is not None and requested != served:
        raise APIError(404, f"The model {quote(requested)} does not exist. Served: `{served}`.", "model")


# -- Rendering the prompt -------------------------------------------------------------------------


def tokenizable(text: str) -> str:
    """``text``, checked: a lone surrogate (a JSON escape can carry one) cannot be tokenized, a
    400 naming no parameter, as vLLM's tokenizer failing on it is."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise APIError(
                400, f"the prompt cannot be tokenized: lone surrogate {quote(text[exc.start])} at index {exc.start}"
            ) from None
    return text


def prompt_ids(prompt: str | list[int]) -> list[int]:
    """Token ids of a prompt: text is tokenized, ids are checked against the vocabulary."""
    if isinstance(prompt, str):
        return tokenizer.encode(tokenizable(prompt))
    _check_vocabulary(prompt)
    return list(prompt)


def _check_vocabulary(ids: list[int]) -> None:
    """A 400 naming the first id outside the vocabulary (``/tokenize``)."""
    bad = _out_of_vocabulary(ids)
    if bad is not None:
        raise APIError(400, f"Token id {quote(bad)} is out of vocabulary", "prompt")


def _out_of_vocabulary(ids: list[int]) -> int | None:
    for bad in (max(ids, default=0), min(ids, default=0)):
        if not 0 <= bad < tokenizer.VOCAB_SIZE:
            return bad
    return None


def chat_text(messages: list[ChatMessage], add_generation_prompt: bool = True) -> str:
    pairs = [(message.role, message.text()) for message in messages]
    return tokenizer.apply_chat_template(pairs, add_generation_prompt)


def single_prompt(prompt: Any) -> str | list[int]:
    """The one prompt of a completion request: vLLM's batch forms hold a list of them; a batch of
    none is vLLM's 400, a batch of several is beyond this server (one prompt per request)."""
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(item, int) for item in prompt):
        return list(prompt)
    if not prompt:
        raise APIError(400, "You must pass at least one prompt")
    if len(prompt) > 1:
        raise APIError(400, f"this server takes one prompt per request, got a batch of {len(prompt)}", "prompt")
    return single_prompt(prompt[0])


def fit(prompt_tokens: int, requested: int | None, truncate: int | None, max_model_len: int, param: str) -> int:
    """vLLM's rendering of a prompt of ``prompt_tokens`` against the context: ``requested`` output
    tokens (named ``param``) beyond ``max_model_len`` and ``truncate_prompt_tokens`` beyond it are
    400s; truncation keeps the last ``truncate`` tokens (-1: ``max_model_len - 1``, leaving one
    token of room); a prompt still over ``max_model_len`` is 400 ``input_tokens``. Returns the
    prompt tokens kept (a prompt AT ``max_model_len`` fits here and fails on ``max_tokens``)."""
    if (requested or 0) > max_model_len:
        raise APIError(
            400,
            f"{param}={requested} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            param,
        )
    if truncate is not None:
        if truncate > max_model_len:
            raise APIError(
                400,
                f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len = {max_model_len}. "
                "Please request a smaller truncation size.",
                "truncate_prompt_tokens",
            )
        prompt_tokens = min(prompt_tokens, max_model_len - 1 if truncate < 0 else truncate)
    if prompt_tokens > max_model_len:
        raise APIError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            "input_tokens",
        )
    return prompt_tokens


# -- Sampling parameters: vLLM's checks before the engine, then the engine's own -------------------


def check_sampling(body: CompletionRequest | ChatCompletionRequest, max_tokens: int) -> None:
    """vLLM's checks of the sampling parameters (``SamplingParams``), in its order, with the
    clamped ``max_tokens``: each a 400 before any response, a stream's included."""
    bias = body.logit_bias or {}
    keys = [key for key in bias if not _is_int(key)]
    if keys:
        raise APIError(
            400,
            f"logit_bias contains key(s) that cannot be converted to integer token IDs: {quote(keys)}",
            "logit_bias",
        )
    presence = _or(body.presence_penalty, 0.0)
    frequency = _or(body.frequency_penalty, 0.0)
    repetition = _or(body.repetition_penalty, 1.0)
    temperature = _or(body.temperature, 1.0)
    top_p, top_k, min_p = _or(body.top_p, 1.0), _or(body.top_k, 0), _or(body.min_p, 0.0)
    stop = [body.stop] if isinstance(body.stop, str) else body.stop or []
    checks: list[tuple[bool, str, str | None]] = [
        (not -2.0 <= presence <= 2.0, f"presence_penalty must be in [-2, 2], got {presence}.", None),
        (not -2.0 <= frequency <= 2.0, f"frequency_penalty must be in [-2, 2], got {frequency}.", None),
        (not math.isfinite(repetition), f"repetition_penalty must be a finite number, got {repetition}.", None),
        (repetition <= 0.0, f"repetition_penalty must be greater than zero, got {repetition}.", None),
        (not math.isfinite(temperature), f"temperature must be a finite number, got {temperature}.", "temperature"),
        (temperature < 0.0, f"temperature must be non-negative, got {temperature}.", "temperature"),
        (temperature > 2.0, f"temperature must be in [0, 2], got {temperature}.", "temperature"),
        (not 0.0 < top_p <= 1.0, f"top_p must be in (0, 1], got {top_p}.", "top_p"),
        (top_k < -1, f"top_k must be 0 (disable), or at least 1, got {top_k}.", None),
        (not 0.0 <= min_p <= 1.0, f"min_p must be in [0, 1], got {min_p}.", None),
        (max_tokens < 1, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens"),
        (body.min_tokens < 0, f"min_tokens must be greater than or equal to 0, got {body.min_tokens}.", None),
        (
            body.min_tokens > max_tokens,
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {body.min_tokens}.",
            None,
        ),
        (any(not text for text in stop), "stop cannot contain an empty string.", None),
    ]
    for failed, message, param in checks:
        if failed:
            raise APIError(400, message, param)


def engine_rejection(
    body: CompletionRequest | ChatCompletionRequest, prompt_tokens: int, ids: list[int] | None
) -> APIError | None:
    """The checks vLLM's engine makes when it takes the request (after a stream's headers): too
    many logprobs, ``logit_bias`` ids outside the vocabulary, an empty prompt, prompt ids outside
    the vocabulary. The first that fails, or None."""
    if isinstance(body, ChatCompletionRequest):
        logprobs = body.top_logprobs if body.logprobs else None
    else:
        logprobs = body.logprobs
    for name, kind, wanted in (("logprobs", "sample", logprobs), ("prompt_logprobs", "prompt", body.prompt_logprobs)):
        count = tokenizer.VOCAB_SIZE if wanted == -1 else wanted
        if count and count > MAX_LOGPROBS:
            message = f"Requested {kind} logprobs of {count}, which is greater than max allowed: {MAX_LOGPROBS}"
            return APIError(400, message, name)
    outside = [int(key) for key in body.logit_bias or {} if not 0 <= int(key) < tokenizer.VOCAB_SIZE]
    if outside:
        return APIError(
            400,
            f"token_id(s) {quote(outside)} in logit_bias contain out-of-vocab token ids. "
            f"Vocabulary size: {tokenizer.VOCAB_SIZE}",
            "logit_bias",
        )
    if prompt_tokens == 0:
        return APIError(400, "The decoder prompt cannot be empty")
    bad = None if ids is None else _out_of_vocabulary(ids)
    if bad is not None:
        return APIError(400, f"Token id {quote(bad)} is out of vocabulary")
    return None


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


# -- The routes' parsers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Admitted:
    """A generation request that passed every check made before a response: its body, the prompt
    tokens kept, the tokens to generate, and the engine's rejection if it has one (``engine_rejection``)."""

    body: CompletionRequest | ChatCompletionRequest
    prompt_tokens: int
    max_tokens: int
    rejection: APIError | None = None


def completion(config: ServerConfig, raw: bytes) -> Admitted:
    """``POST /v1/completions``."""
    body = validate(json_body(raw), CompletionRequest)
    check_model(body.model, config.model)
    prompt = single_prompt(body.prompt)
    requested = body.max_tokens if body.max_tokens is not None else 16
    ids = None if isinstance(prompt, str) else prompt
    counted = tokenizer.count(tokenizable(prompt)) if isinstance(prompt, str) else len(prompt)
    kept = fit(counted, requested, body.truncate_prompt_tokens, config.max_model_len, "max_tokens")
    max_tokens = min(config.max_model_len - kept, requested)
    check_sampling(body, max_tokens)
    return Admitted(body, kept, max_tokens, engine_rejection(body, kept, ids))


def chat_completion(config: ServerConfig, raw: bytes) -> Admitted:
    """``POST /v1/chat/completions``. Without ``max_completion_tokens`` or ``max_tokens`` vLLM
    generates until the end-of-sequence token, at most what the context leaves; this server has
    no such token and generates ``--default-chat-max-tokens`` instead (an extension), at most what
    the context leaves."""
    body = validate(json_body(raw), ChatCompletionRequest)
    check_model(body.model, config.model)
    if not body.messages:
        raise APIError(400, "Cannot apply chat template to an empty conversation. Provide at least one message.")
    for message in body.messages:
        for part in message.content if isinstance(message.content, list) else ():
            problem = part.problem(config.model)
            if problem is not None:
                raise APIError(400, problem)
    requested: int | None
    if body.max_completion_tokens is not None:
        requested, param = body.max_completion_tokens, "max_completion_tokens"
    else:
        requested, param = body.max_tokens, "max_tokens"
    counted = tokenizer.count(tokenizable(chat_text(body.messages)))
    kept = fit(counted, requested, body.truncate_prompt_tokens, config.max_model_len, param)
    room = config.max_model_len - kept
    max_tokens = min(room, requested if requested is not None else config.default_chat_max_tokens)
    check_sampling(body, max_tokens)
    return Admitted(body, kept, max_tokens, engine_rejection(body, kept, None))


def tokenize(raw: bytes) -> tuple[TokenizeCompletionRequest | TokenizeChatRequest, list[int], list[str] | None]:
    """vLLM's ``POST /tokenize``: a prompt or chat messages, their token ids and, when asked
    (``return_token_strs``), each token's text."""
    data = json_body(raw)
    body: TokenizeCompletionRequest | TokenizeChatRequest
    if isinstance(data, dict) and "messages" in data:
        body = validate(data, TokenizeChatRequest)
        templated = tokenizable(chat_text(body.messages, body.add_generation_prompt))
        text: str | list[int] = templated
        ids = tokenizer.encode(templated)
    else:
        body = validate(data, TokenizeCompletionRequest)
        text = body.prompt
        ids = prompt_ids(text)
    if not body.return_token_strs:
        return body, ids, None
    strings = tokenizer.pieces(text) if isinstance(text, str) else [tokenizer.decode([token]) for token in ids]
    return body, ids, strings


def detokenize(raw: bytes) -> tuple[DetokenizeRequest, str]:
    """vLLM's ``POST /detokenize``: token ids and their text."""
    body = validate(json_body(raw), DetokenizeRequest)
    return body, tokenizer.decode(body.tokens)


def tokenize_text(raw: bytes) -> list[int]:
    """The foreign ``POST /tokenize`` (``--tokenize-api text``): only ``{"text": "..."}``."""
    data = json_body(raw)
    if not isinstance(data, dict) or set(data) != {"text"} or not isinstance(data["text"], str):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise APIError(400, f'this /tokenize takes only {{"text": "..."}}, got keys {quote(keys)}', "text")
    return tokenizer.encode(tokenizable(data["text"]))
