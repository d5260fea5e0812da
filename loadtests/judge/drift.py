"""Drift over a long run: the run cut into windows, and gates on memory growth and latency drift.

Each window covers an equal share of the run (by request start time) and reports its error
counts, TTFT and gap percentiles, keep-alive cadence (keep-alive frames per second of silence
before the first token, about 1/interval when keep-alive works), the mean memory of the
harness and of the bundled server sampled during it and, when the server's metrics were scraped
(``loadtests.record.server_metrics``), its queue depth (waiting requests: mean and max) and running
requests (mean) over the scrapes in the window. Two gates, with defaults stated here:

- ``memory_growth``: fails when harness or server memory grows steadily: the last window is more
  than ``max_memory_growth`` (10%) above the second (the first is warm-up) AND memory rose in at
  least ``steady_share`` (75%) of the steps between consecutive windows;
- ``latency_drift``: fails when TTFT p50 of the last window exceeds the second window's (the first
  is warm-up, here too: a server's first requests, slot holders being sized to a ``--host``
  server's pace) by more than ``max_latency_drift`` (50%) and by at least ``min_latency_drift_s``
  (50 ms).

With fewer than three windows holding data both pass and say so. Both are ordinary gates
(``MemoryGrowth``, ``LatencyDrift``: stored with the run's gates, re-judged by ``python -m loadtests
report`` like any other); the soak job adds them to the run it watches.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from loadtests.client.outcome import Outcome
from loadtests.judge.gates import Gate, GateResult, RunTables, evaluate, run_point, unjudged, verdict_of
from loadtests.record import figures
from loadtests.record.server_metrics import concept_series

DRIFT_GATES = ("memory_growth", "latency_drift")


@dataclass(frozen=True)
class DriftLimits:
    """The drift gates' limits (the module docstring says what each means). These defaults are the
    soak options' own: ``loadtests.declare.options`` declares ``--windows``, ``--max-memory-growth``
    and ``--max-latency-drift`` with them."""

    windows: int = 10
    max_memory_growth: float = 0.10
    steady_share: float = 0.75
    max_latency_drift: float = 0.50
    min_latency_drift_s: float = 0.050

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class WindowJudge:
    """How each window is judged on its own: by the run's gates that judge requests alone
    (``Gate.judges_requests``), its point and its unjudged share, under the run's verdict rule."""

    gates: Sequence[Gate]
    point: Collection[str]
    max_unjudged_share: float

    def __call__(self, chunk: pd.DataFrame) -> dict[str, Any]:
        """``verdict`` of the window, with the gates that ``failed`` and the ``unjudged`` ones of its
        point (comma-separated, None when none): a window with no request is INCONCLUSIVE."""
        gates = [gate for gate in self.gates if gate.judges_requests]
        results = evaluate(RunTables(chunk), gates, self.max_unjudged_share)
        failed = [result.name for result in results if not result.passed and not result.skipped]
        point = run_point(self.point)  # the verdict's own rule: the unjudged named are those it counts
        unjudged = [result.name for result in results if result.skipped and result.name in point]
        return {
            "verdict": verdict_of(results, self.point, len(figures.judged(chunk))),
            "failed": ", ".join(failed) or None,
            "unjudged": ", ".join(unjudged) or None,
        }


def windows_table(
    requests: pd.DataFrame,
    resources: pd.DataFrame,
    count: int,
    server_metrics: pd.DataFrame | None = None,
    judge: WindowJudge | None = None,
) -> pd.DataFrame:
    """One row per window: its verdict (when ``judge`` is given), time span, error counts, latency,
    keep-alive cadence, memory, and the server's queue when ``server_metrics`` has rows."""
    if requests.empty:
        return pd.DataFrame()
    server = concept_series(server_metrics) if server_metrics is not None and not server_metrics.empty else None
    start, end = requests["start_time"].min(), (requests["start_time"] + requests["duration_s"]).max()
    edges = np.linspace(start, max(end, start + 1e-6), count + 1)
    index = np.clip(np.searchsorted(edges, requests["start_time"], side="right") - 1, 0, count - 1)
    rows = []
    for number in range(count):
        chunk = requests[index == number]
        row = {"window": number + 1, "start_s": edges[number] - start, "end_s": edges[number + 1] - start}
        if judge is not None:
            row.update(judge(chunk))
        row.update(_window_figures(chunk))
        row.update(_window_memory(resources, edges[number], edges[number + 1]))
        if server is not None:
            row.update(_window_server(server, edges[number], edges[number + 1]))
        rows.append(row)
    return pd.DataFrame(rows)


def _window_figures(chunk: pd.DataFrame) -> dict[str, Any]:
    judged = figures.judged(chunk)
    seen = judged[judged["keepalive_frames"].notna()]  # raw streams: the SDK cannot see comments
    silence = seen["silence_before_first_token_s"].fillna(0).clip(lower=0).sum()
    http_500, inband_500 = figures.count_500s(judged)
    return {
        "requests": len(judged),
        Outcome.OK.value: int((judged["outcome"] == Outcome.OK).sum()),
        "http_500": http_500,
        "inband_500": inband_500,
        Outcome.CUT.value: int((judged["outcome"] == Outcome.CUT).sum()),
        "ttft_p50_s": figures.quantile(judged["ttft_s"], 0.5),
        "ttft_p95_s": figures.quantile(judged["ttft_s"], 0.95),
        "max_gap_p99_s": figures.quantile(judged["max_gap_s"], 0.99),
        "keepalive_per_silent_s": float(seen["keepalive_frames"].sum() / silence) if silence > 0 else None,
    }


def _window_memory(resources: pd.DataFrame, start: float, end: float) -> dict[str, float | None]:
    if resources.empty:
        return {"harness_rss_mb": None, "server_rss_mb": None}
    inside = resources[(resources["t"] >= start) & (resources["t"] < end)]
    return {
        column: (float(inside[column].mean()) if inside[column].notna().any() else None)
        for column in ("harness_rss_mb", "server_rss_mb")
    }


def _window_server(series: pd.DataFrame, start: float, end: float) -> dict[str, float | None]:
    """The server's waiting (mean, max) and running (mean) requests over its scrapes in ``[start, end)``."""
    inside = series[(series.index >= start) & (series.index < end)]
    waiting, running = (inside.get(concept, pd.Series(dtype=float)).dropna() for concept in ("waiting", "running"))
    return {
        "server_waiting_mean": float(waiting.mean()) if len(waiting) else None,
        "server_waiting_max": float(waiting.max()) if len(waiting) else None,
        "server_running_mean": float(running.mean()) if len(running) else None,
    }


def memory_growth(windows: pd.DataFrame, limits: DriftLimits) -> GateResult:
    name = DRIFT_GATES[0]
    details, failed = [], False
    judged = 0
    for column, label in (("harness_rss_mb", "harness"), ("server_rss_mb", "server")):
        series = windows[column].dropna() if column in windows else pd.Series(dtype=float)
        if len(series) < 3:
            details.append(f"{label}: too few windows with samples ({len(series)})")
            continue
        judged += 1
        second, last = series.iloc[1], series.iloc[-1]
        growth = last / second - 1 if second else 0.0
        rises = float((series.diff().dropna() > 0).mean())
        steady = growth > limits.max_memory_growth and rises >= limits.steady_share
        failed |= steady
        details.append(f"{label} {second:.1f} -> {last:.1f} MiB ({growth:+.1%}, rose in {rises:.0%} of steps)")
    limit = f"limit +{limits.max_memory_growth:.0%} second->last window and rising in {limits.steady_share:.0%}"
    if not judged:
        return unjudged(name, "; ".join(details) + f": nothing to judge ({limit})")
    return GateResult(name, not failed, "; ".join(details) + f" ({limit})")


def latency_drift(windows: pd.DataFrame, limits: DriftLimits) -> GateResult:
    name = DRIFT_GATES[1]
    series = windows["ttft_p50_s"].dropna() if "ttft_p50_s" in windows else pd.Series(dtype=float)
    if len(series) < 3:
        return unjudged(name, f"too few windows with TTFT ({len(series)}, 3 needed): nothing to judge")
    # From the second window, as memory growth: the first holds the warm-up (a server's first
    # requests, slot holders being sized to a --host server's pace), which is no drift.
    first, last = series.iloc[1], series.iloc[-1]
    drift = last - first
    failed = drift > limits.min_latency_drift_s and (first <= 0 or drift / first > limits.max_latency_drift)
    detail = (
        f"TTFT p50 second window {first * 1000:.1f} ms, last {last * 1000:.1f} ms ({drift * 1000:+.1f} ms); "
        f"limit +{limits.max_latency_drift:.0%} and +{limits.min_latency_drift_s * 1000:.0f} ms"
    )
    return GateResult(name, not failed, detail)


@dataclass(frozen=True)
class _DriftGate(Gate):
    """A drift check as a gate over the run's requests and memory samples (``RunTables``); a base,
    never stored itself (its name starts with ``_``)."""

    limits: DriftLimits = field(default_factory=DriftLimits)
    name: str = "drift"
    judges_requests: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if isinstance(self.limits, dict):  # rebuilt from its spec in summary.json
            object.__setattr__(self, "limits", DriftLimits(**self.limits))

    def rule(self, windows: pd.DataFrame) -> GateResult:
        """The drift check over the run's windows; each drift gate names its own."""
        raise NotImplementedError

    def windows(self, tables: RunTables) -> pd.DataFrame:
        resources = tables.resources if tables.resources is not None else pd.DataFrame()
        return windows_table(tables.requests, resources, self.limits.windows)

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        """Over the requests alone: no memory samples, so memory growth passes on too few windows."""
        return self.evaluate_run(RunTables(requests))

    def evaluate_run(self, tables: RunTables) -> GateResult:
        """Unjudged, saying so, when there are no requests (so no windows) to judge."""
        windows = self.windows(tables)
        return self.rule(windows) if not windows.empty else unjudged(self.name, "no requests: no windows to judge")


@dataclass(frozen=True)
class MemoryGrowth(_DriftGate):
    name: str = DRIFT_GATES[0]

    def rule(self, windows: pd.DataFrame) -> GateResult:
        return memory_growth(windows, self.limits)


@dataclass(frozen=True)
class LatencyDrift(_DriftGate):
    name: str = DRIFT_GATES[1]

    def rule(self, windows: pd.DataFrame) -> GateResult:
        return latency_drift(windows, self.limits)


def drift_gates(limits: DriftLimits) -> list[_DriftGate]:
    return [MemoryGrowth(limits), LatencyDrift(limits)]


def soak_section(
    tables: RunTables,
    limits: DriftLimits,
    partial: bool,
    duration_s: float | None,
    server_metrics: pd.DataFrame | None = None,
    judge: WindowJudge | None = None,
) -> dict[str, Any]:
    """The summary's ``soak`` section: the drift windows of the run so far, each with its verdict
    when ``judge`` is given (and the server's queue when its metrics were scraped), and what judged
    the drift."""
    resources = tables.resources if tables.resources is not None else pd.DataFrame()
    windows = windows_table(tables.requests, resources, limits.windows, server_metrics, judge)
    records = windows.astype(object).where(windows.notna(), None).to_dict(orient="records")  # JSON null, not NaN
    return {"partial": partial, "duration_s": duration_s, "limits": limits.as_dict(), "windows": records}
