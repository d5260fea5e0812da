"""The SSE parser: WHATWG line rules, frames kept whole, the same frames for any split, and its
guards against hostile streams (line length, UTF-8)."""

from __future__ import annotations

from dataclasses import astuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.sse import Frame, LineTooLong, SSEParser


def parse(*reads: bytes) -> list[Frame]:
    parser = SSEParser()
    frames: list[Frame] = []
    for t, chunk in enumerate(reads):
        frames.extend(parser.feed(chunk, float(t)))
    return frames


def fields(frames: list[Frame]) -> list[tuple[object, ...]]:
    """Everything but arrival time and byte count."""
    return [astuple(frame)[2:] for frame in frames]


def test_data_with_and_without_the_space() -> None:
    assert [f.data for f in parse(b"data: a\n\ndata:b\n\ndata:  c\n\n")] == ["a", "b", " c"]


def test_multi_line_data_joins_with_lf() -> None:
    assert [f.data for f in parse(b"data: one\ndata: two\n\n")] == ["one\ntwo"]


def test_crlf_cr_and_lf_line_ends_are_equivalent() -> None:
    lf = parse(b"event: e\ndata: x\n: note\n\n")
    assert fields(parse(b"event: e\r\ndata: x\r\n: note\r\n\r\n")) == fields(lf)
    assert fields(parse(b"event: e\rdata: x\r: note\r\r")) == fields(lf)


def test_comment_only_frames_are_kept_and_counted() -> None:
    frames = parse(b": keep-alive\n\n: keep-alive\n\ndata: [DONE]\n\n")
    assert [(f.is_comment_only, f.comments) for f in frames] == [
        (True, ["keep-alive"]),
        (True, ["keep-alive"]),
        (False, []),
    ]


def test_event_id_and_retry_fields() -> None:
    (frame,) = parse(b"event: update\nid: 7\nretry: 1000\ndata: x\n\n")
    assert (frame.event, frame.id, frame.retry, frame.data) == ("update", "7", "1000", "x")


def test_an_id_with_nul_is_ignored() -> None:
    (frame,) = parse(b"id: a\x00b\ndata: x\n\n")
    assert frame.id is None


def test_blank_lines_without_fields_make_no_frame() -> None:
    assert [f.data for f in parse(b"\n\n\ndata: x\n\n\n")] == ["x"]


def test_a_frame_is_timed_by_the_read_that_completed_it() -> None:
    frames = parse(b"data: par", b"tial\n", b"\ndata: whole\n\n")
    assert [(f.data, f.t) for f in frames] == [("partial", 2.0), ("whole", 2.0)]


def test_several_frames_in_one_read_share_its_time() -> None:
    assert [f.t for f in parse(b"data: a\n\ndata: b\n\n")] == [0.0, 0.0]


def test_byte_counts_are_the_wire_bytes() -> None:
    wire = b"data: a\r\n\r\n: keep-alive\n\n"
    frames = parse(wire)
    assert [f.nbytes for f in frames] == [11, 14]
    assert sum(f.nbytes for f in frames) == len(wire)


def test_a_cut_stream_leaves_a_partial_frame() -> None:
    parser = SSEParser()
    parser.feed(b"data: complete\n\ndata: cut of", 0.0)
    assert parser.has_partial_frame
    parser.feed(b"f\n\n", 1.0)
    assert not parser.has_partial_frame


FIELD_LINES = st.sampled_from(
    [b"data: {\"x\": 1}", b"data:plain", b"data:", b": keep-alive", b":", b"event: e", b"id: 3", b"retry: 5",
     b"data: caf\xc3\xa9", b"unknown: field", b"data"]
)  # fmt: skip
LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams_and_splits(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    stream = b""
    for _ in range(draw(st.integers(1, 12))):
        end = draw(LINE_ENDS)  # one per frame: CR then LF drawn separately would be one CRLF
        for line in draw(st.lists(FIELD_LINES, min_size=1, max_size=4)):
            stream += line + end
        stream += end
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    return stream, cuts


@settings(max_examples=400, deadline=None)
@given(streams_and_splits())
def test_any_split_of_a_byte_stream_gives_the_same_frames(case: tuple[bytes, list[int]]) -> None:
    stream, cuts = case
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    whole = parse(stream)
    split = parse(*reads)
    assert fields(split) == fields(whole)
    assert sum(f.nbytes for f in whole) == len(stream)
    # A CRLF split between reads counts its LF toward the next frame; after the last frame there is none.
    orphan_lf = stream.endswith(b"\r\n") and len(stream) - 1 in cuts
    assert sum(f.nbytes for f in split) == len(stream) - orphan_lf


def test_a_line_longer_than_the_limit_raises_whole_or_in_pieces() -> None:
    whole = SSEParser(max_line_bytes=64)
    with pytest.raises(LineTooLong, match="line longer than 64 bytes"):
        whole.feed(b"data: " + b"x" * 100 + b"\n\n", 0.0)
    pieces = SSEParser(max_line_bytes=64)
    pieces.feed(b"data: " + b"x" * 50, 0.0)  # 56 bytes buffered: still under the limit
    with pytest.raises(LineTooLong):
        pieces.feed(b"x" * 20, 1.0)  # no newline yet, but already longer than the limit


def test_lines_up_to_the_limit_pass_and_the_default_is_one_mib() -> None:
    parser = SSEParser(max_line_bytes=16)
    assert [f.data for f in parser.feed(b"data: 123456789\n\n", 0.0)] == ["123456789"]  # 16 bytes with its LF
    assert SSEParser().max_line_bytes == 1 << 20
    assert str(LineTooLong(1 << 20)) == "line longer than 1 MiB"


def test_bytes_that_are_not_utf8_are_flagged_on_the_frame_and_the_parser() -> None:
    parser = SSEParser()
    (good, bad) = parser.feed(b"data: caf\xc3\xa9\n\ndata: \xff\xfe\n\n", 0.0)
    assert (good.invalid_utf8, good.data) == (False, "café")
    assert bad.invalid_utf8 and bad.data == "\ufffd\ufffd"
    assert parser.invalid_utf8
    unfinished = SSEParser()
    assert unfinished.feed(b": \xff\n", 0.0) == [] and unfinished.invalid_utf8  # flagged before the frame ends
