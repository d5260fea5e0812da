"""A request's bytes turned into a validated request and its prompt's token count, off the event loop.

Decoding JSON, validating it and tokenizing grow with the request: on the event loop, one 10 MB
prompt silenced every other stream's keep-alive for 3.9 s. ``prepare`` runs that work in a
worker thread, as vLLM's async tokenization does, and the tokenizer works in short slices so the
loop gets the interpreter between them.

Invariant: whatever a client sends, the work here either returns or raises ``APIError(400, ...)``
whose message names the field where it can and quotes at most ``QUOTE_CHARS`` characters of a
value (integers past Python's 4,300-digit limit, lone surrogates, nesting deeper than the JSON
decoder goes, wrong types, token ids outside the vocabulary).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from target_server import tokenizer
from target_server.protocol import (
    QUOTE_CHARS,
    APIError,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    quote,
    validation_message,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: the only way a lone one gets into a decoded body."""


async def prepare(request: Request, parse: Callable[[bytes], T]) -> T:
    """Read the body on the loop (it arrives in chunks) and ``parse`` it in a worker thread."""
    return await run_in_threadpool(parse, await request.body())


def json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``; anything else (not JSON, not an object, not Unicode) is a 400."""
    try:
        data = json.loads(raw)
    except RecursionError:
        raise APIError(400, "request body is nested too deeply to be decoded") from None
    except UnicodeDecodeError as exc:
        raise APIError(400, f"request body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}") from None
    except ValueError:  # Python's limit on decimal digits when it converts a JSON number to an int
        raise APIError(400, f"request body has an integer of more than {sys.get_int_max_str_digits()} digits") from None
    if not isinstance(data, dict):
        raise APIError(400, f"request body must be a JSON object, got {type(data).__name__}")
    if _SURROGATE_ESCAPE.search(raw):
        _refuse_lone_surrogates(data)
    return data


def _refuse_lone_surrogates(data: dict[str, Any]) -> None:
    """A string with a lone surrogate cannot be encoded as UTF-8 (tokenized, echoed, logged): 400,
    naming where it is. Walks with its own stack (the decoder's nesting limit is the interpreter's);
    a key is checked before it becomes part of a path, so a path never holds one."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else key
                _check_text(key, f"{where}.{quote(key)}" if where else quote(key), where)
                stack.append((path, item))
        elif isinstance(value, list):
            stack.extend((f"{where}.{index}", item) for index, item in enumerate(value))
        elif isinstance(value, str):
            _check_text(value, where, where)


def _check_text(text: str, where: str, field_path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        character = quote(text[exc.start])
        message = f"{where[:QUOTE_CHARS] or 'body'}: lone surrogate {character} at index {exc.start} is not Unicode"
        raise APIError(400, message, field_path.partition(".")[0] or None) from None


def validate(data: dict[str, Any], model: type[M]) -> M:
    """``data`` as ``model``; bad or missing fields raise a 400 naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message(exc.errors(include_url=False))
        raise APIError(400, message, param) from None


def prompt_ids(prompt: str | list[int]) -> list[int]:
    """Token ids of a prompt: text is tokenized, ids are checked against the vocabulary."""
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    _check_vocabulary(prompt)
    return list(prompt)


def prompt_tokens(prompt: str | list[int]) -> int:
    """``len(prompt_ids(prompt))`` without building the ids of a text prompt."""
    if isinstance(prompt, str):
        return tokenizer.count(prompt)
    _check_vocabulary(prompt)
    return len(prompt)


def _check_vocabulary(ids: list[int]) -> None:
    """vLLM refuses ids the model does not have with a 400 naming the largest."""
    for bad in (max(ids, default=0), min(ids, default=0)):
        if not 0 <= bad < tokenizer.VOCAB_SIZE:
            raise APIError(400, f"Token id {quote(bad)} is out of vocabulary", "prompt")


def chat_text(messages: list[ChatMessage], add_generation_prompt: bool = True) -> str:
    pairs = [(message.role, message.text()) for message in messages]
    return tokenizer.apply_chat_template(pairs, add_generation_prompt)


def completion(raw: bytes) -> tuple[CompletionRequest, int]:
    """``POST /v1/completions``: the request and its prompt's token count."""
    body = validate(json_object(raw), CompletionRequest)
    return body, prompt_tokens(body.prompt)


def chat_completion(raw: bytes) -> tuple[ChatCompletionRequest, int]:
    """``POST /v1/chat/completions``: the request and its templated prompt's token count."""
    body = validate(json_object(raw), ChatCompletionRequest)
    return body, tokenizer.count(chat_text(body.messages))


def tokenize(raw: bytes) -> tuple[TokenizeCompletionRequest | TokenizeChatRequest, list[int], list[str] | None]:
    """vLLM's ``POST /tokenize``: a prompt or chat messages, their token ids and, when asked
    (``return_token_strs``), each token's text."""
    data = json_object(raw)
    body: TokenizeCompletionRequest | TokenizeChatRequest
    if "messages" in data:
        body = validate(data, TokenizeChatRequest)
        text: str | list[int] = chat_text(body.messages, body.add_generation_prompt)
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
    body = validate(json_object(raw), DetokenizeRequest)
    return body, tokenizer.decode(body.tokens)


def tokenize_text(raw: bytes) -> list[int]:
    """The foreign ``POST /tokenize`` (``--tokenize-api text``): only ``{"text": "..."}``."""
    data = json_object(raw)
    if set(data) != {"text"} or not isinstance(data["text"], str):
        raise APIError(400, f'this /tokenize takes only {{"text": "..."}}, got keys {quote(sorted(data))}', "text")
    return tokenizer.encode(data["text"])
