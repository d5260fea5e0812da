"""Chunk framing of vLLM's streams and the matching non-streaming bodies.

A completions stream is one ``text_completion`` chunk per token; a chat stream opens with a role
chunk (sent with the first token, after prefill, as vLLM does), then one delta per token. The
last token's chunk carries ``finish_reason``; with ``stream_options.include_usage`` a usage
chunk with ``choices: []`` follows; ``data: [DONE]`` ends every stream, an errored one too.
Invariant: an exception after the headers went out becomes an in-band
``data: {"error": {..., "code": 500}}`` frame followed by ``[DONE]``; only ``InjectedDisconnect``
escapes, so that the server drops the connection.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from target_server.faults import InjectedDisconnect
from target_server.protocol import error_body

DONE_FRAME = b"data: [DONE]\n\n"
Route = Literal["completions", "chat"]


def data_frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True)
class Reply:
    """What every chunk of one response shares."""

    route: Route
    request_id: str
    model: str
    prompt_tokens: int
    max_tokens: int
    include_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return ("chatcmpl-" if self.route == "chat" else "cmpl-") + self.request_id

    def usage(self, completion_tokens: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
        }

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.route == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def token_choice(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        if self.route == "chat":
            return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}


async def sse_frames(
    reply: Reply, tokens: AsyncIterator[str], on_error: Callable[[], None] | None = None
) -> AsyncIterator[bytes]:
    """The SSE body of one streaming request, ``[DONE]`` included; ``on_error`` is called when an
    in-band error frame is sent."""
    produced = 0
    try:
        async for text in tokens:
            if produced == 0 and reply.route == "chat":
                role = {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
                yield data_frame(reply.chunk([role]))
            produced += 1
            finish = "length" if produced == reply.max_tokens else None
            yield data_frame(reply.chunk([reply.token_choice(text, finish)]))
        if reply.include_usage:
            yield data_frame(reply.chunk([], usage=reply.usage(produced)))
    except InjectedDisconnect:
        raise
    except Exception as exc:  # vLLM turns any failure after the headers into an in-band error
        if on_error is not None:
            on_error()
        yield data_frame(error_body(500, f"{type(exc).__name__}: {exc}"))
    yield DONE_FRAME


async def full_body(reply: Reply, tokens: AsyncIterator[str]) -> dict[str, Any]:
    """The non-streaming response: every token collected into one choice."""
    texts = [text async for text in tokens]
    content = "".join(texts)
    if reply.route == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "logprobs": None,
            "finish_reason": "length",
        }
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        kind = "text_completion"
    return {
        "id": reply.id,
        "object": kind,
        "created": reply.created,
        "model": reply.model,
        "choices": [choice],
        "usage": reply.usage(len(texts)),
    }
