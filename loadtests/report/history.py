"""Runs over nights: one row per run directory, and the nights that regressed against their past.

``python -m loadtests history DIR...`` reads run directories (soaks and plain runs) into
``History``: ``nights``, one row per run with the columns of ``NIGHT_COLUMNS`` and one per figure
of ``FIGURES``, ordered by start time; ``flags``, each night whose figure moved past its rolling
baseline (the median and MAD of the previous nights of the same series); ``left_out``, each
directory that could not be read and why. A series is one scenario on one server (and proxy):
nights of different series are never compared.

Invariants: a night is compared only with earlier nights of its own series; a figure a night lacks
(NaN) is neither flagged nor part of a baseline; a left-out directory costs no other night.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

Worse = Literal["up", "down"]
"""Which way a figure moves when the server gets worse."""


@dataclass(frozen=True)
class HistoryFigure:
    """A figure tracked over nights: its column in ``History.nights``, how it is shown, and which
    way is worse."""

    column: str
    label: str
    unit: str
    worse: Worse


FIGURES: tuple[HistoryFigure, ...] = (
    HistoryFigure("ttft_p50_s", "TTFT p50", "s", "up"),
    HistoryFigure("ttft_p99_s", "TTFT p99", "s", "up"),
    HistoryFigure("gap_p50_s", "inter-token gap p50", "s", "up"),
    HistoryFigure("gap_p99_s", "inter-token gap p99", "s", "up"),
    HistoryFigure("silence_over_interval", "longest silence / keep-alive interval", "x", "up"),
    HistoryFigure("keepalive_per_silent_s", "keep-alive frames per silent second", "/s", "down"),
    HistoryFigure("rate_http_5xx", "HTTP 5xx rate", "share", "up"),
    HistoryFigure("rate_inband_error", "in-band error rate", "share", "up"),
    HistoryFigure("rate_protocol_error", "protocol error rate", "share", "up"),
    HistoryFigure("rate_cut", "cut rate", "share", "up"),
    HistoryFigure("rate_timeout", "timeout rate", "share", "up"),
    HistoryFigure("rate_gateway_timeout", "gateway timeout rate", "share", "up"),
    HistoryFigure("rate_connect_error", "connect error rate", "share", "up"),
    HistoryFigure("harness_lag_p99_ms", "harness loop lag p99", "ms", "up"),
    HistoryFigure("server_waiting_p95", "server waiting requests p95", "requests", "up"),
    HistoryFigure("server_kv_cache_max", "server KV-cache usage max", "share", "up"),
    HistoryFigure("harness_peak_rss_mb", "harness peak memory", "MiB", "up"),
    HistoryFigure("server_peak_rss_mb", "server peak memory", "MiB", "up"),
)
"""Every figure a night has, in the page's order. A figure a run lacks is NaN."""

NIGHT_COLUMNS: tuple[str, ...] = (
    "series",  # "<scenario> on <server>" (+ " via <proxy>" when a proxy stood between)
    "scenario",
    "server",  # bundled, vllm, or the --host URL redacted
    "proxy",
    "run_dir",  # the directory's name
    "path",  # the directory as given
    "started_at",  # UTC pandas Timestamp, from manifest.json
    "kind",  # "soak" (windows judged) or "run"
    "version",  # the sse-soak version that wrote it, or "unknown"
    "verdict",  # PASS, FAIL or INCONCLUSIVE
    "gates_failed",  # names of the failed gates, comma-separated, "" when none
    "requests",  # requests seen
    "judged",  # requests judged
    "keep_alive_interval_s",
    "longest_silence_s",
)
"""The columns of ``History.nights`` that are not figures, in order."""


BASELINE_COLUMNS: tuple[str, ...] = (
    "series",
    "run_dir",
    "figure",  # a HistoryFigure.column
    "median",  # of the figure over the night's baseline nights; NaN while the baseline forms
    "mad",
    "nights",  # how many earlier nights the baseline holds (0 .. window)
    "limit",  # the value past which (the worse way) the night is flagged; NaN while the baseline forms
)
"""The columns of ``History.baselines``: one row per night and figure."""


@dataclass(frozen=True)
class Flag:
    """One regression: ``figure`` (a ``HistoryFigure.column``) of the night ``run_dir`` in
    ``series`` is ``value`` against a baseline of ``baseline_nights`` earlier nights whose median
    is ``baseline_median`` and MAD ``baseline_mad``; ``change`` is ``value - baseline_median``,
    ``score`` that change in robust standard deviations (1.4826 MAD), always in the worse direction."""

    series: str
    figure: str
    run_dir: str
    started_at: pd.Timestamp
    value: float
    baseline_median: float
    baseline_mad: float
    baseline_nights: int
    change: float
    score: float


@dataclass(frozen=True)
class LeftOut:
    """A directory the history could not read, as given, and why (one line)."""

    path: str
    why: str


@dataclass
class History:
    """The nights read, in start order, the regressions among them, and what was left out."""

    nights: pd.DataFrame
    flags: list[Flag] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    baselines: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(BASELINE_COLUMNS)))
    """Each night's baseline for each figure, long format (``BASELINE_COLUMNS``): what the flags
    were judged against, and what the page draws as the band a night may move in."""
    window: int = 14
    """How many previous nights of a series form a night's baseline."""
    sensitivity: float = 4.0
    """How many robust standard deviations a figure must move (the worse way) to be flagged."""
