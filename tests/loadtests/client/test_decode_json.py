"""``decode_json`` is ``json.loads`` in everything but speed: the same value or the same refusal,
for the frames servers send and for the text only Python's ``json`` accepts. Both clients judge a
frame alike only if it is (the openai SDK decodes with ``json``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.client.outcome import decode_json

pytestmark = pytest.mark.fast


def decoded(text: str) -> tuple[str, Any]:
    """("value", repr of it) or ("refused", None): repr tells 1 from 1.0 and keeps key order."""
    try:
        return "value", repr(json.loads(text))
    except ValueError:
        return "refused", None


def ours(text: str) -> tuple[str, Any]:
    try:
        return "value", repr(decode_json(text))
    except ValueError:
        return "refused", None


BIG = 123456789012345678901234567890
EDGES = [
    '{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" hi"}],"usage":null}',
    '{"object":"chat.completion.chunk","choices":[{"delta":{"content":"\\u00e9\\ud83d\\ude00"}}]}',
    f'{{"choices":[],"usage":{{"prompt_tokens":{BIG},"completion_tokens":2}}}}',  # kept in the row: exact
    f'{{"error":{{"message":"x","code":{BIG}}}}}',
    f'{{"object":"error","message":"x","code":{BIG}}}',
    f"[{BIG}, 1]",  # not an object: its excerpt is quoted
    "[1.0000000000000000000001, 12345678901234567890]",
    '{"choices":[{"text":"a"}],"logprob":NaN}',  # json only
    '{"choices":[{"text":"a"}],"logprob":-Infinity}',
    '{"x":1e400}',
    '{"text":"\\ud800"}',  # a lone surrogate: json only
    '{"a":1,"a":2}',
    '"just a string"',
    "",
    "{",
    '{"a":1} trailing',
    "[1,2,]",
    "\ufeff{}",
]


@pytest.mark.parametrize("text", EDGES)
def test_the_edges_decode_as_json_decodes_them(text: str) -> None:
    assert ours(text) == decoded(text)


def test_numbers_the_row_keeps_stay_exact() -> None:
    usage = decode_json(f'{{"choices":[],"usage":{{"prompt_tokens":{BIG}}}}}')["usage"]["prompt_tokens"]
    assert usage == BIG and isinstance(usage, int)
    error = decode_json(f'{{"error":{{"code":{BIG}}}}}')["error"]["code"]
    assert error == BIG and isinstance(error, int)
    assert decode_json(f"[{BIG}]") == [BIG]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def floats_for_long_integers(value: Any) -> Any:
    """``value`` with every integer beyond 64 bits as a float: what orjson gives in a token chunk."""
    if isinstance(value, dict):
        return {key: floats_for_long_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [floats_for_long_integers(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 64):
        return float(value)
    return value


@settings(max_examples=1500, deadline=None)
@given(value=json_values, usage=st.none() | json_values, wrap=st.booleans())
def test_any_value_decodes_as_json_decodes_it(value: Any, usage: Any, wrap: bool) -> None:
    """Equal reprs (1 is not 1.0; NaN equals itself there), but for an integer beyond 64 bits in
    a token chunk: the one difference the docstring allows, and no verdict reads it."""
    document = {"object": "text_completion", "choices": [{"text": value}], "usage": usage} if wrap else value
    text = json.dumps(document)  # NaN and infinities as json writes them
    expected = decoded(text)
    got = ours(text)
    parsed = json.loads(text) if expected[0] == "value" else None
    token_chunk = isinstance(parsed, dict) and parsed.get("usage") is None and "error" not in parsed
    if got != expected and token_chunk and isinstance(parsed, dict) and parsed.get("object") != "error":
        assert got == ("value", repr(floats_for_long_integers(parsed)))
    else:
        assert got == expected
