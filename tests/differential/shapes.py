"""The structure of an answer, without its text: what the differential tests compare.

vLLM's tiny model writes random text, so a stream is compared by its shape: per chunk, the object
type, the keys present (top level, per choice, per delta, in usage), each choice's index, role and
``finish_reason``. vLLM sends at most one chunk per token: when its API server falls behind the
engine, several tokens arrive as one chunk. So the chunks between a choice's first and last
(``middle`` chunks: no role, no finish_reason) are compared as a set of shapes, and the rest of
the stream (its ``skeleton``) in order.
"""

from __future__ import annotations

import re
from typing import Any

Shape = tuple[Any, ...]

ID_SUFFIX = re.compile(r"[0-9a-f]{16}")
"""What vLLM puts after ``cmpl-``/``chatcmpl-`` when the request named no ``X-Request-Id``."""


def keys(mapping: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(mapping))


def choice_shape(choice: dict[str, Any]) -> Shape:
    delta = choice.get("delta")
    message = choice.get("message")
    return (
        choice.get("index"),
        keys(choice),
        keys(delta) if isinstance(delta, dict) else None,
        delta.get("role") if isinstance(delta, dict) else None,
        keys(message) if isinstance(message, dict) else None,
        choice.get("finish_reason"),
    )


def chunk_shape(event: Any) -> Shape:
    """One event's shape; ``[DONE]`` is itself."""
    if not isinstance(event, dict):
        return (event,)
    usage = event.get("usage")
    return (
        event.get("object"),
        keys(event),
        tuple(choice_shape(choice) for choice in event.get("choices", [])),
        keys(usage) if isinstance(usage, dict) else usage,
    )


def is_middle(event: Any) -> bool:
    """A content chunk that neither opens (role) nor ends (finish_reason) its choice."""
    if not isinstance(event, dict) or not event.get("choices"):
        return False
    return all(
        choice.get("finish_reason") is None and not (choice.get("delta") or {}).get("role")
        for choice in event["choices"]
    )


def skeleton(events: list[Any]) -> list[Shape]:
    """The shapes of the events that are not middle chunks, in order."""
    return [chunk_shape(event) for event in events if not is_middle(event)]


def middles(events: list[Any]) -> set[Shape]:
    """The distinct shapes of the middle chunks."""
    return {chunk_shape(event) for event in events if is_middle(event)}


def chunks(events: list[Any]) -> list[dict[str, Any]]:
    """The JSON chunks of a stream (``[DONE]`` left out)."""
    return [event for event in events if isinstance(event, dict)]


def indexes(events: list[Any]) -> list[int]:
    """The choice index of each content chunk in order, repeats collapsed: ``[0, 1]`` is every
    chunk of choice 0, then every chunk of choice 1."""
    seen: list[int] = []
    for event in chunks(events):
        for choice in event.get("choices", []):
            if (choice.get("delta") or {}).get("role"):
                continue
            if not seen or seen[-1] != choice["index"]:
                seen.append(choice["index"])
    return seen
