"""The server's keep-alive interval as its comments show it, robust to a proxy that batches them.

A server sends a comment after each whole interval of idleness (its timer restarts at every chunk),
so only the spacing between comments with no data between them measures the interval. A proxy may
deliver several comments at once: HAProxy with its defaults holds each write ~200 ms, so the
comments of a 0.2 s server arrive in pairs, their gaps alternating near 0 and 0.4 s. The median gap
then reads 2x the truth, or 0 (a "keep-alive off" interval) when more gaps are near 0.

So comments are grouped into deliveries: a comment that follows the previous one by less than
``BATCH_GAP_S`` arrived with it. Each delivery after the first of a run of comments says how long
its comments took to come: the time since the previous delivery, divided by the comments it
brought (k comments delivered together cover k intervals). The interval is the median of those
figures over every run of every stream. Invariants: never 0 nor negative; a batch of k comments
never reads as k intervals; a harness stall that merged comments into one read changes nothing
(they count as one delivery of several); a few server stalls move the median by nothing.

``infer_interval`` reads frames.parquet's ``request_id``, ``seq``, ``kind`` and ``t_s``
(``INFERENCE_COLUMNS``); it runs where the run is judged, once, never on the load's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from loadtests.judge.gates import INFERRED

INFERENCE_COLUMNS = ["request_id", "seq", "kind", "t_s"]
"""The columns of frames.parquet that ``infer_interval`` reads."""
BATCH_GAP_S = 0.02
"""Comments closer than this arrived in one delivery (a proxy's batch lands within a few ms; no
server paces keep-alive that fast: vLLM's interval is whole seconds)."""


@dataclass(frozen=True)
class InferredInterval:
    """An interval inferred from comments, and what it was inferred from."""

    interval: float
    """Seconds; always > 0."""
    comments: int
    """Comments in the runs of comments that measured it."""
    streams: int
    """Streams those runs were in."""
    deliveries: int
    """Deliveries that measured it (each after the first of its run)."""
    batched: int
    """Of all deliveries in those runs, the ones that brought more than one comment."""
    most_per_delivery: int
    """The most comments one delivery brought."""

    @property
    def source(self) -> str:
        """How it was found, as the gate and console lines say it."""
        return f"inferred from {self.comments} comments on {self.streams} streams{self.batching}"

    @property
    def batching(self) -> str:
        """The batching seen, as a clause ("" when every comment arrived alone)."""
        if not self.batched:
            return ""
        return (
            f"; {self.batched} deliveries brought up to {self.most_per_delivery} comments at once (an intermediary "
            "batched them: the interval is the time per comment, not the gap between arrivals)"
        )

    def as_settings(self) -> dict[str, Any]:
        """What summary.json's settings record of it (``keep_alive_inferred``, beside
        ``keep_alive_interval`` and ``keep_alive_interval_source: inferred``)."""
        return {
            "interval": self.interval,
            "comments": self.comments,
            "streams": self.streams,
            "deliveries": self.deliveries,
            "batched_deliveries": self.batched,
            "most_comments_per_delivery": self.most_per_delivery,
            "batch_gap_s": BATCH_GAP_S,
        }

    @classmethod
    def from_settings(cls, recorded: Any) -> InferredInterval | None:
        """The inference a run's settings recorded (``as_settings``); None when they hold none."""
        if not isinstance(recorded, dict):
            return None
        try:
            return cls(
                float(recorded["interval"]),
                int(recorded["comments"]),
                int(recorded["streams"]),
                int(recorded["deliveries"]),
                int(recorded["batched_deliveries"]),
                int(recorded["most_comments_per_delivery"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def interval_line(settings: dict[str, Any]) -> str | None:
    """The console's line on an interval the run inferred (how, from what, any batching seen); None
    when the run was told it (given, or the server it started)."""
    found = InferredInterval.from_settings(settings.get("keep_alive_inferred"))
    if settings.get("keep_alive_interval_source") != INFERRED or found is None:
        return None
    return f"keep-alive: every {found.interval:g} s, {found.source}; every gate and line judges this interval"


def infer_interval(frames: pd.DataFrame) -> InferredInterval | None:
    """The server's keep-alive interval as the comments in ``frames`` show it (module docstring);
    None when no run of comments held two deliveries."""
    if frames.empty:
        return None
    ordered = frames.sort_values(["request_id", "seq"], kind="stable")
    ids = ordered["request_id"].to_numpy()
    comment = (ordered["kind"] == "keepalive").to_numpy()
    times = ordered["t_s"].to_numpy(dtype="float64")
    new_stream = np.r_[True, ids[1:] != ids[:-1]]
    # a run of comments: consecutive comments of one stream, no other frame between them
    run_start = comment & (new_stream | ~np.r_[False, comment[:-1]])
    run = np.cumsum(run_start)
    gap = np.r_[np.inf, np.diff(times)]
    delivery_start = run_start | (comment & (gap >= BATCH_GAP_S))
    delivery = np.cumsum(delivery_start)
    rows = pd.DataFrame({"run": run[comment], "delivery": delivery[comment], "t": times[comment], "id": ids[comment]})
    if rows.empty:
        return None
    deliveries = rows.groupby("delivery", sort=True).agg(run=("run", "first"), t=("t", "last"), count=("t", "size"))
    since = deliveries["t"].diff()
    measuring = deliveries["run"].eq(deliveries["run"].shift())  # not the first delivery of its run
    per_comment = (since / deliveries["count"])[measuring & (since > 0)]
    if per_comment.empty:
        return None
    runs = set(deliveries.loc[per_comment.index, "run"])
    used = deliveries[deliveries["run"].isin(runs)]
    interval = max(round(float(per_comment.median()), 3), 0.001)
    return InferredInterval(
        interval=interval,
        comments=int(used["count"].sum()),
        streams=int(rows.loc[rows["run"].isin(runs), "id"].nunique()),
        deliveries=len(per_comment),
        batched=int((used["count"] > 1).sum()),
        most_per_delivery=int(used["count"].max()),
    )
