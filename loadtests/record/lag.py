"""The harness's own lag: how late the load generator's event loop wakes a sleeping greenlet.

Times the harness takes when its greenlet runs (response headers, the openai SDK's chunks, raw
frames over TLS) carry the loop's delay: a loop that is blocked (a long call, a garbage
collection, the process waiting for a CPU) writes it down as the server's. Raw frames over plain
TCP carry the kernel's arrival stamp (``loadtests.client.kernel_stamps``), except frames that arrived
during one stall and were read together: they share the last one's stamp.

``LagMonitor`` runs one greenlet per Locust process that sleeps ``LAG_INTERVAL_S``
and records how late it woke: a sample ``(time, t_mono, lag_s)`` says the loop could not run
anything over ``[t_mono - lag_s, t_mono]``. Samples go to ``lag.parquet`` with the rows of the
same batch; ``lag_summary`` condenses them for summary.json and the ``harness_kept_up`` gate
judges them. Both read only the samples ``while_streams_open``: a stall before the first request
was sent (the process's setup, ``loop_hygiene.settle_after_setup``'s one full collection) or after
the last one ended moved no timing.

``worst_since(t)`` answers, for a request that opened at monotonic time ``t``, the worst lag seen
while it was open (``harness_lag_max_s`` on its row), including a stall still under way that the
monitor has not woken from yet. It keeps only the samples that are the largest from their time
onwards (a strictly decreasing list, lags rounded to 0.1 ms), so its memory does not grow with
the run. Invariant: memory holds the samples of one batch, never the run.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Mapping
from typing import Any

import gevent
import numpy as np
import pandas as pd
import pyarrow as pa

LAG_INTERVAL_S = 0.01
"""How often the monitor wakes: fine enough to see a 5 ms stall, 100 wakes a second per process."""
DEFAULT_LAG_LIMIT_MS = 5.0
"""The ``harness_kept_up`` gate's default: the p99 of each process's lag samples at most this."""
LAG_COLUMNS = ("worker", "time", "t_mono", "lag_s")
_LAG_FIELDS: list[tuple[str, pa.DataType]] = [  # typed: a literal's mixed DataTypes would join to object
    ("worker", pa.string()),
    ("time", pa.float64()),
    ("t_mono", pa.float64()),
    ("lag_s", pa.float64()),
]
LAG_SCHEMA = pa.schema(_LAG_FIELDS)
"""lag.parquet: the process (``local``, ``master``, ``worker-N``), wall-clock and monotonic time of
the wake, and how late it was (seconds)."""
_RESOLUTION_S = 1e-4


class LagMonitor:
    """Samples this process's scheduling delay while started. Not thread-safe: one per gevent loop."""

    def __init__(self, interval: float = LAG_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._due: float | None = None
        self._greenlet: gevent.Greenlet | None = None
        self._excused = False
        self._time: list[float] = []
        self._t_mono: list[float] = []
        self._lag: list[float] = []
        self._worst_at: list[float] = []
        """Wake times of the samples no later sample exceeds, ascending; ``_worst_lag`` strictly descending."""
        self._worst_lag: list[float] = []

    @property
    def running(self) -> bool:
        return self._greenlet is not None

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
            self._due = None

    def excuse_current_wait(self) -> None:
        """The loop was just blocked on purpose while no stream was open (``settle_after_setup`` at
        test start): the wake under way records no sample."""
        self._excused = True

    def _run(self) -> None:
        clock, interval = self._clock, self.interval
        while True:
            self._due = clock() + interval
            gevent.sleep(interval)
            now = clock()
            if self._excused:
                self._excused = False
                continue
            self.record(now, time.time(), max(0.0, now - self._due))

    def record(self, t_mono: float, wall: float, lag: float) -> None:
        """One sample: at ``t_mono`` (wall-clock ``wall``) the loop woke ``lag`` seconds late."""
        self._time.append(wall)
        self._t_mono.append(t_mono)
        self._lag.append(lag)
        rounded = round(lag / _RESOLUTION_S) * _RESOLUTION_S
        while self._worst_lag and self._worst_lag[-1] <= rounded:
            self._worst_at.pop()
            self._worst_lag.pop()
        self._worst_at.append(t_mono)
        self._worst_lag.append(rounded)

    def worst_since(self, since: float) -> float | None:
        """The worst lag (s) of any wake at or after monotonic ``since``, or of the stall under way
        now; None when the monitor is not running (nothing was measured)."""
        if self._due is None:
            return None
        index = bisect.bisect_left(self._worst_at, since)
        recorded = self._worst_lag[index] if index < len(self._worst_lag) else 0.0
        return max(recorded, self._clock() - self._due, 0.0)

    def take(self, worker: str) -> dict[str, list[Any]]:
        """The samples since the last call, as plain lists (msgpack-safe); removed from the monitor."""
        taken: dict[str, list[Any]] = {
            "worker": [worker] * len(self._lag),
            "time": self._time,
            "t_mono": self._t_mono,
            "lag_s": self._lag,
        }
        self._time, self._t_mono, self._lag = [], [], []
        return taken


def while_streams_open(lag: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The samples whose blocked window ``[time - lag_s, time]`` (wall clock) meets the span from the
    first request's start to the last one's end (``start_time + duration_s``); all of them when no
    request has both times, so a run that sent nothing is judged on what it has."""
    if lag.empty or requests.empty or "start_time" not in requests or "duration_s" not in requests:
        return lag
    starts = requests["start_time"]
    ends = starts + requests["duration_s"].fillna(0.0)
    if starts.isna().all():
        return lag
    first, last = starts.min(), ends.max()
    keep = (lag["time"] >= first) & (lag["time"] - lag["lag_s"] <= last)
    return lag[keep]


STALLED_COLUMN = "harness_stalled_s"
"""The column ``stalled_while_open`` fills on the requests a run is judged on (not stored in
requests.parquet: it is derived from lag.parquet each time)."""
RESOLUTION_COLUMN = "harness_resolution_s"
"""The column ``timing_resolution_s`` of the run's settings fills on the requests a run is judged on,
when the run read at a coarser timing resolution than every receive (``--timing-resolution-ms``):
a frame's stamp may then be up to that late. Not stored; absent (0) at the default resolution."""
STALL_FLOOR_S = 0.05
"""A wake at least this late counts as a stall in ``stalled_while_open``: far above the loop's
ordinary jitter (p99 of 1 to 26 ms, quiet box to busy one), below the shortest timing tolerance
a shipped gate relies on (0.12 s)."""


def stalled_while_open(requests: pd.DataFrame, lag: pd.DataFrame | None) -> pd.Series:
    """Per row of ``requests``, the seconds its worker's loop spent in stalls of at least
    ``STALL_FLOOR_S`` while the request was open (``start_time`` to ``start_time + duration_s``,
    wall clock): several stalls in one silence add up. Each sample ``(time, lag_s)`` blocked the
    loop over ``[time - lag_s, time]``; only the part inside the request's span counts. A whole
    machine that froze (seen with real vLLM on these VMs: no process ran for 0.3 to 10 s at a time,
    back to back) shows here as a long total made of stalls each shorter than a gate's tolerance.
    0 where nothing was measured."""
    stalled = pd.Series(0.0, index=requests.index, dtype="float64")
    if lag is None or lag.empty or requests.empty or "start_time" not in requests or "duration_s" not in requests:
        return stalled
    stalls = lag[lag["lag_s"] >= STALL_FLOOR_S]
    for worker, samples in stalls.groupby("worker", sort=False):
        rows = requests[(requests["worker"] == worker) & requests["start_time"].notna()]
        if rows.empty:
            continue
        ends = samples["time"].to_numpy(dtype="float64")
        order = ends.argsort()
        ends = ends[order]
        lags = samples["lag_s"].to_numpy(dtype="float64")[order]
        begins = ends - lags
        total = np.concatenate([[0.0], np.cumsum(lags)])
        opened = rows["start_time"].to_numpy(dtype="float64")
        closed = opened + rows["duration_s"].fillna(0.0).to_numpy(dtype="float64")
        first = np.searchsorted(ends, opened, side="right")  # the first stall ending after the open
        last = np.searchsorted(begins, closed, side="left")  # stalls [first, last) begin before the close
        seconds = total[last] - total[first]
        meets = last > first
        head = np.where(meets, np.clip(opened - begins[np.minimum(first, len(ends) - 1)], 0.0, None), 0.0)
        tail = np.where(meets, np.clip(ends[np.maximum(last - 1, 0)] - closed, 0.0, None), 0.0)
        stalled[rows.index] = np.clip(np.where(meets, seconds - head - tail, 0.0), 0.0, None)
    return stalled


def harness_stall_s(rows: pd.DataFrame) -> pd.Series:
    """Per row, how much of its time the harness could not see: its worst single stall
    (``harness_lag_max_s``, measured as it ran) or, when larger, all its stalls of at least
    ``STALL_FLOOR_S`` added up (``harness_stalled_s``, added when the run is judged), plus the
    timing resolution the run read at (``harness_resolution_s``, when it asked for one); 0 where
    nothing was measured. Every timing tolerance goes through this: a coarser resolution widens
    each by itself, and the default resolution (0) changes nothing."""
    if "harness_lag_max_s" in rows.columns:
        worst = pd.to_numeric(rows["harness_lag_max_s"], errors="coerce").astype("float64").fillna(0.0)
    else:
        worst = pd.Series(0.0, index=rows.index, dtype="float64")
    if STALLED_COLUMN in rows.columns:
        worst = worst.combine(pd.to_numeric(rows[STALLED_COLUMN], errors="coerce").fillna(0.0), max)
    if RESOLUTION_COLUMN in rows.columns:
        worst = worst + pd.to_numeric(rows[RESOLUTION_COLUMN], errors="coerce").fillna(0.0).clip(lower=0.0)
    return worst


def coarse_reads_s(rows: pd.DataFrame) -> float:
    """The timing resolution ``rows`` were read at (``harness_resolution_s``), 0 at the default."""
    if RESOLUTION_COLUMN not in rows.columns or rows.empty:
        return 0.0
    return float(pd.to_numeric(rows[RESOLUTION_COLUMN], errors="coerce").fillna(0.0).max())


def timing_resolution_s(settings: Mapping[str, Any]) -> float:
    """The timing resolution recorded in a run's settings (``timing_resolution_ms``), in seconds: 0
    for a run recorded before the option, or any value that is no finite number >= 0."""
    value = settings.get("timing_resolution_ms")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        return 0.0
    return float(value) / 1000.0


def explained_by_stall(rows: pd.DataFrame, miss_s: float | pd.Series) -> pd.Series:
    """The one rule for a timing the harness may have moved, which every timing gate and the cause
    rule read: per row, True when the harness stalled (``harness_stall_s``, its timing resolution
    included) at least ``miss_s`` seconds while it was open, so a figure that misses its rule by up
    to ``miss_s`` may be the harness's doing (a stamp taken late), not the server's or the proxy's."""
    return (harness_stall_s(rows) >= miss_s).astype(bool)


def lag_summary(lag: pd.DataFrame, limit_ms: float | None = None) -> dict[str, Any]:
    """``harness_lag_ms`` of summary.json: p50, p99 and max lag over every sample and the same per
    process (one overloaded worker is enough to distort its streams); with a ``limit_ms`` (the
    ``harness_kept_up`` gate's, when the user set one), the limit and the seconds the loop spent in
    stalls longer than it. Without one, no limit is reported: the lag is a measurement."""
    summary: dict[str, Any] = {
        **({} if limit_ms is None else {"limit_ms": limit_ms}),
        **_figures(lag["lag_s"], limit_ms),
    }
    summary["by_worker"] = {
        str(worker): _figures(rows["lag_s"], limit_ms) for worker, rows in lag.groupby("worker", sort=True)
    }
    return summary


def _figures(lag_s: pd.Series, limit_ms: float | None) -> dict[str, Any]:
    over: dict[str, Any] = {} if limit_ms is None else {"seconds_above_limit": 0.0}
    if lag_s.empty:
        return {"samples": 0, "p50": None, "p99": None, "max": None, **over}
    milliseconds = lag_s * 1000.0
    if limit_ms is not None:
        over["seconds_above_limit"] = round(float(lag_s[milliseconds > limit_ms].sum()), 3)
    return {
        "samples": len(lag_s),
        "p50": round(float(milliseconds.quantile(0.5)), 3),
        "p99": round(float(milliseconds.quantile(0.99)), 3),
        "max": round(float(milliseconds.max()), 3),
        **over,
    }
