"""``decode_json`` is ``json.loads`` in everything but speed: the same value or the same refusal,
for the frames servers send and for the text only Python's ``json`` accepts. Both clients judge a
frame alike only if it is (the openai SDK decodes with ``json``)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.client.outcome import RequestPlan, StreamTracker, decode_json
from loadtests.client.sse import Frame
from loadtests.client.wire_tap import WireEnd
from loadtests.errors import UndecodableJson

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


# --- hostile JSON: every way decoding fails is the server's protocol error ---------------------------

OPENERS = {"[": "]", '{"a":': "}", '{"choices":[{"text":': "}]}"}


@st.composite
def hostile_json(draw: st.DrawFn) -> str | bytes:
    """Text or bytes that no JSON decoder takes, of each failure class: nesting past any recursion
    limit, an integer past Python's digit limit, bytes that are not UTF-8, and text that is no JSON."""
    kind = draw(st.sampled_from(["deep", "long_number", "not_utf8", "not_json"]))
    if kind == "deep":
        opener = draw(st.sampled_from(sorted(OPENERS)))
        depth = draw(st.integers(min_value=5_000, max_value=120_000))
        return opener * depth + "1" + OPENERS[opener] * depth
    if kind == "long_number":
        digits = draw(st.integers(min_value=sys.get_int_max_str_digits() + 1, max_value=20_000))
        wrap = draw(st.sampled_from(["{}", '{{"usage":{{"prompt_tokens":{}}}}}', "[{}]", '{{"error":{{"code":{}}}}}']))
        return wrap.format("7" * digits)
    if kind == "not_utf8":
        return b'{"choices":[{"text":"' + draw(st.sampled_from([b"\xff", b"\xc3", b"\x80"])) + b'"}]}'
    return draw(st.text(min_size=1, max_size=40).filter(lambda text: decoded(text)[0] == "refused"))


@settings(max_examples=200, deadline=None)
@given(text=hostile_json())
def test_any_hostile_json_is_one_short_refusal_never_another_exception(text: str | bytes) -> None:
    with pytest.raises(UndecodableJson) as refused:
        decode_json(text)
    assert isinstance(refused.value, ValueError) and len(refused.value.reason) <= 60


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than a JSON decoder goes"),
        ('{"x":' * 100_000 + "1" + "}" * 100_000, "nested deeper than a JSON decoder goes"),
        ("[" + "9" * 5000 + "]", f"a number longer than {sys.get_int_max_str_digits()} digits"),
        (b'{"a":"\xff"}', "not UTF-8"),
        ("{", "not JSON"),
    ],
)
def test_each_failure_class_has_its_reason(text: str | bytes, reason: str) -> None:
    with pytest.raises(UndecodableJson, match=re.escape(reason)):
        decode_json(text)


def frame(text: str) -> Frame:
    return Frame(t=0.0, nbytes=len(text) + 8, data=text)


@settings(max_examples=60, deadline=None)
@given(text=hostile_json().filter(lambda text: isinstance(text, str) and text.isprintable() and text.strip() == text))
def test_both_clients_call_a_hostile_frame_the_servers_protocol_error_in_one_wording(text: str) -> None:
    """The raw client's tracker and the wire under the SDK give the same reason for the same frame
    (one line of printable text: the parser's framing is another test's), and the SDK is never
    handed a frame its own ``json.loads`` would raise on."""
    first = json.dumps({"choices": [{"index": 0, "text": " hi", "finish_reason": None}]})
    raw = StreamTracker(RequestPlan("r", "completions:x", "completions", expected="ok"), 0.0)
    raw.headers(200, 0.01, "text/event-stream")
    for index, piece in enumerate([first, text, "[DONE]"]):
        raw.frame(frame(piece), 0.1 * (index + 1))
    row = raw.finish(1.0)
    wire = WireEnd(1 << 24)
    handed = wire.saw(b"".join(b"data: " + piece.encode() + b"\n\n" for piece in [first, text, "[DONE]"]))
    assert row.outcome == "protocol_error" and row.error_message == wire.problem
    assert row.error_message is not None and row.error_message.startswith("data frame 2 is ")
    assert handed == b"data: " + first.encode() + b"\n\n" and wire.ended and not wire.done
