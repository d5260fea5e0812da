"""The compiled per-read path (``loadtests.client._fastread``) records exactly what the Python path
records, whatever the server sends and however the reads are cut: the same frames (bytes, times, kinds),
the same row, the same parser, HTTP parser and tracker state after every read, the same return
values and exceptions. The Python path (``RawBody.take_read``) is the authority; the compiled one
decides a read itself only in the plain case and hands every other read back to it.

Checked here: a differential test over generated streams (token chunks of both routes, keep-alives,
``[DONE]``, usage, in-band errors, finish reasons of every shape, broken JSON and UTF-8, CR line ends,
chunk encodings of every spelling, split and coalesced reads, the compiled and the Python reader
interleaved on one body); its judgement alone (``_judge``); its arrival clock (``_arrival``) against
``kernel_stamps.recv_stamped``'s expression; its receive on a real loopback connection (nothing to
read, a reset, the peer's close, the kernel stamp); that it takes plain token chunks itself (a
compiled path that always fell back would pass every parity test and gain nothing); and that the
built module is the one its source says (a stale ``.so`` after an edit of ``_fastread.c``).

Without the compiled module every test here skips; under ``SSE_SOAK_REQUIRE_COMPILED_READS=1`` (CI)
its absence fails them instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import fcntl
import gc
import hashlib
import json
import math
import socket
import struct
import termios
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.socket
import pytest
from gevent.monkey import get_original
from geventhttpclient.response import HTTPParseError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loadtests.client.body_mux import MuxedBody, body_mux
from loadtests.client.kernel_stamps import SO_TIMESTAMPNS, keep_kernel_stamping_on, recv_stamped, stamp_arrivals
from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.raw_body import RawBody
from loadtests.client.sse import SSEParser
from tests.conftest import compiled_reads
from tests.loadtests.client.loopback import Pair, connection_pair
from tests.loadtests.load.golden_reads import response_for

pytestmark = pytest.mark.fast

Read = tuple[bytes, float | None, float]
TakeRead = Callable[[bytes, float | None, float], bool]
SOURCE = Path(__file__).parents[3] / "loadtests" / "client" / "_fastread.c"
_select = get_original("select", "select")


@pytest.fixture(scope="module")
def fastread() -> Any:
    """The compiled module (skipped when not built, failed under ``SSE_SOAK_REQUIRE_COMPILED_READS=1``:
    ``tests.conftest.compiled_reads``), looked for before any example is drawn."""
    return compiled_reads()


def python_reader(body: RawBody) -> TakeRead:
    return body.take_read


class Readers:
    """``compiled_reader`` that keeps the readers it made, for their counters, and counts the reads
    handed to them."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.made: list[Any] = []
        self.calls = 0

    def __call__(self, body: RawBody) -> TakeRead:
        reader = self.module.Reader(body)
        self.made.append(reader)

        def take_read(data: bytes, arrived: float | None, read_at: float) -> bool:
            self.calls += 1
            return reader.take_read(data, arrived, read_at)

        return take_read

    @property
    def counted(self) -> int:
        """Reads the readers say they took or handed back: each read once."""
        return sum(reader.fast + reader.to_a + reader.to_b for reader in self.made)


# --- comparing to the bit ------------------------------------------------------------------------


def bits(value: Any) -> Any:
    """``value`` as nested tuples that are equal only when the values are equal to the bit: every
    float by its IEEE bytes (so -0.0 != 0.0 and NaN == NaN of the same payload), every scalar with
    its exact type, containers in their order."""
    kind = type(value).__name__
    if isinstance(value, float):
        return (kind, struct.pack("<d", value).hex())
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return (kind, value)
    if isinstance(value, enum.Enum):
        return (kind, bits(value.value))
    if isinstance(value, (bytearray, memoryview)):
        return (kind, bytes(value))
    if isinstance(value, (list, tuple, deque)):
        return (kind, tuple(bits(item) for item in value))
    if isinstance(value, dict):
        return (kind, tuple((bits(key), bits(item)) for key, item in value.items()))
    if dataclasses.is_dataclass(value):
        return (kind, tuple((field.name, bits(getattr(value, field.name))) for field in dataclasses.fields(value)))
    if isinstance(value, BaseException):
        return (kind, str(value), bits(getattr(value, "frames", None)))
    return (kind, repr(value))


_UNSET = object()


def state(body: RawBody) -> Any:
    """Everything a read may write: the body's times, the HTTP parser's progress and buffer, every
    slot of the SSE parser and of the tracker."""
    raw, parser, tracker = body.raw, body.parser, body.tracker
    return bits(
        {
            "body": {"t": body.t, "wait": body.wait, "_started": body._started, "_direct": body._direct},
            "raw": {
                "message_complete": raw.message_complete,
                "_body_buffer": raw._body_buffer,
                "body_failure": raw.body_failure,
                "_trailing_data_dropped": getattr(raw, "_trailing_data_dropped", _UNSET) is True,
                "status": raw.get_code(),
                "should_keep_alive": raw.should_keep_alive() if raw.headers_complete else None,
            },
            "parser": {name: getattr(parser, name) for name in SSEParser.__slots__},
            "tracker": {name: getattr(tracker, name) for name in StreamTracker.__slots__ if name != "plan"},
        }
    )


# --- streams -------------------------------------------------------------------------------------


@dataclasses.dataclass
class Stream:
    """One response as the reader meets it: its head, its reads, and the setting they are read in."""

    head: bytes
    reads: list[Read]
    started: float
    ttfb: float
    max_line_bytes: int
    frames_kept: bool
    """False: the tracker's frames list is a ``deque(maxlen=0)``, as ``bench/breakdown.py`` swaps in."""
    python_reads: frozenset[int] = frozenset()
    """Reads that the compiled run hands to the Python path, interleaved with the compiled ones."""
    tracker_state: str = "fresh"
    """What the tracker holds before the body: ``fresh``; ``failed`` (a failed finish reason kept);
    ``token`` (the first token seen); ``broken`` (a protocol error at the headers, the stream ended);
    ``int_times`` (its last arrival an int, a type the Python path takes and a compiled one must not
    mistake for a float)."""

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: enough to replay it
        return (
            f"Stream(head={self.head!r}, reads={self.reads!r}, started={self.started!r}, ttfb={self.ttfb!r}, "
            f"max_line_bytes={self.max_line_bytes!r}, frames_kept={self.frames_kept!r}, "
            f"python_reads={set(self.python_reads) or None!r}, tracker_state={self.tracker_state!r})"
        )


def new_body(stream: Stream) -> RawBody:
    """A fresh body for ``stream``: its head read, as the raw user holds it when the body begins."""
    tracker = StreamTracker(RequestPlan("fastread-1", "chat:diff", "chat"), 1_700_000_000.0)
    tracker.headers(200, stream.ttfb, "text/html" if stream.tracker_state == "broken" else "text/event-stream")
    if stream.tracker_state == "failed":
        tracker._finish_reason = "abort"
    elif stream.tracker_state == "token":
        tracker._ttft = stream.ttfb
    elif stream.tracker_state == "int_times":
        tracker._last_t = 0
    if not stream.frames_kept:
        tracker.frames = deque(maxlen=0)  # type: ignore[assignment]
    raw = response_for(stream.head)
    return RawBody(raw, SSEParser(stream.max_line_bytes), tracker, stream.started)


def run(stream: Stream, reader: Callable[[RawBody], TakeRead]) -> tuple[list[Any], Any, RawBody]:
    """Each read through ``reader``'s take_read (the ``python_reads`` through the body's own), as
    ``MuxedBody`` hands them: until one returns True or raises. Returns what each read returned or
    raised with the whole state after it, and the row the tracker makes of it at the end."""
    body = new_body(stream)
    take_read = reader(body)
    log: list[Any] = []
    for number, (data, arrived, read_at) in enumerate(stream.reads):
        take = body.take_read if number in stream.python_reads else take_read
        try:
            result: Any = ("returned", take(data, arrived, read_at))
        except Exception as exc:
            result = ("raised", bits(exc))
        log.append((number, result, state(body)))
        if result[0] == "raised" or result[1]:
            break
    end_t = (stream.reads[-1][2] if stream.reads else stream.ttfb + stream.started) - stream.started + 0.5
    row = bits(body.tracker.finish(end_t).as_dict())
    return log, row, body


def assert_same(stream: Stream, reader: Callable[[RawBody], TakeRead]) -> RawBody:
    """``reader`` and the Python path record the same from ``stream``, read by read; returns ``reader``'s body."""
    want_log, want_row, _ = run(stream, python_reader)
    got_log, got_row, body = run(stream, reader)
    for want, got in zip(want_log, got_log, strict=False):
        assert got == want, f"read {want[0]}: {stream.reads[want[0]]!r}"
    assert len(got_log) == len(want_log)
    assert got_row == want_row
    return body


ESCAPED_KEYS = {"error": r"err\u006fr", "object": r"obj\u0065ct", "usage": r"us\u0061ge", "choices": r"ch\u006fices"}

FINISH_REASONS = st.sampled_from(
    [
        None,
        None,
        None,
        "stop",
        "length",
        "abort",
        "error",
        "tool_calls",
        "",
        7,
        7.5,
        True,
        "x" * 600,
        "é" * 501,
        {"a": 1},
    ]
)
TEXT = st.one_of(
    st.sampled_from(["", " the", "\n", "é", "😀", '"', "\\", "\u2028", "[DONE]", "data: x\n\n"]),
    st.text(max_size=6),
)


@st.composite
def chat_chunk(draw: st.DrawFn) -> dict[str, Any]:
    delta = draw(
        st.one_of(
            st.builds(lambda text: {"content": text}, TEXT),
            st.just({"role": "assistant", "content": ""}),
            st.builds(lambda text: {"role": "assistant", "content": text}, TEXT),
            st.builds(lambda text: {"reasoning_content": text}, TEXT),
            st.builds(lambda text: {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}, TEXT),
            st.sampled_from([{"tool_calls": []}, {}, {"content": None}, {"content": 0}, "text", None, [1]]),
        )
    )
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": draw(FINISH_REASONS)}
    choices = draw(
        st.one_of(
            st.just([choice]),
            st.just([choice, {"index": 1, "delta": {"content": "b"}, "finish_reason": draw(FINISH_REASONS)}]),
            st.sampled_from([[], [1], ["x", choice], None, "choices", {"0": choice}]),
        )
    )
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": choices}


@st.composite
def completion_chunk(draw: st.DrawFn) -> dict[str, Any]:
    choice: Any = {"index": 0, "text": draw(TEXT), "logprobs": None, "finish_reason": draw(FINISH_REASONS)}
    if draw(st.booleans()) and draw(st.booleans()):
        choice = draw(st.sampled_from([{"text": 0}, {"text": None}, {"finish_reason": "stop"}, []]))
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice]}


OTHER_OBJECTS = st.sampled_from(
    [
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}},
        {"choices": [], "usage": None},
        {"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": 0},
        {"choices": [], "usage": {"prompt_tokens": 1 << 70, "completion_tokens": -1}},
        {"error": {"message": "boom", "type": "InternalServerError", "code": 500}},
        {"error": {"message": "litellm.Timeout: timed out", "code": "408"}},
        {"error": "flat text"},
        {"error": ""},
        {"error": None, "choices": [{"delta": {"content": "x"}}]},
        {"object": "error", "message": "engine dead", "code": 500},
        {"object": "errors", "choices": [{"delta": {"content": "x"}}]},
        {"object": 5},
        {},
    ]
)


@st.composite
def payload(draw: st.DrawFn) -> bytes:
    """One data field's bytes: mostly JSON token chunks, some of them respelled or broken."""
    kind = draw(st.sampled_from(["plain"] * 12 + ["chat"] * 6 + ["completion"] * 3 + ["other"] * 2 + ["raw"]))
    if kind == "plain":  # what vLLM sends for almost every token
        chat = draw(st.booleans())
        text = draw(TEXT)
        reason = draw(st.sampled_from([None] * 8 + ["stop", "length"]))
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        plain: dict[str, Any] = {
            "id": "x-1",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1,
        }
        plain |= {"model": "m", "choices": [choice | {"logprobs": None, "finish_reason": reason}]}
        return json.dumps(plain, ensure_ascii=draw(st.booleans()), separators=(",", ":")).encode()
    if kind == "raw":
        text = draw(
            st.sampled_from(
                [
                    "[DONE]",
                    "[DONE] ",
                    "[DONEx]",
                    "[1]",
                    "[",
                    "",
                    " ",
                    "{",
                    "{}",
                    "null",
                    "1",
                    '"s"',
                    "true",
                    '{"choices": [{"delta": {"content": "\\ud800"}}]}',
                    '{"choices": [{"delta": {"content": "x"}}], "n": NaN}',
                    '{"choices": [{"delta": {"content": "x"}}], "n": Infinity}',
                    '{"choices": [{"text": "x", "finish_reason": "stop"}], "n": ' + "9" * 30 + "}",
                    '{"choices": [{"text": "x"}], "n": ' + "9" * 5000 + "}",
                    '{"choices": [{"text": "x"}], "n": 1e400}',
                    '{"choices": [{"text": "x"}], "choices": 1}',
                    '{"choices": 1, "choices": [{"text": "x", "finish_reason": "stop"}]}',
                    '{"error": {"message": "a"}, "error": ""}',
                    '{"usage": {"prompt_tokens": 1}, "usage": null, "choices": [{"text": "t"}]}',
                    '{"choices": [{"finish_reason": "abort"}, {"finish_reason": "stop"}]}',
                    '{"choices": [{"finish_reason": "stop", "finish_reason": "error"}]}',
                    '\t{"choices": [{"text": "x"}]}\t',
                    '{"choices": [{"text": "x"}]} trailing',
                    "[" * 2000 + "]" * 2000,
                    '{"a":' * 1100 + "1" + "}" * 1100,
                ]
            )
        )
        return text.encode()
    obj = draw(chat_chunk() if kind == "chat" else completion_chunk() if kind == "completion" else OTHER_OBJECTS)
    text = json.dumps(
        obj, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    )
    if draw(st.integers(0, 7)) == 0:  # a key spelled with an escape: the same key to a decoder
        key = draw(st.sampled_from(sorted(ESCAPED_KEYS)))
        text = text.replace(f'"{key}"', f'"{ESCAPED_KEYS[key]}"', 1)
    data = text.encode()
    if draw(st.integers(0, 19)) == 0:  # bytes that are not UTF-8
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf"])) + data[at:]
    return data


@st.composite
def sse_frame(draw: st.DrawFn) -> bytes:
    """One frame of an event stream as servers and proxies send them (mostly ``data: <json>\\n\\n``)."""
    shape = draw(
        st.sampled_from(
            ["data"] * 16
            + ["keepalive"] * 2
            + ["nospace", "cr", "crlf", "lfcrlf", "multi", "event", "other", "lookalike"]
        )
    )
    if shape == "keepalive":
        return b": keep-alive\n\n"
    if shape == "lookalike":  # event-stream bytes that spell a chunk of one data frame: never taken for one
        inner = b"data: " + draw(payload()) + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(inner), inner)
    if shape == "other":
        return draw(
            st.sampled_from(
                [
                    b": keep-alive\n\n",
                    b":\n\n",
                    b":ping\r\n\r\n",
                    b": keep-alive\n\n: keep-alive\n\n",
                    b"retry: 100\n\n",
                    b"id: 7\n\n",
                    b"event: ping\n\n",
                    b"\n",
                    b"data: \n\n",
                    b"data:\n\n",
                    b"data\n\n",
                    b"junk\n\n",
                    b"data: [DONE]\n\n",
                    b"data: [DONE]\r\n\r\n",
                    b"data: " + b"a" * 70 + b"\n\n",
                    b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 70_000 + b'"}}]}\n\n',
                    b"data: x",
                ]
            )
        )
    data = draw(payload())
    if shape == "nospace":
        return b"data:" + data + b"\n\n"
    if shape == "cr":
        return b"data: " + data + b"\r\r"
    if shape == "crlf":
        return b"data: " + data + b"\r\n\r\n"
    if shape == "lfcrlf":
        return b"data: " + data + b"\n\r\n"
    if shape == "multi":
        return b"data: " + data + b"\ndata: " + draw(payload()) + b"\n\n"
    if shape == "event":
        return b"event: message\nid: 1\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\n"


HEADS = {
    "chunked": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    "close": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
}


@st.composite
def chunk_line(draw: st.DrawFn, size: int) -> bytes:
    """A chunk size line for ``size`` bytes, in any spelling llhttp reads (or, rarely, one it refuses)."""
    digits = f"{size:x}"
    digits = digits.upper() if draw(st.booleans()) else digits
    spelling = draw(st.sampled_from(["plain"] * 16 + ["zeros", "zeros", "ext", "bad"]))
    if spelling == "zeros":  # leading zeros: 9 digits and more too
        digits = "0" * draw(st.integers(1, 9)) + digits
    elif spelling == "ext":
        digits += draw(st.sampled_from([";a=b", ";x", ';name="v"', ";", " ;a"]))
    elif spelling == "bad":
        digits = draw(st.sampled_from([f"{size + 1:x}", f"{max(size - 1, 1):x}", "g", f"{size:x} ", "-1", ""]))
    return digits.encode() + b"\r\n"


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    """A body of generated frames, framed, cut into reads and timed."""
    frames = draw(st.lists(sse_frame(), min_size=1, max_size=12))
    if draw(st.booleans()):
        frames.append(draw(st.sampled_from([b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n", b"data:[DONE]\n\n"])))
    framing = draw(st.sampled_from(["chunked"] * 8 + ["length", "close"]))
    body = b"".join(frames)
    # The body's pieces: mostly one frame a chunk, some chunks holding several frames or part of one.
    pieces: list[bytes] = []
    for frame in frames:
        how = draw(st.sampled_from(["own"] * 6 + ["join", "split"]))
        if how == "join" and pieces:
            pieces[-1] += frame
        elif how == "split" and len(frame) > 1:
            at = draw(st.integers(1, len(frame) - 1))
            pieces += [frame[:at], frame[at:]]
        else:
            pieces.append(frame)
    if framing == "chunked":
        wire_pieces = [
            draw(chunk_line(len(piece))) + piece + draw(st.sampled_from([b"\r\n"] * 40 + [b"\n", b"xx"]))
            for piece in pieces
        ]
        end = draw(
            st.sampled_from([b"0\r\n\r\n"] * 4 + [b"0\r\nx-trailer: 1\r\n\r\n", b"000\r\n\r\n", b"0;e\r\n\r\n", b""])
        )
        if end:
            wire_pieces.append(end)
    else:  # no chunks: the same bytes (and sometimes chunk-like ones, which must not be taken for chunks)
        if draw(st.booleans()):
            pieces = [draw(chunk_line(len(piece))) + piece + b"\r\n" for piece in pieces]
            body = b"".join(pieces)
        wire_pieces = pieces
    if draw(st.integers(0, 9)) == 0:
        wire_pieces.append(draw(st.sampled_from([b"HTTP/1.1 200 OK\r\n\r\n", b"junk", b"5\r\ndata:\r\n"])))
    if framing == "length":
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    else:
        head = HEADS[framing]
    # The reads: mostly one piece a read, some coalesced with the next, some cut anywhere.
    reads_data: list[bytes] = []
    pending = b""
    for piece in wire_pieces:
        how = draw(st.sampled_from(["own"] * 6 + ["coalesce", "cut", "line"]))
        pending += piece
        if how == "coalesce":
            continue
        line_end = pending.find(b"\r\n") + 2
        if how == "line" and 2 <= line_end < len(pending):  # the chunk size line alone, then its data
            reads_data += [pending[:line_end], pending[line_end:]]
        elif how == "cut" and len(pending) > 1:
            cuts = sorted(draw(st.sets(st.integers(1, len(pending) - 1), min_size=1, max_size=4)))
            reads_data += [pending[a:b] for a, b in zip([0, *cuts], [*cuts, len(pending)], strict=True)]
        else:
            reads_data.append(pending)
        pending = b""
    if pending:
        reads_data.append(pending)
    if draw(st.booleans()):
        reads_data.append(b"")  # the peer closed
    started = draw(st.sampled_from([0.0, 1000.25, 123456.789, 0]))  # 0: an int, which C must not take for a float
    ttfb = draw(st.sampled_from([0.0, 0.05, 0.1]))
    read_at = started + ttfb
    reads: list[Read] = []
    for data in reads_data:
        read_at += draw(st.sampled_from([0.0, 1e-9, 0.001, 0.01, 0.3, 7.0]))
        arrived = draw(
            st.sampled_from(
                [None, read_at, read_at - 1e-6, read_at - 0.004, read_at + 0.001, started + ttfb - 0.01, started - 1.0]
                * 3
                + [math.inf, -math.inf, math.nan, -0.0, int(read_at)]  # what no kernel stamp is: taken the same
            )
        )
        reads.append((data, arrived, draw(st.sampled_from([read_at] * 19 + [int(read_at)]))))
    python_reads: frozenset[int] = frozenset()
    if draw(st.integers(0, 3)) == 0:
        python_reads = frozenset(draw(st.sets(st.integers(0, max(len(reads) - 1, 0)), max_size=len(reads))))
    return Stream(
        head=head,
        reads=reads,
        started=started,
        ttfb=ttfb,
        max_line_bytes=draw(st.sampled_from([1 << 20] * 16 + [16, 40, 64, 200])),
        frames_kept=draw(st.integers(0, 9)) > 0,
        python_reads=python_reads,
        tracker_state=draw(st.sampled_from(["fresh"] * 8 + ["failed", "token", "broken", "int_times"])),
    )


# --- the tests -----------------------------------------------------------------------------------

EXAMPLES = 400


def plain_stream(frames: list[bytes], end: bytes = b"0\r\n\r\n") -> Stream:
    """Each frame its own chunk and its own read, a millisecond apart, stamped."""
    wire = [b"%x\r\n%s\r\n" % (len(frame), frame) for frame in frames] + ([end] if end else [])
    reads: list[Read] = [(data, 10.0 + i * 0.001 - 0.0002, 10.0 + i * 0.001) for i, data in enumerate(wire)]
    return Stream(HEADS["chunked"], reads, started=9.5, ttfb=0.1, max_line_bytes=1 << 20, frames_kept=True)


def token_frame(text: str, finish: str | None = None, route: str = "chat") -> bytes:
    if route == "chat":
        chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    else:
        chunk = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return b"data: " + json.dumps({"id": "x", "object": "chunk", **chunk}).encode() + b"\n\n"


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(streams())
@example(plain_stream([token_frame("a"), token_frame("b", "stop"), b"data: [DONE]\n\n"]))
def test_the_compiled_reader_records_what_the_python_reader_records(fastread: Any, stream: Stream) -> None:
    readers = Readers(fastread)
    assert_same(stream, readers)
    assert readers.counted == readers.calls


def test_the_compiled_reader_takes_plain_token_chunks_itself(fastread: Any) -> None:
    """One whole ``data:`` frame in one whole chunk a read (almost every read of a token stream at
    the default resolution) is decided without the Python path, and recorded the same; what is not
    plain goes back to it."""
    module = fastread
    tokens = [
        b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
        b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
        *(token_frame(f" tok{i}") for i in range(10)),
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}\n\n',
        *(token_frame(f" t{i}", route="completions") for i in range(5)),
        token_frame("", "stop"),
        b'data: {"choices":[],"usage":null}\n\n',
    ]
    stream = plain_stream([*tokens, b": keep-alive\n\n", b"data: [DONE]\n\n"])
    readers = Readers(module)
    body = assert_same(stream, readers)
    assert [record[1] for record in body.tracker.frames] == ["data"] * len(tokens) + ["keepalive", "done"]
    assert (readers.made[0].fast, readers.made[0].to_a, readers.made[0].to_b) == (len(tokens), 2, 0)


def test_a_read_the_compiled_reader_hands_back_after_the_http_parser_took_it_is_recorded_the_same(
    fastread: Any,
) -> None:
    """Reads that pass every check before the HTTP parser and fail one after it (JSON the token-chunk
    judgement does not decide): handed to the Python path at its second point, counted there."""
    module = fastread
    frames = [
        b'data: {"error": {"message": "boom"}}\n\n',
        b'data: {"choices": [{"text": "x"}], "n": NaN}\n\n',
        b'data: {"choices": [{"text": "x", "finish_reason": 7}]}\n\n',
    ]
    for frame in frames:
        readers = Readers(module)
        assert_same(plain_stream([token_frame("a"), frame, token_frame("b")]), readers)
        assert readers.made[0].fast >= 1 and readers.made[0].to_b >= 1, frame


@pytest.mark.parametrize("over_the_limit", [-1, 0, 1])
def test_a_frame_at_the_line_limit_is_recorded_the_same(fastread: Any, over_the_limit: int) -> None:
    """The parser's line limit (its LF would take the line over it): a frame whose line is one byte
    under it, at it, and one over, each after an ordinary one."""
    frame = token_frame("at the limit")
    stream = plain_stream([token_frame("a"), frame, token_frame("b")])
    stream.max_line_bytes = len(frame) - 1 - over_the_limit  # the line and its LF: len(frame) - 1 bytes
    readers = Readers(fastread)
    body = assert_same(stream, readers)
    assert len(body.tracker.frames) == (3 if over_the_limit <= 0 else 1)  # LineTooLong ends the reads
    assert readers.made[0].fast == (3 if over_the_limit <= 0 else 1)


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_event_stream_bytes_that_spell_a_chunk_are_never_taken_for_one(fastread: Any, framing: str) -> None:
    """A read that looks like one plain chunk but is the data of a chunk (its size line read before
    it) or of a body with a Content-Length: the HTTP parser's output is not the predicted payload,
    so the compiled reader hands the read on after the feed, and the frames are the Python path's."""
    frame = token_frame("inner")
    lookalike = b"%x\r\n%s\r\n" % (len(frame), frame)
    if framing == "chunked":
        head, reads_data = HEADS["chunked"], [b"%x\r\n" % len(lookalike), lookalike, b"\r\n0\r\n\r\n"]
    else:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(lookalike)
        reads_data = [lookalike]
    reads: list[Read] = [(data, None, 10.0 + i) for i, data in enumerate(reads_data)]
    readers = Readers(fastread)
    body = assert_same(Stream(head, reads, started=9.0, ttfb=0.1, max_line_bytes=1 << 20, frames_kept=True), readers)
    assert readers.made[0].fast == 0 and readers.made[0].to_b == 1
    assert [record[1] for record in body.tracker.frames] == ["data"]  # the stray size line is ignored as a field


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


PLAIN = token_frame("plain")
HANDED_BACK = {  # reads before (none of them plain), the read that looks plain, the tracker's state
    "stream ended": ([], PLAIN, "broken"),
    "int time": ([], PLAIN, "int_times"),
    "a CR pending": ([chunk(b"data: {}\n\r")], PLAIN, "fresh"),
    "an LF after a CR counted": ([chunk(b"data: {}\r\n\r"), chunk(b"\n")], PLAIN, "fresh"),
    "a frame begun by a comment": ([chunk(b": c\n")], PLAIN, "fresh"),
    "a line begun": ([chunk(b"data: part")], PLAIN, "fresh"),
    "the body ended": ([b"0\r\n\r\n"], PLAIN, "fresh"),
    "a CR inside the line": ([], b'data: \r{"choices":[{"text":"x"}]}\n\n', "fresh"),
    "a CRLF and an LF": ([], b'data: {"choices":[{"text":"x"}]}\r\n\n', "fresh"),
    "an error": ([], b'data: {"error":{"message":"m"}}\n\n', "fresh"),
    "an escaped error key": ([], b'data: {"err\\u006fr":{"message":"m"}}\n\n', "fresh"),
    "an empty error": ([], b'data: {"error":"","choices":[{"text":"x"}]}\n\n', "fresh"),
    "an error object": ([], b'data: {"object":"error","message":"m"}\n\n', "fresh"),
    "usage": ([], b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n', "fresh"),
    "usage 0": ([], b'data: {"choices":[{"text":"x"}],"usage":0}\n\n', "fresh"),
    "a finish reason that is no str": ([], b'data: {"choices":[{"text":"x","finish_reason":7}]}\n\n', "fresh"),
    "NaN": ([], b'data: {"choices":[{"text":"x"}],"n":NaN}\n\n', "fresh"),
    "a lone surrogate": ([], b'data: {"choices":[{"text":"\\ud800"}]}\n\n', "fresh"),
    "not UTF-8": ([], b'data: {"choices":[{"text":"\xff"}]}\n\n', "fresh"),
    "not an object": ([], b"data: 1\n\n", "fresh"),
    "not JSON": ([], b"data: {\n\n", "fresh"),
    "a marker": ([], b"data: [DONE]\n\n", "fresh"),
}


@pytest.mark.parametrize(("before", "read", "tracker_state"), HANDED_BACK.values(), ids=HANDED_BACK.keys())
def test_a_read_that_looks_plain_in_a_state_or_with_a_payload_the_python_path_decides_is_handed_to_it(
    fastread: Any, before: list[bytes], read: bytes, tracker_state: str
) -> None:
    """Every precondition of the compiled path, one at a time: the read is one chunk of one whole
    ``data:`` frame, but the parser, the tracker or the payload says the Python path must judge it;
    the records are its records."""
    data = [*before, chunk(read), chunk(PLAIN)]
    reads: list[Read] = [(piece, 10.0 + i * 0.01 - 0.001, 10.0 + i * 0.01) for i, piece in enumerate(data)]
    stream = Stream(HEADS["chunked"], reads, 9.5, 0.1, 1 << 20, frames_kept=True, tracker_state=tracker_state)
    readers = Readers(fastread)
    assert_same(stream, readers)
    assert readers.made[0].fast == (1 if readers.calls == len(data) else 0)  # only the plain read after it


class _ReJudgingTracker(StreamTracker):
    """A tracker that judges data frames its own way (as ``test_outcome``'s long-way reference does)."""

    __slots__ = ()

    def _judge_data(self, data: str, t: float) -> str:
        return self._judge_payload(data, t) if data != '{"x":1}' else "error"


def test_a_tracker_that_judges_its_own_way_is_asked(fastread: Any) -> None:
    stream = plain_stream([token_frame("a"), b'data: {"x":1}\n\n', token_frame("b")])
    python, compiled_body = new_body(stream), new_body(stream)
    for body in (python, compiled_body):
        tracker = _ReJudgingTracker(body.tracker.plan, body.tracker.start_time)
        tracker.headers(200, stream.ttfb, "text/event-stream")
        body.tracker = tracker
        body._frame = tracker.frame
    reader = fastread.Reader(compiled_body)
    for data, arrived, read_at in stream.reads:
        python.take_read(data, arrived, read_at)
        reader.take_read(data, arrived, read_at)
    assert compiled_body.tracker.frames == python.tracker.frames
    assert [record[1] for record in python.tracker.frames] == ["data", "error", "data"]
    assert reader.fast == 0  # a subclass's body is the Python path's, every read of it


def test_a_tracker_whose_class_is_changed_after_its_reader_is_made_is_asked(fastread: Any) -> None:
    """The reader reads the tracker's slots at their offsets in its exact class: an object whose
    ``__class__`` is assigned later (the layout allows it) judges its own way from its next read."""
    stream = plain_stream([token_frame("a"), b'data: {"x":1}\n\n', token_frame("b")])
    python, compiled_body = new_body(stream), new_body(stream)
    reader = fastread.Reader(compiled_body)
    (first, *rest) = stream.reads
    python.take_read(*first)
    reader.take_read(*first)
    assert reader.fast == 1
    for body in (python, compiled_body):
        body.tracker.__class__ = _ReJudgingTracker
    for read in rest:
        python.take_read(*read)
        reader.take_read(*read)
    assert compiled_body.tracker.frames == python.tracker.frames
    assert [record[1] for record in python.tracker.frames] == ["data", "error", "data"]
    assert reader.fast == 1  # the reads after the change were the Python path's


def judged_tracker(finish_reason: str | None = None, token_seen: bool = False) -> StreamTracker:
    tracker = StreamTracker(RequestPlan("judge-1", "chat:judge", "chat"), 1.0)
    tracker.headers(200, 0.01, "text/event-stream")
    tracker._finish_reason = finish_reason
    tracker._ttft = 0.02 if token_seen else None
    return tracker


def tracker_state(tracker: StreamTracker, *leaving_out: str) -> Any:
    return bits(
        {name: getattr(tracker, name) for name in StreamTracker.__slots__ if name not in ("plan", *leaving_out)}
    )


@settings(max_examples=EXAMPLES, deadline=None)
@given(payload(), st.sampled_from([None, "stop", "abort", "error", "x" * 600]), st.booleans(), st.floats(0, 100))
def test_judge_judges_a_data_frame_as_the_tracker_does_or_leaves_it(
    fastread: Any, data: bytes, finish_reason: str | None, token_seen: bool, t: float
) -> None:
    """``_judge(tracker, data, t)``: "data" with the tracker left as ``_judge_data`` leaves it (the
    first token's time, the finish reason), or None (the compiled reader hands the frame to the
    Python path) with nothing written."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    tracker = judged_tracker(finish_reason, token_seen)
    before = tracker_state(tracker)
    kind = fastread._judge(tracker, text, t)
    if kind is None:
        assert tracker_state(tracker) == before
        return
    python = judged_tracker(finish_reason, token_seen)
    assert kind == python._judge_data(text, t) == "data"
    assert tracker_state(tracker) == tracker_state(python)


def test_judge_takes_plain_token_chunks_itself(fastread: Any) -> None:
    tracker = judged_tracker()
    frames = [
        token_frame("", "length"),
        token_frame("a"),
        token_frame("b", "stop"),
        token_frame("c", route="completions"),
    ]
    for frame in frames:
        assert fastread._judge(tracker, frame[6:-2].decode(), 0.5) == "data", frame
    assert (tracker._ttft, tracker._finish_reason) == (0.5, "stop")
    failed = judged_tracker("abort", True)
    assert fastread._judge(failed, token_frame("d", "stop")[6:-2].decode(), 0.7) == "data"
    assert (failed._ttft, failed._finish_reason) == (0.02, "abort")  # a failed reason, once kept, stays


LONG = st.integers(-(1 << 63), (1 << 63) - 1)


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.one_of(st.integers(0, 1 << 40), LONG),
    st.one_of(st.integers(0, 999_999_999), LONG),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=True, allow_infinity=True),
)
@example(1_765_000_000, 123_456_789, 1_765_000_000.2, 5000.0)
@example(0, 0, 0.0, -0.0)
@example(0, 0, -0.0, 0.0)
def test_arrival_is_recv_stampeds_expression_to_the_bit(
    fastread: Any, sec: int, nsec: int, wall: float, read_at: float
) -> None:
    """``_arrival(sec, nsec, wall, read_at)`` is ``recv_stamped``'s ``min(read_at, sec + nsec * 1e-9 -
    (wall - read_at))``, rounded the same at each step (no fused multiply-add)."""
    module = fastread
    want = min(read_at, sec + nsec * 1e-9 - (wall - read_at))
    got = module._arrival(sec, nsec, wall, read_at)
    assert type(got) is float
    assert struct.pack("<d", got) == struct.pack("<d", want), (got, want)


def test_the_built_module_is_built_from_the_source_in_the_tree(fastread: Any) -> None:
    """After an edit of ``_fastread.c`` the module must be built again (``pip install -e .``): an
    old ``.so`` would be tested and run in place of the code read."""
    module = fastread
    assert hashlib.sha256(SOURCE.read_bytes()).hexdigest() == module.SOURCE_SHA, (
        f"{module.__file__} was built from another {SOURCE.name}: run `pip install -e .` again"
    )


# --- its receive, on a real connection -----------------------------------------------------------


@contextlib.contextmanager
def loopback() -> Iterator[Pair]:
    """(ours, theirs): a loopback TCP pair of gevent sockets, closed on exit, the kernel stamping
    what arrives on ours (a body gets a compiled reader only when its arrivals are stamped)."""
    if SO_TIMESTAMPNS is None:
        pytest.skip("no SO_TIMESTAMPNS on this platform: no body is read by the compiled reader")
    with connection_pair() as (ours, theirs):
        assert keep_kernel_stamping_on() and stamp_arrivals(ours)
        # Linux turns stamping on lazily, from a work queue soon after it is first asked (later on a busy
        # machine): wait until it is, by a deadline, not a count of tries
        deadline = time.monotonic() + 10
        while True:
            theirs.sendall(b"?")
            readable(ours)
            if recv_stamped(ours._sock, 16)[1] is not None:  # type: ignore[attr-defined]  # gevent's stubs omit _sock
                break
            if time.monotonic() > deadline:
                pytest.fail("the kernel never stamped an arrival in 10 s")
        yield ours, theirs


def readable(sock: gevent.socket.socket) -> None:
    """Wait (at most 10 s) until ``sock`` has something to read: bytes, the peer's close or a reset."""
    assert _select([sock.fileno()], [], [], 10)[0], "nothing arrived in 10 s"


def muxed_body(
    ours: gevent.socket.socket, head: bytes = HEADS["chunked"], size: int = 4096
) -> tuple[RawBody, MuxedBody]:
    """A body read from ``ours`` as ``RawBody.read_to_end`` reads it (stamped), not registered yet."""
    stream = Stream(head, [], started=0.0, ttfb=0.0, max_line_bytes=1 << 20, frames_kept=True)
    body = new_body(stream)
    os_socket = ours._sock  # type: ignore[attr-defined]  # gevent's stubs omit _sock
    assert os_socket.gettimeout() == 0.0  # as RawBody.read_to_end requires of a body it gives a Reader
    return body, MuxedBody(os_socket, True, size, None, body.take_read)


def ended_with(muxed: MuxedBody) -> BaseException | None:
    """What the body's reader is woken with: None when it ended normally, else the failure."""
    assert muxed._ended
    try:
        with gevent.Timeout(10):
            muxed._waiter.get()
    except Exception as exc:
        return exc
    return None


def test_nothing_to_read_returns_false_and_counts_no_read(fastread: Any) -> None:
    module = fastread
    with loopback() as (ours, _theirs):
        body, muxed = muxed_body(ours)
        reader = module.Reader(body, muxed)
        reads, last_read = body_mux().reads, muxed._last_read
        assert reader() is False
        assert (body_mux().reads, muxed._last_read, muxed._ended) == (reads, last_read, False)
        assert (reader.fast, reader.to_a, reader.to_b) == (0, 0, 0)


def test_a_token_chunk_is_read_counted_and_recorded_with_its_stamp_before_its_read(fastread: Any) -> None:
    module = fastread
    with loopback() as (ours, theirs):
        body, muxed = muxed_body(ours)
        reader = module.Reader(body, muxed)
        reads = body_mux().reads
        frame = token_frame("hi")
        theirs.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))
        readable(ours)
        assert reader() is False  # less than a buffer's worth: nothing more is waiting
        assert (body_mux().reads - reads, reader.fast) == (1, 1)
        assert [record[1] for record in body.tracker.frames] == ["data"]
        assert body.wait is not None and body.wait >= 0.0  # the kernel's stamp, never after the read
        assert body.t + body._started <= muxed._last_read
        assert body.tracker.frames[-1][5] == body.wait and body.tracker.frames[-1][2] == body.t


def both_paths(module: Any, send: Callable[[gevent.socket.socket], None], head: bytes = HEADS["chunked"]) -> Any:
    """For the Python ``readable`` and the compiled reader, each on its own connection: what
    ``send`` sends is read by calls until the body ends; what each counted, recorded and ended with."""
    seen = []
    for path in ("python", "compiled"):
        with loopback() as (ours, theirs):
            body, muxed = muxed_body(ours, head)
            read = muxed.readable if path == "python" else module.Reader(body, muxed)
            reads = body_mux().reads
            send(theirs)
            for _ in range(100):
                readable(ours)
                read()
                if muxed._ended:
                    break
            failure = ended_with(muxed)
            seen.append(
                (
                    body_mux().reads - reads,
                    [record[1:2] + record[4:5] for record in body.tracker.frames],
                    None if failure is None else type(failure),
                    None if failure is None else failure.args,
                )
            )
    assert seen[0] == seen[1]
    return seen[0]


def test_a_reset_ends_the_body_with_connection_reset_error_as_the_python_reader_ends_it(fastread: Any) -> None:
    def reset(theirs: gevent.socket.socket) -> None:
        frame = token_frame("a")
        theirs.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        theirs.close()  # with linger 0: a reset, not a close

    _reads, frames, failure, _args = both_paths(fastread, reset)
    assert failure is ConnectionResetError
    assert frames in ([], [("data", len(token_frame("a")))])  # the reset may come before the bytes are read


def test_the_peers_close_mid_body_ends_it_as_the_python_reader_ends_it(fastread: Any) -> None:
    """The close is an empty read, counted, handed to the HTTP parser, which says the body is cut."""

    def close(theirs: gevent.socket.socket) -> None:
        frame = token_frame("a")
        theirs.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))
        theirs.shutdown(socket.SHUT_WR)

    reads, frames, failure, args = both_paths(fastread, close)
    assert (reads, frames, failure, args) == (
        2,
        [("data", len(token_frame("a")))],
        HTTPParseError,
        ("Incomplete response.",),  # llhttp's words for a chunked body cut
    )


def test_the_peers_close_ending_a_close_delimited_body_ends_it_without_failure(fastread: Any) -> None:
    def close(theirs: gevent.socket.socket) -> None:
        theirs.sendall(token_frame("a") + b"data: [DONE]\n\n")
        theirs.shutdown(socket.SHUT_WR)

    _reads, frames, failure, _args = both_paths(fastread, close, HEADS["close"])
    assert failure is None and [kind for kind, _ in frames] == ["data", "done"]


def waiting(sock: gevent.socket.socket, size: int) -> None:
    """Wait (at most 10 s) until ``size`` bytes wait in ``sock``'s receive queue."""
    deadline = time.monotonic() + 10
    while fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0") != struct.pack("i", size):
        assert time.monotonic() < deadline, f"{size} bytes never arrived"
        _select([sock.fileno()], [], [], 0.01)


@pytest.mark.parametrize("size", [16, 0], ids=["16 bytes", "a chunk"])
def test_receives_smaller_than_what_waits_are_taken_as_the_python_reader_takes_them(fastread: Any, size: int) -> None:
    """The whole body waits in the kernel; each call receives at most ``size`` bytes (0: exactly one
    chunk's): the same receives, return values (True while a receive filled the buffer), frames and
    end on both paths; after the end a call reads nothing."""
    frames = [token_frame(f"t{i}") for i in range(3)] + [b"data: [DONE]\n\n"]
    chunks = [b"%x\r\n%s\r\n" % (len(frame), frame) for frame in frames]
    size = size or len(chunks[0])
    seen = []
    for path in ("python", "compiled"):
        with loopback() as (ours, theirs):
            body, muxed = muxed_body(ours, size=size)
            reader = fastread.Reader(body, muxed)
            read = muxed.readable if path == "python" else reader
            reads = body_mux().reads
            theirs.sendall(b"".join(chunks))
            waiting(ours, len(b"".join(chunks)))
            returned: list[bool] = []
            while not muxed._ended and len(returned) < 1000:
                returned.append(read())
            assert ended_with(muxed) is None
            assert read() is False  # ended: nothing more is read
            seen.append(
                (returned, body_mux().reads - reads, [record[1:2] + record[4:5] for record in body.tracker.frames])
            )
            if path == "compiled" and size == len(chunks[0]):
                assert reader.fast == 3  # each token chunk a whole receive, taken in C
    assert seen[0] == seen[1]
    assert [kind for kind, _ in seen[0][2]] == ["data"] * 3 + ["done"]


def test_bad_framing_found_after_the_http_parser_took_a_plain_read_ends_the_body_as_the_python_reader_ends_it(
    fastread: Any,
) -> None:
    """A chunk whose CRLF never came, then a read that looks plain: the compiled reader feeds it to
    the HTTP parser, which refuses it; the body ends with that parser's error, the frame before it
    kept, as the Python reader ends it."""
    frame = token_frame("a")
    pieces = [b"%x\r\n%s" % (len(frame), frame), b"%x\r\n%s\r\n" % (len(frame), frame)]
    seen = []
    for path in ("python", "compiled"):
        with loopback() as (ours, theirs):
            body, muxed = muxed_body(ours)
            reader = fastread.Reader(body, muxed)
            read = muxed.readable if path == "python" else reader
            reads = body_mux().reads
            for piece in pieces:
                theirs.sendall(piece)
                waiting(ours, len(piece))
                assert read() is False
            failure = ended_with(muxed)
            recorded = [record[1:2] + record[4:5] for record in body.tracker.frames]
            seen.append((body_mux().reads - reads, recorded, type(failure), failure and failure.args))
            if path == "compiled":
                assert reader.to_b == 1  # refused after the feed
    assert seen[0] == seen[1]
    assert seen[0][:3] == (2, [("data", len(frame))], HTTPParseError)


def test_a_reader_and_its_body_left_in_a_cycle_are_collected(fastread: Any) -> None:
    """The reader refers to its body and the body (``MuxedBody.reader``) to it: the garbage collector
    sees through the reader (``_unregister`` breaks the cycle, but a body never read leaves it)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        body = new_body(plain_stream([]))
        muxed = MuxedBody(ours, True, 4096, None, body.take_read)
        muxed.reader = fastread.Reader(body, muxed)
        alive = weakref.ref(muxed)
        del muxed, body
        gc.collect()
        assert alive() is None


def test_a_body_read_through_the_mux_by_its_compiled_reader(fastread: Any) -> None:
    """The reader in the watcher's place (``MuxedBody.reader``): every frame recorded, the body
    unregistered at its end and the reader dropped (it refers back to the body)."""
    module = fastread
    frames = [token_frame(f"t{i}") for i in range(5)] + [b"data: [DONE]\n\n"]
    with loopback() as (ours, theirs):
        body, muxed = muxed_body(ours)
        muxed.reader = reader = module.Reader(body, muxed)

        def send() -> None:
            for frame in frames:
                theirs.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))
                gevent.sleep(0.01)

        sender = gevent.spawn(send)
        muxed.read()
        sender.get(timeout=10)
    assert [record[1] for record in body.tracker.frames] == ["data"] * 5 + ["done"]
    assert body.tracker.done and muxed.reader is None and body_mux().registered == 0
    del reader
