"""The tokenizer works in slices (so a long prompt leaves the event loop room) and loses nothing by it."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from target_server import tokenizer

pytestmark = pytest.mark.fast

WHOLE = re.compile(r"\w+|[^\w\s]")
"""The token rule, applied to the whole text at once: what the slices must add up to."""
TEXT = st.text(alphabet=st.sampled_from("ab_9é字 \t\n.,!-\u00a0\x1c\u2028\u200b"), max_size=400)


@settings(max_examples=1500, deadline=None)
@given(text=TEXT, size=st.integers(min_value=1, max_value=40))
def test_slices_cut_no_token(text: str, size: int) -> None:
    parts = list(tokenizer.slices(text, size))
    assert "".join(parts) == text
    assert [piece for part in parts for piece in WHOLE.findall(part)] == WHOLE.findall(text)


def test_slices_are_bounded_unless_a_word_is_longer() -> None:
    text = "word " * 10_000
    assert max(len(part) for part in tokenizer.slices(text, 1000)) <= 1000 + len("word ")
    assert list(tokenizer.slices("x" * 5000, 100)) == ["x" * 5000]  # one token: never cut


def test_count_and_encode_agree_on_a_long_text() -> None:
    text = "the quick, brown fox! " * 5000  # many slices of the default size
    assert tokenizer.count(text) == len(tokenizer.encode(text)) == len(WHOLE.findall(text)) == 6 * 5000


@settings(max_examples=1500, deadline=None)
@given(text=TEXT)
def test_count_is_the_number_of_tokens_encode_gives(text: str) -> None:
    """Also where ``count`` takes its shortcut (no symbol: a token per white-space-separated field)."""
    assert tokenizer.count(text) == len(tokenizer.encode(text)) == len(WHOLE.findall(text))


WORD = st.text(alphabet=st.sampled_from("ab_9é字"), min_size=1, max_size=12)
SPARSE_TEXT = st.lists(
    st.tuples(WORD, st.integers(0, 40), st.sampled_from(".,!-|\u200b")).map(lambda w: w[0] if w[1] else w[2]),
    max_size=400,
).map(lambda words: " ".join(words))
"""Words with a symbol now and then, as filler prompts and chat templates are: ``count``'s other branch."""


@settings(max_examples=500, deadline=None)
@given(text=SPARSE_TEXT)
def test_count_agrees_where_symbols_are_sparse(text: str) -> None:
    assert tokenizer.count(text) == len(WHOLE.findall(text))
    assert tokenizer.count(text.replace(" ", "\n", 3)) == len(WHOLE.findall(text))  # any white space


def test_pieces_are_the_text_of_each_token() -> None:
    text = "Hello, world: 42 tokens!"
    assert tokenizer.pieces(text) == ["Hello", ",", "world", ":", "42", "tokens", "!"]
    assert len(tokenizer.pieces(text)) == len(tokenizer.encode(text)) == tokenizer.count(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=20))
def test_decode_gives_back_words_one_space_apart(words: list[str]) -> None:
    """Ids are hashes into 32,000: two distinct words may share one ("qs0" and "uulo0e" do), and
    then decode gives the last one encoded, as documented; the property is for words that do not."""
    assume(len({tokenizer.encode(word)[0] for word in words}) == len(set(words)))
    text = " ".join(words)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_decode_puts_a_symbol_against_what_precedes_it_and_knows_no_unseen_id() -> None:
    ids = tokenizer.encode("well , said !")
    assert tokenizer.decode(ids) == "well, said!"
    unseen = next(token for token in range(tokenizer.VOCAB_SIZE) if token not in tokenizer._TEXT_OF)
    assert tokenizer.decode([*tokenizer.encode("well"), unseen, *tokenizer.encode("said")]) == "well said"


def test_the_generation_prompt_is_the_templates_last_line() -> None:
    messages = [("user", "hi")]
    with_prompt = tokenizer.apply_chat_template(messages)
    without = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    assert with_prompt == without + "\n| assistant"
