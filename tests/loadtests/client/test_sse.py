"""The SSE parser: WHATWG line rules, frames kept whole, the same frames for any split, and its
guards against hostile streams (line length, UTF-8)."""

from __future__ import annotations

from dataclasses import astuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtests.client.sse import Frame, SSEParser
from loadtests.errors import LineTooLong

pytestmark = pytest.mark.fast


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
    [
        b'data: {"x": 1}',
        b"data:plain",
        b"data:",
        b": keep-alive",
        b":",
        b"event: e",
        b"id: 3",
        b"retry: 5",
        b"data: caf\xc3\xa9",
        b"unknown: field",
        b"data",
    ]
)
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


DATA_LINES = st.sampled_from([b"data:  padded ", b"data: ", b"data: \xff\xfe", b"data: a: b", b"data: " + b"x" * 30])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.lists(FIELD_LINES | DATA_LINES, min_size=1, max_size=3), min_size=1, max_size=8),
    st.integers(8, 40),
    st.lists(st.integers(1, 4), min_size=8, max_size=8),
)
def test_reads_of_whole_frames_parse_as_a_byte_per_read(
    frames: list[list[bytes]], limit: int, group: list[int]
) -> None:
    """Reads of whole frames, one or several each (where the data-frames shortcut applies), give what
    feeding byte by byte gives (where it never does): frames, their times and sizes, invalid UTF-8
    and line-limit errors."""
    whole = [b"".join(line + b"\n" for line in lines) + b"\n" for lines in frames]
    reads, times, start = [], [], 0
    for size in group:
        if start < len(whole):
            reads.append(b"".join(whole[start : start + size]))
            times.append([float(len(reads))] * len(whole[start : start + size]))
            start += size

    def outcome(pieces: list[tuple[bytes, float]]) -> object:
        parser = SSEParser(max_line_bytes=limit)
        got: list[Frame] = []
        try:
            for piece, t in pieces:
                got.extend(parser.feed(piece, t))
        except LineTooLong as exc:  # with the frames its read completed before the too-long line
            got.extend(exc.frames)
            return str(exc), fields(got), [f.t for f in got], [f.nbytes for f in got], parser.invalid_utf8
        return fields(got), [f.t for f in got], [f.nbytes for f in got], parser.invalid_utf8

    by_frames = outcome([(read, float(index + 1)) for index, read in enumerate(reads)])
    by_bytes = outcome(
        [(read[i : i + 1], float(index + 1)) for index, read in enumerate(reads) for i in range(len(read))]
    )
    assert by_frames == by_bytes


def test_a_line_longer_than_the_limit_raises_whole_or_in_pieces() -> None:
    whole = SSEParser(max_line_bytes=64)
    with pytest.raises(LineTooLong, match="line longer than 64 bytes"):
        whole.feed(b"data: " + b"x" * 100 + b"\n\n", 0.0)
    pieces = SSEParser(max_line_bytes=64)
    pieces.feed(b"data: " + b"x" * 50, 0.0)  # 56 bytes buffered: still under the limit
    with pytest.raises(LineTooLong):
        pieces.feed(b"x" * 20, 1.0)  # no newline yet, but already longer than the limit


def test_frames_before_a_too_long_line_in_the_same_read_are_kept() -> None:
    parser = SSEParser(max_line_bytes=64)
    with pytest.raises(LineTooLong) as raised:
        parser.feed(b": keep-alive\n\ndata: 1\n\ndata: " + b"x" * 100 + b"\n\n", 2.0)
    assert [(f.comments, f.data, f.t) for f in raised.value.frames] == [(["keep-alive"], None, 2.0), ([], "1", 2.0)]
    with pytest.raises(LineTooLong) as raised:  # the shortcut for reads of data frames only
        SSEParser(max_line_bytes=64).feed(b"data: 1\n\ndata: 2\n\ndata: " + b"x" * 100, 3.0)
    assert [f.data for f in raised.value.frames] == ["1", "2"]


def test_lines_up_to_the_limit_pass_and_the_default_is_one_mib() -> None:
    parser = SSEParser(max_line_bytes=16)
    assert [f.data for f in parser.feed(b"data: 123456789\n\n", 0.0)] == ["123456789"]  # 16 bytes with its LF
    with pytest.raises(LineTooLong):
        parser.feed(b"data: 1234567890\n\n", 1.0)  # 17: one too many, in a read of whole frames too
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
