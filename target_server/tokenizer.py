"""A deterministic word-level tokenizer, so token counts are exact and cheap without model files.

A token is a run of word characters or one other non-space character; its id is a stable hash
of its text. Invariant: ``count(text) == len(encode(text))``, the same for every process, so
``/tokenize`` and ``usage.prompt_tokens`` always agree and a client can size prompts exactly
(``"w " * n`` is ``n`` tokens). There are no special tokens (no BOS), as with tokenizers that add
none. A hash has no inverse, so ``decode`` knows the text of the ids ``encode`` has given in this
process (the last piece given each id: at most ``VOCAB_SIZE`` entries, each no longer than the
piece a client sent); any other id decodes to nothing, as an id outside vLLM's vocabulary does.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence

VOCAB_SIZE = 32000
SLICE_CHARS = 1 << 14
"""The tokenizer works this much text per regex call (a few ms), so a thread tokenizing a long
prompt hands the interpreter back to the event loop between calls (one call over 10 MB took 1 s)."""
_PIECE = re.compile(r"\w+|[^\w\s]")
_NOT_WORD = re.compile(r"\W")
_WORD_START = re.compile(r"\w")
_SYMBOL = re.compile(r"[^\w\s]")
r"""A character that is a token by itself: neither a word character nor white space (every
character is a word character, white space, or this; ``str.split`` and ``\s`` agree on white space)."""
_SPARSE = 32
"""Symbols are sparse below one per this many characters: counting by blanking them pays off."""
_PROBE_CHARS = 512
"""How much of a slice is looked at to tell sparse from dense."""

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


_TEXT_OF: dict[int, str] = {}
"""The piece of text each id was last given for, for ``decode``."""


def encode(text: str) -> list[int]:
    """Token ids of ``text``."""
    ids: list[int] = []
    for part in slices(text):
        found = _PIECE.findall(part)
        part_ids = [zlib.crc32(piece.encode()) % VOCAB_SIZE for piece in found]
        _TEXT_OF.update(zip(part_ids, found, strict=True))
        ids += part_ids
    return ids


def pieces(text: str) -> list[str]:
    """The text of each token of ``text``, in order (``/tokenize``'s ``token_strs``)."""
    return [piece for part in slices(text) for piece in _PIECE.findall(part)]


def decode(ids: list[int]) -> str:
    """The text of ``ids``: words one space apart, a symbol against what precedes it (white space
    is not kept by ``encode``); an id ``encode`` has not given decodes to nothing."""
    text = [_TEXT_OF.get(token, "") for token in ids]
    return "".join((" " + piece if index and _WORD_START.match(piece) else piece) for index, piece in enumerate(text))


def count(text: str) -> int:
    """Number of tokens in ``text`` without building the id list. Where symbols are sparse (a load
    test's filler prompts, a chat template's markers), every symbol is a token and the runs of word
    characters are the white-space-separated fields left once symbols are blanked: scans and a
    ``str.split`` in C instead of a match object per token (10,000 filler tokens: 0.31 ms, not
    1.2 ms, on every request the server admits). Dense symbols take the token regex itself."""
    total = 0
    for part in slices(text):
        if len(_SYMBOL.findall(part, 0, _PROBE_CHARS)) * _SPARSE >= min(len(part), _PROBE_CHARS):
            total += len(_PIECE.findall(part))  # dense, judged by the slice's start: either way is exact
        else:
            blanked, symbols = _SYMBOL.subn(" ", part)
            total += symbols + len(blanked.split())
    return total


def slices(text: str, size: int = SLICE_CHARS) -> Iterator[str]:
    """``text`` in consecutive slices of about ``size`` characters, each cut just before a character
    that is not a word character, so no token spans a cut: the tokens of the slices, in order, are
    the tokens of ``text``. (A run of word characters longer than ``size`` stays whole.)"""
    start, length = 0, len(text)
    while length - start > size:
        cut = _NOT_WORD.search(text, start + size)
        if cut is None:
            break
        yield text[start : cut.start()]
        start = cut.start()
    yield text[start:]


def apply_chat_template(messages: Sequence[tuple[str, str]], add_generation_prompt: bool = True) -> str:
    """Render ``(role, content)`` pairs the way a chat template would: role markers around each
    message, then (with ``add_generation_prompt``, as chat completions always render) the
    assistant's turn marker. Each marker is one token (``|``) plus the role word.
    """
    parts = [f"| {role} {content}" for role, content in messages]
    if add_generation_prompt:
        parts.append("| assistant")
    return "\n".join(parts)


def output_token(seed: int, index: int) -> str:
    """The text of generated token ``index``: a leading space and one word."""
    return " " + _OUTPUT_WORDS[(seed + index) % len(_OUTPUT_WORDS)]
