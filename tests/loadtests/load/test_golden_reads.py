"""The raw user's hot path records exactly what it recorded when the golden reads were captured
(``golden_reads.py``): every frame's bytes, kernel stamp, wait, classification, keep-alive count and
the row. Any rewrite of ``RawBody``, ``FramedResponse``, ``SSEParser`` or ``StreamTracker`` for speed
must leave these equal."""

from __future__ import annotations

import base64
import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import compiled_reads
from tests.loadtests.load.golden_reads import Read, load, replay

pytestmark = pytest.mark.fast

STREAMS = load()


def _same(got: Any, want: Any) -> bool:
    """Equal, floats to the bit (the fixture's JSON keeps a double exactly)."""
    if isinstance(want, float) and isinstance(got, float):
        return got == want or (math.isnan(got) and math.isnan(want))
    return type(got) is type(want) and got == want if not isinstance(want, str) else got == want


def _assert_records(stream: dict[str, Any], frames: list[list[Any]], row: dict[str, Any]) -> None:
    assert len(frames) == len(stream["frames"])
    for got, want in zip(frames, stream["frames"], strict=True):
        assert all(_same(g, w) for g, w in zip(got, want, strict=True)), (got, want)
    assert row.keys() == stream["row"].keys()
    for name, want in stream["row"].items():
        assert _same(row[name], want), (name, row[name], want)


def test_the_fixture_holds_every_kind_of_frame_and_outcome_the_hot_path_meets() -> None:
    kinds = {record[1] for stream in STREAMS for record in stream["frames"]}
    outcomes = {stream["row"]["outcome"] for stream in STREAMS}
    assert {"data", "keepalive", "done", "error"} <= kinds
    assert {"ok", "cut", "inband_error"} <= outcomes
    assert {stream["plan"]["route"] for stream in STREAMS} == {"chat", "completions"}
    assert any(stream["row"]["usage_completion_tokens"] is not None for stream in STREAMS)
    reads = [base64.b64decode(data) for stream in STREAMS for data, _, _ in stream["reads"]]
    assert any(data.count(b"\n\n") >= 3 for data in reads)  # several frames in one read
    assert any(b"\n\n" not in data and b"data: " in data for data in reads)  # a frame split
    assert any(arrived is not None for stream in STREAMS for _, arrived, _ in stream["reads"])


@pytest.mark.parametrize("stream", STREAMS, ids=[stream["plan"]["request_id"] for stream in STREAMS])
def test_replaying_the_reads_records_what_was_recorded_when_they_were_captured(
    stream: dict[str, Any], read_path: str
) -> None:
    frames, row = replay(stream, path=read_path)
    _assert_records(stream, frames, row)


ONE_TOKEN_CHUNK = re.compile(rb"[0-9a-fA-F]{1,8}\r\ndata: \{[^\n]*\}\n\n\r\n")
"""A read that is one chunk holding one JSON data frame: what a token stream's reads are, one a wake."""


def test_the_compiled_path_takes_nearly_every_one_token_read_itself() -> None:
    """Over the streams read 4 KiB at a time as frames come (one wake a frame), the compiled reader
    takes at least 90% of the reads that are one token chunk in C, without the Python path: one
    that always fell back would pass every parity test here and gain nothing."""
    compiled_reads()
    fast = token_reads = 0
    for stream in STREAMS:
        if stream["shape"] == [4096, 0.0]:
            readers: list[Any] = []
            replay(stream, path="compiled", readers=readers)
            fast += sum(reader.fast for reader in readers)
            token_reads += sum(1 for data, _, _ in _reads(stream) if ONE_TOKEN_CHUNK.fullmatch(data))
    assert token_reads >= 50
    assert fast / token_reads >= 0.9, (fast, token_reads)


def _reads(stream: dict[str, Any]) -> list[Read]:
    return [(base64.b64decode(data), arrived, read_at) for data, arrived, read_at in stream["reads"]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_read_split_into_smaller_reads_with_its_stamp_records_the_same(read_path: str, data: st.DataObject) -> None:
    """However the kernel cuts one arrival into receives (all carrying its stamp), nothing recorded
    changes: chunk-size lines, frames and CRLFs split anywhere, one byte at a time included."""
    stream = data.draw(st.sampled_from([stream for stream in STREAMS if stream["reads"]]))
    split: list[Read] = []
    for chunk, arrived, read_at in _reads(stream):
        if len(chunk) < 2:
            split.append((chunk, arrived, read_at))
            continue
        cuts = sorted(data.draw(st.sets(st.integers(1, len(chunk) - 1), max_size=6)))
        for start, end in zip([0, *cuts], [*cuts, len(chunk)], strict=True):
            split.append((chunk[start:end], arrived, read_at))
    frames, row = replay(stream, split, read_path)
    _assert_records(stream, frames, row)
