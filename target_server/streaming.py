"""Chunk framing of vLLM's streams and the matching non-streaming bodies, key for key as vLLM
0.32.0 writes them (measured against it: ``tests/differential/test_stream_parity.py``).

A completions stream is one ``text_completion`` chunk per token; a chat stream opens with a role
chunk per choice (all of them with the first token, after prefill, as vLLM does), then one delta
per token. The last token's chunk of each choice carries ``finish_reason`` (and, unless a usage
chunk follows, ``system_fingerprint``); with ``stream_options.include_usage`` a usage chunk with
``choices: []`` follows, and ``continuous_usage_stats`` puts usage on every chunk too;
``data: [DONE]`` ends every stream, an errored one too. ``n`` choices are ``n`` generations, each
with its slot, their tokens sent as they come (so with one slot, one choice after the other).
Invariant: an exception after the headers went out becomes an in-band
``data: {"error": {..., "code": 500}}`` frame followed by ``[DONE]``; only ``InjectedDisconnect``
escapes, so that the server drops the connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from target_server.faults import InjectedDisconnect
from target_server.protocol import error_body

VLLM_VERSION = "0.32.0"
"""The vLLM whose API this server answers as: ``/version``, and the system fingerprint's head."""
DONE_FRAME = b"data: [DONE]\n\n"
Route = Literal["completions", "chat"]
_ID_MASK = (1 << 64) - 1


def data_frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def random_request_id() -> str:
    """16 hex digits, as vLLM's ``random_uuid()``: the id of a request that named none."""
    return f"{uuid.uuid4().int & _ID_MASK:016x}"


def system_fingerprint(model: str, max_model_len: int) -> str:
    """``vllm-<version>-<8 hex>``, vLLM's default form (its hash is of its whole config; this one is
    of the settings that shape answers), the same for every answer of one server."""
    digest = hashlib.sha256(f"{model}\0{max_model_len}".encode()).hexdigest()
    return f"vllm-{VLLM_VERSION}-{digest[:8]}"


@dataclass(frozen=True)
class Reply:
    """What every chunk of one response shares."""

    route: Route
    request_id: str
    model: str
    prompt_tokens: int
    max_tokens: int
    fingerprint: str
    n: int = 1
    include_usage: bool = False
    continuous_usage: bool = False
    """Usage on every chunk: ``continuous_usage_stats``, which vLLM honours only with ``include_usage``."""
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return ("chatcmpl-" if self.route == "chat" else "cmpl-") + self.request_id

    @property
    def kind(self) -> str:
        return "chat.completion.chunk" if self.route == "chat" else "text_completion"

    def usage(self, completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }

    def _chunk(self, choice: dict[str, Any], completion_tokens: int) -> dict[str, Any]:
        chunk = {"id": self.id, "object": self.kind, "created": self.created, "model": self.model, "choices": [choice]}
        if self.continuous_usage:
            usage: dict[str, Any] = self.usage(completion_tokens)
            if self.route == "chat":
                usage["completion_tokens_details"] = None
            chunk["usage"] = usage
        return chunk

    def role_chunk(self, index: int) -> dict[str, Any]:
        """A chat choice's first chunk: ``{"role": "assistant", "content": ""}``."""
        delta = {"role": "assistant", "content": ""}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        return {**self._chunk(choice, 0), "prompt_token_ids": None, "prompt_text": None}

    def token_chunk(self, index: int, text: str, produced: int) -> dict[str, Any]:
        """The chunk of choice ``index``'s token number ``produced``; the last one finishes it."""
        finish = "length" if produced == self.max_tokens else None
        choice: dict[str, Any]
        if self.route == "chat":
            choice = {"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        else:
            choice = {
                "index": index,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        chunk = self._chunk(choice, produced)
        if finish is not None and not self.include_usage:
            chunk["system_fingerprint"] = self.fingerprint
        return chunk

    def usage_chunk(self, completion_tokens: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.kind,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(completion_tokens),
            "system_fingerprint": self.fingerprint,
        }


async def choice_tokens(choices: list[AsyncIterator[str]]) -> AsyncIterator[tuple[int, str]]:
    """``(index, text)`` of every choice's tokens, in the order they are generated. One choice is
    read in place; several run as tasks (each takes its slot when it starts, in index order), and
    closing this iterator cancels them, which frees their slots. A choice's exception is raised
    here."""
    if len(choices) == 1:
        async for text in choices[0]:
            yield 0, text
        return
    arrived: asyncio.Queue[tuple[int, str | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, tokens: AsyncIterator[str]) -> None:
        try:
            async for text in tokens:
                arrived.put_nowait((index, text))
            arrived.put_nowait((index, None))
        except Exception as exc:
            arrived.put_nowait((index, exc))

    pumps = [asyncio.create_task(pump(index, tokens)) for index, tokens in enumerate(choices)]
    try:
        running = len(pumps)
        while running:
            index, item = await arrived.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


async def sse_frames(
    reply: Reply, tokens: AsyncIterator[tuple[int, str]], on_error: Callable[[], None] | None = None
) -> AsyncIterator[bytes]:
    """The SSE body of one streaming request, ``[DONE]`` included; ``on_error`` is called when an
    in-band error frame is sent."""
    produced = [0] * reply.n
    try:
        async for index, text in tokens:
            if reply.route == "chat" and not any(produced):
                for choice in range(reply.n):
                    yield data_frame(reply.role_chunk(choice))
            produced[index] += 1
            yield data_frame(reply.token_chunk(index, text, produced[index]))
        if reply.include_usage:
            yield data_frame(reply.usage_chunk(sum(produced)))
    except InjectedDisconnect:
        raise
    except Exception as exc:  # vLLM turns any failure after the headers into an in-band error
        if on_error is not None:
            on_error()
        yield data_frame(error_body(500, f"{type(exc).__name__}: {exc}"))
    yield DONE_FRAME


async def full_body(reply: Reply, tokens: AsyncIterator[tuple[int, str]]) -> dict[str, Any]:
    """The non-streaming response: each choice's tokens collected into it."""
    texts: list[list[str]] = [[] for _ in range(reply.n)]
    async for index, text in tokens:
        texts[index].append(text)
    ends = {"logprobs": None, "finish_reason": "length", "stop_reason": None, "token_ids": None}
    choices: list[dict[str, Any]]
    if reply.route == "chat":
        choices = [
            {"index": index, "message": _message("".join(parts)), **ends, "routed_experts": None}
            for index, parts in enumerate(texts)
        ]
    else:
        extra = {"prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}
        choices = [{"index": index, "text": "".join(parts), **ends, **extra} for index, parts in enumerate(texts)]
    usage = {
        **reply.usage(sum(len(parts) for parts in texts)),
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    body: dict[str, Any] = {
        "id": reply.id,
        "object": "chat.completion" if reply.route == "chat" else "text_completion",
        "created": reply.created,
        "model": reply.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": reply.fingerprint,
        "usage": usage,
    }
    if reply.route == "chat":
        body.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
    body.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    return body


def _message(content: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
