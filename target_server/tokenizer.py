"""A deterministic word-level tokenizer, so token counts are exact and cheap without model files.

A token is a run of word characters or one other non-space character; its id is a stable hash
of its text. Invariant: ``count(text) == len(encode(text))``, the same for every process, so
``/tokenize`` and ``usage.prompt_tokens`` always agree and a client can size prompts exactly
(``"w " * n`` is ``n`` tokens).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

VOCAB_SIZE = 32000
_PIECE = re.compile(r"\w+|[^\w\s]")

# Generated text cycles through these words; each is exactly one token.
_OUTPUT_WORDS = (
    "stream",
    "token",
    "keep",
    "alive",
    "prefill",
    "decode",
    "queue",
    "proxy",
    "frame",
    "event",
    "soak",
    "load",
    "model",
    "cache",
    "batch",
    "slot",
)


def pieces(text: str) -> list[str]:
    """The token strings of ``text`` in order."""
    return _PIECE.findall(text)


def encode(text: str) -> list[int]:
    """Token ids of ``text``."""
    return [zlib.crc32(piece.encode()) % VOCAB_SIZE for piece in _PIECE.findall(text)]


def count(text: str) -> int:
    """Number of tokens in ``text`` without building the id list."""
    return sum(1 for _ in _PIECE.finditer(text))


def apply_chat_template(messages: Sequence[tuple[str, str]]) -> str:
    """Render ``(role, content)`` pairs the way a chat template would: role markers around each
    message, then the assistant's turn marker. Each marker is one token (``|``) plus the role word.
    """
    parts = [f"| {role} {content}" for role, content in messages]
    parts.append("| assistant")
    return "\n".join(parts)


def output_token(seed: int, index: int) -> str:
    """The text of generated token ``index``: a leading space and one word."""
    return " " + _OUTPUT_WORDS[(seed + index) % len(_OUTPUT_WORDS)]
