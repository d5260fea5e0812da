"""The keep-alive interval inferred from comments: one figure, robust to a proxy that batches them,
tried on generated arrival patterns (regular, pairs, triplets, jitter, stalls, harness stalls)."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.judge.gates import INFERRED
from loadtests.judge.keep_alive import BATCH_GAP_S, InferredInterval, infer_interval, interval_line
from loadtests.record.recorder import Recorder
from tests.loadtests.tables import frames_of

pytestmark = pytest.mark.fast


def stream_frames(request_id: str, events: list[tuple[str, float]], comment: str = "keep-alive") -> pd.DataFrame:
    """frames.parquet's rows of one stream: ``(kind, t_s)`` as a tracker records them."""
    tracker = StreamTracker(RequestPlan(request_id, "n", "completions"), 0.0)
    tracker.headers(200, 0.1, "text/event-stream")
    for kind, t in events:
        if kind == "keepalive":
            tracker.frame(Frame(t, 14, comments=[comment]), t)
        else:
            tracker.frame(Frame(t, 30, data='{"choices": [{"text": "a"}]}'), t)
    recorder = Recorder()
    recorder.add(tracker.finish(events[-1][1]), tracker.frames)
    return frames_of(recorder)


def server_comments(
    interval: float,
    count: int,
    per_delivery: int = 1,
    jitter: float = 0.0,
    stall_after: int | None = None,
    stall_s: float = 0.0,
    seed: int = 0,
) -> list[tuple[str, float]]:
    """A queued stream's arrivals: a comment each ``interval`` after the headers (each ``jitter`` late
    or early, the server stalled ``stall_s`` after comment ``stall_after``), delivered
    ``per_delivery`` at a time (a proxy that holds writes: each batch lands with its last comment,
    its comments within a millisecond), then the first token."""
    rng = random.Random(seed)
    sent = [0.1 + interval * (n + 1) + rng.uniform(-jitter, jitter) for n in range(count)]
    if stall_after is not None:
        sent = [t + (stall_s if n >= stall_after else 0.0) for n, t in enumerate(sent)]
    arrivals = []
    for first in range(0, count, per_delivery):
        batch = sent[first : first + per_delivery]
        arrivals += [("keepalive", batch[-1] + 0.0002 * n) for n in range(len(batch))]
    return [*arrivals, ("data", sent[-1] + interval / 2)]


def inferred(streams: list[list[tuple[str, float]]]) -> InferredInterval | None:
    return infer_interval(pd.concat([stream_frames(f"r{n}", s) for n, s in enumerate(streams)], ignore_index=True))


@pytest.mark.parametrize("interval", [0.1, 0.2, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("per_delivery", [1, 2, 3])
@pytest.mark.parametrize("jitter_share", [0.0, 0.1])
def test_the_interval_is_the_servers_whatever_the_batching(
    interval: float, per_delivery: int, jitter_share: float
) -> None:
    """HAProxy's pairs read 0.396 s for 0.2 s and 0 s for 0.1 s by the median gap; never here."""
    streams = [server_comments(interval, 12, per_delivery, jitter_share * interval, seed=n) for n in range(4)]
    found = inferred(streams)
    assert found is not None and found.interval == pytest.approx(interval, rel=0.05)
    assert found.interval > 0
    assert found.streams == 4 and found.comments == 48
    assert found.most_per_delivery == per_delivery and bool(found.batched) == (per_delivery > 1)
    assert ("batched" in found.source) == (per_delivery > 1)


@pytest.mark.parametrize("per_delivery", [1, 2])
def test_server_stalls_and_a_late_first_stream_do_not_move_it(per_delivery: int) -> None:
    streams = [server_comments(0.2, 12, per_delivery, stall_after=5, stall_s=1.0, seed=n) for n in range(4)]
    streams.append(server_comments(0.2, 3, per_delivery, stall_after=1, stall_s=3.0))
    found = inferred(streams)
    assert found is not None and found.interval == pytest.approx(0.2, rel=0.05)


def test_a_harness_stall_that_merges_comments_into_one_read_changes_nothing() -> None:
    """Comments at 1, 2, 3, 4 s read at 1, 3, 3, 4 s (the harness stalled): the merged read counts two."""
    arrivals = [("keepalive", 1.1), ("keepalive", 3.1), ("keepalive", 3.1), ("keepalive", 4.1), ("data", 4.5)]
    found = inferred([arrivals])
    assert found is not None and found.interval == 1.0


def test_the_interval_is_inferred_from_gaps_between_consecutive_comments_of_one_stream() -> None:
    """Only comment-to-comment spacing measures the interval: not headers-to-comment, not across a token."""
    found = inferred(
        [
            [("keepalive", 1.1), ("keepalive", 2.101), ("keepalive", 3.1), ("data", 3.2)],
            [("keepalive", 1.1), ("data", 1.5), ("keepalive", 2.5), ("keepalive", 3.502)],
            [("keepalive", 1.1), ("data", 1.3)],  # one comment: nothing to measure
        ]
    )
    assert found is not None and found.interval == pytest.approx(1.0, abs=0.002)
    assert (found.streams, found.comments, found.deliveries) == (2, 5, 3)
    assert inferred([[("keepalive", 1.1), ("data", 1.3)]]) is None
    assert infer_interval(stream_frames("c", [("keepalive", 1.1), ("data", 1.3)]).iloc[0:0]) is None


def test_comments_of_one_delivery_only_measure_nothing_and_never_read_as_zero() -> None:
    batch = [("keepalive", 1.0 + n * BATCH_GAP_S / 4) for n in range(3)]
    assert inferred([[*batch, ("data", 1.2)]]) is None


def test_any_comment_measures_it_not_only_keep_alive() -> None:
    events = [("keepalive", 0.6), ("keepalive", 1.1), ("keepalive", 1.6), ("data", 1.7)]
    frames = stream_frames("a", events, comment="ping")
    found = infer_interval(frames)
    assert found is not None and found.interval == 0.5


def test_the_settings_record_how_and_the_line_says_it() -> None:
    found = inferred([server_comments(0.2, 10, 2)])
    assert found is not None
    recorded = found.as_settings()
    assert InferredInterval.from_settings(recorded) == found
    assert recorded["interval"] == 0.2 and recorded["most_comments_per_delivery"] == 2
    settings = {"keep_alive_interval": 0.2, "keep_alive_interval_source": INFERRED, "keep_alive_inferred": recorded}
    line = interval_line(settings)
    assert line is not None and line.startswith("keep-alive: every 0.2 s, inferred from 10 comments on 1 streams")
    assert "brought up to 2 comments at once" in line
    assert interval_line({**settings, "keep_alive_interval_source": "given"}) is None
    assert InferredInterval.from_settings(None) is None and InferredInterval.from_settings({"interval": 1}) is None
