"""Runs over nights: one row per run directory, and the nights that regressed against their past.

``python -m loadtests history PATH...`` reads run directories (soaks and plain runs), directories of
run directories, and the ``history.parquet`` of an earlier history into ``History``: ``nights``, one
row per run with the columns of ``NIGHT_COLUMNS`` and one per figure of ``FIGURES``, ordered by start
time; ``baselines``, each night's baseline per figure; ``flags``, each night whose figure moved past
its baseline the worse way; ``left_out``, each input that could not be read and why. A series is one
scenario on one server (and proxy): nights of different series are never compared.

Reading a night takes the small files a nightly job can keep: ``manifest.json`` (when it started,
the version that wrote it), ``summary.json`` (read by ``Summary.read``: verdict, gates, outcomes,
latency, keep-alive, harness lag, server metrics) and ``resources.csv`` (a soak's memory, the peak
taken). A summary written before ``latency.token_gap_s`` or ``keepalive_per_stream.per_silent_s``
gets them from ``frames.parquet`` / ``requests.parquet`` when the directory still holds them (only
the columns needed), else they are NaN; any other figure an older summary lacks is NaN too.

The statistics (``regressions``): for each series, figure and night, the baseline is the previous
``window`` nights (default 14) of the series where the figure is present: their median and MAD
(median absolute deviation). With fewer than ``min_nights`` (default 5) the baseline is forming and
nothing is flagged. A night is flagged when its figure moved the worse way (``HistoryFigure.worse``)
past ``limit = median +/- sensitivity x scale`` (default sensitivity 4), the scale being one robust
standard deviation, ``max(1.4826 x MAD, floor)``, the floor the larger of ``RELATIVE_FLOOR`` (5%) of
the median and the unit's ``ABSOLUTE_FLOORS`` (1 ms for seconds, 0.5 ms for lag, 0.1 point for a
share, 0.05 for a ratio, 0.1/s for keep-alive per second, 0.5 request, 8 MiB), so a flat baseline
(MAD 0) does not flag noise. A flag's ``score`` is its change in that scale. A FAIL night (gates
failed) is no flag by itself: it is shown failed with its gates, and it stays in its successors'
baselines (the median is robust to one bad night).

A flag survives the harness's own measurement error: a timing figure's move must also exceed how far
the harness's timing error could move it (``Flag.timing_error``): the night's event-loop lag plus its
baseline nights' median lag (p99 for TTFT and gap percentiles, the longest stall for the longest
silence, over the keep-alive interval), each night's lag plus the timing resolution it read at
(``--timing-resolution-ms``, 0 by default). A move within it is kept in ``within_timing_error``, shown,
never a regression. And a figure's ``subject`` says whom it describes: the server's regressions fail
a nightly job (``fails_the_job``: on a series' newest night, or any with ``--fail-on-any``); the
harness's own (loop lag, its memory) are shown as harness changes, which a slower box makes, and
fail nothing.

Left out, each with a one-line why: a path that does not exist; a directory that is no run and
holds none; a manifest.json or summary.json that cannot be read (a summary this version cannot read
is named with the version that wrote it); a table the night needs that is cut or damaged; a run
that never wrote its summary (killed) or whose summary is only a soak's checkpoint: ``python -m
loadtests report DIR`` judges those (as interrupted, so FAIL), and the next history reads them.

Invariants: a night is compared only with earlier nights of its own series; a figure a night lacks
(NaN) is neither flagged nor part of a baseline; a left-out input costs no other night; a night
given twice (same series, ``run_dir`` and ``started_at``) is taken once, a run directory winning over a
carried row.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from loadtests.base.safe_text import redacted_url
from loadtests.errors import ManifestError, SummaryError, UnreadableTable
from loadtests.judge.summary import TOKEN_GAP, Summary, keepalive_per_stream, spread
from loadtests.record.figures import TOKEN_GAP_COLUMNS, token_gaps
from loadtests.record.lag import timing_resolution_s
from loadtests.record.run_dir import Manifest, RunDir

Worse = Literal["up", "down"]
"""Which way a figure moves when the server gets worse."""
Subject = Literal["server", "harness"]
"""What a figure describes: the server under test (its regressions fail a nightly job), or the
harness and the box it ran on (shown, never failing the job: a slower box is no slower server)."""
TimingError = Literal["none", "percentile", "longest"]
"""How far the harness's own timing error can move a figure: not at all; by the event-loop lag p99
(a percentile of times); by the lag's longest stall (the longest silence)."""


@dataclass(frozen=True)
class HistoryFigure:
    """A figure tracked over nights: its column in ``History.nights``, how it is shown, and which
    way is worse."""

    column: str
    label: str
    unit: str
    worse: Worse
    subject: Subject = "server"
    timing_error: TimingError = "none"


FIGURES: tuple[HistoryFigure, ...] = (
    HistoryFigure("ttft_p50_s", "TTFT p50", "s", "up", timing_error="percentile"),
    HistoryFigure("ttft_p99_s", "TTFT p99", "s", "up", timing_error="percentile"),
    HistoryFigure("gap_p50_s", "inter-token gap p50", "s", "up", timing_error="percentile"),
    HistoryFigure("gap_p99_s", "inter-token gap p99", "s", "up", timing_error="percentile"),
    HistoryFigure("silence_over_interval", "longest silence / keep-alive interval", "x", "up", timing_error="longest"),
    HistoryFigure("keepalive_per_silent_s", "keep-alive frames per silent second", "/s", "down"),
    HistoryFigure("rate_http_5xx", "HTTP 5xx rate", "share", "up"),
    HistoryFigure("rate_inband_error", "in-band error rate", "share", "up"),
    HistoryFigure("rate_protocol_error", "protocol error rate", "share", "up"),
    HistoryFigure("rate_cut", "cut rate", "share", "up"),
    HistoryFigure("rate_timeout", "timeout rate", "share", "up"),
    HistoryFigure("rate_gateway_timeout", "gateway timeout rate", "share", "up"),
    HistoryFigure("rate_connect_error", "connect error rate", "share", "up"),
    HistoryFigure("harness_lag_p99_ms", "harness loop lag p99", "ms", "up", subject="harness"),
    HistoryFigure("server_waiting_p95", "server waiting requests p95", "requests", "up"),
    HistoryFigure("server_kv_cache_max", "server KV-cache usage max", "share", "up"),
    HistoryFigure("harness_peak_rss_mb", "harness peak memory", "MiB", "up", subject="harness"),
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
    "harness_lag_max_ms",  # the longest event-loop stall: how far the longest silence may be the harness's
    "timing_resolution_ms",  # --timing-resolution-ms: how far coalesced reads may move any timing (0: none)
)
"""The columns of ``History.nights`` that are not figures, in order."""
OPTIONAL_NIGHT_COLUMNS = ("harness_lag_max_ms",)
"""Night columns an earlier history.parquet may lack: read as NaN (no timing error known)."""
ZERO_BEFORE_NIGHT_COLUMNS = ("timing_resolution_ms",)
"""Night columns an earlier history.parquet may lack that were 0 for every run before them: every
run read each receive as it came until ``--timing-resolution-ms`` existed."""


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
    ``score`` that change in robust standard deviations (1.4826 MAD, or the figure's floor when
    larger: see the module docstring), always in the worse direction."""

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
    timing_error: float = math.nan
    """How far the harness's own timing error could have moved the figure (in its unit): the
    night's event-loop lag plus its baseline's (p99 for a percentile, the longest stall for the
    longest silence), each with the timing resolution its reads were coalesced to. A move within
    it is no regression (``History.within_timing_error``); NaN for a figure no timing error moves,
    or a night whose lag is unknown."""


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
    min_nights: int = 5
    """Fewer earlier nights than this: the baseline is forming, and nothing is flagged."""
    within_timing_error: list[Flag] = field(default_factory=list)
    """Moves past the statistics' limit that the harness's own timing error explains: shown, never
    regressions (a verdict survives our own measurement error, and so does a flag)."""


DEFAULT_WINDOW = 14
DEFAULT_SENSITIVITY = 4.0
DEFAULT_MIN_NIGHTS = 5
MAD_TO_SD = 1.4826
"""MAD x this estimates the standard deviation of normal noise."""
RELATIVE_FLOOR = 0.05
"""The smallest robust standard deviation, as a share of the baseline's median."""
ABSOLUTE_FLOORS: dict[str, float] = {
    "s": 0.001,
    "ms": 0.5,
    "share": 0.001,
    "x": 0.05,
    "/s": 0.1,
    "requests": 0.5,
    "MiB": 8.0,
}
"""The smallest robust standard deviation of a figure, by its unit: a flat baseline (MAD 0) flags
only a move of more than ``sensitivity`` times this (and ``RELATIVE_FLOOR`` of its median)."""

HISTORY_FILE = "history.parquet"
FLAGS_FILE = "history-flags.parquet"
BASELINES_FILE = "history-baselines.parquet"
PAGE_FILE = "history.html"
FLAG_COLUMNS = tuple(Flag.__dataclass_fields__)
NEVER_JUDGED = "never judged (killed?): `python -m loadtests report {path}` judges it"
CHECKPOINT_ONLY = (
    "a soak's checkpoint, never judged to its end (killed, or still going?): `python -m loadtests report {path}` "
    "judges it"
)

_BY_COLUMN = {figure.column: figure for figure in FIGURES}
_RATE_PREFIX = "rate_"


def figure(column: str) -> HistoryFigure:
    """The figure of ``column``."""
    return _BY_COLUMN[column]


# -- reading -------------------------------------------------------------------------------------


def looks_like_run(path: Path) -> bool:
    """A directory a run wrote: it holds manifest.json or summary.json."""
    return (path / RunDir.MANIFEST).is_file() or (path / RunDir.SUMMARY).is_file()


def read_nights(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, list[LeftOut]]:
    """The nights of ``paths`` (run directories or their summary.json, directories of run
    directories, history.parquet files), one row each, de-duplicated and in start order, and each
    input left out with why."""
    rows: list[dict[str, Any]] = []
    carried: list[pd.DataFrame] = []
    left_out: list[LeftOut] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            left_out.append(LeftOut(str(given), "no such file or directory"))
        elif path.is_file() and path.name == RunDir.SUMMARY:  # a run's summary: its run directory
            _add(read_night(path.parent), rows, left_out)
        elif path.is_file():
            table = _carried(path)
            if isinstance(table, LeftOut):
                left_out.append(table)
            else:
                carried.append(table)
        elif looks_like_run(path):
            _add(read_night(path), rows, left_out)
        else:
            runs = sorted(child for child in _children(path) if looks_like_run(child))
            if not runs:
                left_out.append(
                    LeftOut(str(given), "not a run directory, and none of its subdirectories is one (no summary.json)")
                )
            for run in runs:
                _add(read_night(run), rows, left_out)
    return _joined(carried, rows), left_out


def _children(path: Path) -> list[Path]:
    try:
        return [child for child in path.iterdir() if child.is_dir()]
    except OSError:
        return []


def _add(night: dict[str, Any] | LeftOut, rows: list[dict[str, Any]], left_out: list[LeftOut]) -> None:
    if isinstance(night, LeftOut):
        left_out.append(night)
    else:
        rows.append(night)


def empty_nights() -> pd.DataFrame:
    columns = [*NIGHT_COLUMNS, *(f.column for f in FIGURES)]
    return pd.DataFrame(
        {column: pd.Series(dtype="float64" if column in _BY_COLUMN else "object") for column in columns}
    )


def _joined(carried: list[pd.DataFrame], rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Carried nights then read ones, a night given twice taken once (the read one), in start order."""
    read = pd.DataFrame(rows, columns=list(empty_nights().columns)) if rows else empty_nights()
    read["started_at"] = pd.to_datetime(read["started_at"], utc=True)
    frames = [frame for frame in [*carried, read] if not frame.empty] or [empty_nights()]
    nights = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].copy()
    nights["started_at"] = pd.to_datetime(nights["started_at"], utc=True)
    nights = nights.drop_duplicates(["series", "run_dir", "started_at"], keep="last")
    nights = nights.sort_values(["started_at", "run_dir"], kind="stable").reset_index(drop=True)
    for column in _BY_COLUMN:
        nights[column] = pd.to_numeric(nights[column], errors="coerce").astype("float64")
    for column in ("requests", "judged"):
        nights[column] = pd.to_numeric(nights[column], errors="coerce").astype("Int64")
    for column in ("keep_alive_interval_s", "longest_silence_s", "harness_lag_max_ms", "timing_resolution_ms"):
        nights[column] = pd.to_numeric(nights[column], errors="coerce").astype("float64")
    return nights


def _carried(path: Path) -> pd.DataFrame | LeftOut:
    """The nights of an earlier history's parquet table; a figure it predates reads as NaN."""
    try:
        table = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many kinds for a file that is no parquet or is cut
        return LeftOut(str(path), f"not a history.parquet this version reads ({_first_line(exc)})")
    for column in OPTIONAL_NIGHT_COLUMNS:
        if column not in table.columns:
            table[column] = math.nan
    for column in ZERO_BEFORE_NIGHT_COLUMNS:
        if column not in table.columns:
            table[column] = 0.0
    missing = [column for column in NIGHT_COLUMNS if column not in table.columns]
    if missing:
        return LeftOut(str(path), f"not a history table (no {', '.join(missing[:3])} column)")
    for column in _BY_COLUMN:
        if column not in table.columns:
            table[column] = math.nan
    return table[[*NIGHT_COLUMNS, *_BY_COLUMN]]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def read_night(path: Path) -> dict[str, Any] | LeftOut:
    """One night of the run directory ``path``: ``NIGHT_COLUMNS`` and every figure; or why not."""
    run = RunDir(path)
    try:
        manifest = run.read_manifest()
    except ManifestError as exc:
        return LeftOut(str(path), str(exc))
    version = (manifest.versions.get("sse-soak") if manifest else None) or "unknown"
    if not run.summary.is_file():
        return LeftOut(str(path), NEVER_JUDGED.format(path=path))
    try:
        summary = Summary.read(run.summary)
    except SummaryError as exc:  # a file this version cannot read as a summary is named with its writer's version
        said = (
            f" (written by sse-soak {version}; this version cannot read it)" if "not a run summary" in str(exc) else ""
        )
        return LeftOut(str(path), f"{exc}{said}")
    if summary.soak is not None and summary.soak.partial:
        return LeftOut(str(path), CHECKPOINT_ONLY.format(path=path))
    try:
        return _night(run, manifest, summary, version)
    except UnreadableTable as exc:
        return LeftOut(str(path), str(exc))
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # a section of a shape this version never wrote
        return LeftOut(
            str(path),
            f"{run.summary}: not a run summary this version reads ({_first_line(exc)}) (written by sse-soak {version})",
        )


def _night(run: RunDir, manifest: Manifest | None, summary: Summary, version: str) -> dict[str, Any]:
    settings = summary.settings or (manifest.settings if manifest else {})
    scenario = summary.scenario or (manifest.scenario if manifest else run.path.name.rsplit("-", 1)[0])
    host = settings.get("host")
    server = redacted_url(str(host)) if host else str(settings.get("server") or "bundled")
    proxy = str(settings.get("proxy") or "none")
    series = f"{scenario} on {server}" + (f" via {proxy}" if proxy != "none" else "")
    started = manifest.started_at if manifest else None
    latency = summary.latency
    interval = _number(settings.get("keep_alive_interval"))
    longest = _number(latency.get("max_gap_s", {}).get("max"))
    gaps = latency.get(TOKEN_GAP) or _token_gap_figures(run)
    judged_count = summary.requests_judged
    night: dict[str, Any] = {
        "series": series,
        "scenario": scenario,
        "server": server,
        "proxy": proxy,
        "run_dir": run.path.name,
        "path": str(run.path),
        "started_at": _started(started, run.path),
        "kind": "soak" if summary.soak is not None and summary.soak.windows else "run",
        "version": version,
        "verdict": summary.verdict,
        "gates_failed": ", ".join(gate.name for gate in summary.gates if not gate.passed and not gate.skipped),
        "requests": summary.requests,
        "judged": judged_count,
        "keep_alive_interval_s": interval,
        "longest_silence_s": longest,
        "ttft_p50_s": _number(latency.get("ttft_s", {}).get("p50")),
        "ttft_p99_s": _number(latency.get("ttft_s", {}).get("p99")),
        "gap_p50_s": _number(gaps.get("p50")),
        "gap_p99_s": _number(gaps.get("p99")),
        "silence_over_interval": longest / interval if interval and interval > 0 else math.nan,
        "keepalive_per_silent_s": _keepalive_per_silent_s(run, summary),
    }
    for column in _BY_COLUMN:
        if column.startswith(_RATE_PREFIX):
            outcome = column.removeprefix(_RATE_PREFIX)
            count = summary.outcomes.get(outcome)
            night[column] = count / judged_count if count is not None and judged_count > 0 else math.nan
    lag = summary.harness_lag_ms
    night["harness_lag_p99_ms"] = _number(lag.p99 if lag is not None else None)
    night["harness_lag_max_ms"] = _number(lag.max if lag is not None else None)
    night["timing_resolution_ms"] = timing_resolution_s(settings) * 1000.0
    metrics = (
        summary.server_metrics if summary.server_metrics is not None and summary.server_metrics.available else None
    )
    night["server_waiting_p95"] = _number((metrics.waiting or {}).get("p95")) if metrics else math.nan
    night["server_kv_cache_max"] = _number((metrics.kv_cache_usage or {}).get("max")) if metrics else math.nan
    night.update(_peak_memory(run))
    return night


def _number(value: Any) -> float:
    """A figure as a float; NaN for None, a missing figure or anything not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value) if math.isfinite(value) else math.nan


def _started(stated: str | None, path: Path) -> pd.Timestamp:
    """When the run started, in UTC: as its manifest states it; for a run without a manifest (or
    one whose time is no time), from its name (``<scenario>-<UTC stamp>``), else its summary's
    modification time."""
    if stated:
        try:
            return pd.Timestamp(pd.to_datetime(stated, utc=True))
        except ValueError:
            pass
    stamp = path.name.rsplit("-", 1)[-1]
    try:
        return pd.Timestamp(pd.to_datetime(stamp, format="%Y%m%dT%H%M%SZ", utc=True))
    except ValueError:
        return pd.Timestamp(os.stat(path / RunDir.SUMMARY).st_mtime, unit="s", tz="UTC")


def _token_gap_figures(run: RunDir) -> dict[str, Any]:
    """A summary written before ``latency.token_gap_s``: the gaps from frames.parquet (its columns
    ``TOKEN_GAP_COLUMNS`` only), empty when the directory no longer holds it."""
    if not run.frames.exists():
        return {}
    return spread(token_gaps(_read(run.frames, lambda: run.read_frames(TOKEN_GAP_COLUMNS))))


KEEPALIVE_COLUMNS = ["status", "keepalive_frames", "silence_before_first_token_s", "silence_from_send_s"]


def _keepalive_per_silent_s(run: RunDir, summary: Summary) -> float:
    """Keep-alive frames per second of silence before the first token (``per_silent_s``); a summary
    written before it: from requests.parquet's ``KEEPALIVE_COLUMNS`` when the directory holds it."""
    section = summary.keepalive_per_stream
    if section.keys is None or "per_silent_s" in section.keys:
        return _number(section.per_silent_s)
    if not run.requests.exists():
        return math.nan
    requests = _read(run.requests, lambda: run.read_requests(KEEPALIVE_COLUMNS))
    return _number(keepalive_per_stream(requests).get("per_silent_s"))


def _read(path: Path, read: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """``read()`` of the table at ``path``; ``UnreadableTable`` naming it when it is cut or damaged."""
    try:
        return read()
    except Exception as exc:  # pyarrow and pandas raise many kinds for a file cut short
        raise UnreadableTable(f"{path}: cannot be read ({_first_line(exc)})") from None


def _peak_memory(run: RunDir) -> dict[str, float]:
    """The highest RSS of the harness and of the server in resources.csv (soaks); NaN without it."""
    peaks = {"harness_peak_rss_mb": math.nan, "server_peak_rss_mb": math.nan}
    if not run.resources.exists():
        return peaks
    samples = _read(run.resources, run.read_resources)
    for column, figure_column in (("harness_rss_mb", "harness_peak_rss_mb"), ("server_rss_mb", "server_peak_rss_mb")):
        if column in samples.columns:
            values = pd.to_numeric(samples[column], errors="coerce").dropna()
            peaks[figure_column] = float(values.max()) if len(values) else math.nan
    return peaks


# -- the statistics ------------------------------------------------------------------------------


def floor(figure_: HistoryFigure, median: float) -> float:
    """The smallest robust standard deviation of ``figure_`` around ``median``."""
    return max(RELATIVE_FLOOR * abs(median), ABSOLUTE_FLOORS.get(figure_.unit, 0.0))


def _median(values: list[float]) -> float:
    """The median of a few values (numpy's costs more than the sort for a baseline's 14)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def regressions(
    nights: pd.DataFrame,
    window: int = DEFAULT_WINDOW,
    sensitivity: float = DEFAULT_SENSITIVITY,
    min_nights: int = DEFAULT_MIN_NIGHTS,
) -> tuple[pd.DataFrame, list[Flag], list[Flag]]:
    """Each night's baseline per figure (``BASELINE_COLUMNS``), the flags (module docstring), and
    the moves past the limit that the harness's own timing error explains (never flags)."""
    rows: list[tuple[Any, ...]] = []
    flags: list[Flag] = []
    within: list[Flag] = []
    for series, group in nights.groupby("series", sort=False):
        run_dirs = group["run_dir"].tolist()
        started = group["started_at"].tolist()
        errors = {kind: _timing_errors(group, kind, window) for kind in ("percentile", "longest")}
        for figure_ in FIGURES:
            values = group[figure_.column].to_numpy(dtype="float64")
            present: list[float] = []
            for index, value in enumerate(values):
                base = present[-window:]
                if len(base) >= min_nights:
                    median = _median(base)
                    mad = _median([abs(x - median) for x in base])
                    scale = max(MAD_TO_SD * mad, floor(figure_, median))
                    limit = median + sensitivity * scale if figure_.worse == "up" else median - sensitivity * scale
                    rows.append((series, run_dirs[index], figure_.column, median, mad, len(base), limit))
                    worse = (value - median) if figure_.worse == "up" else (median - value)
                    if not math.isnan(value) and worse > sensitivity * scale:
                        error = errors[figure_.timing_error][index] if figure_.timing_error != "none" else math.nan
                        found = Flag(
                            str(series), figure_.column, run_dirs[index], started[index], float(value),
                            median, mad, len(base), float(value - median), worse / scale, error,
                        )  # fmt: skip
                        (within if worse <= error else flags).append(found)
                else:
                    rows.append((series, run_dirs[index], figure_.column, math.nan, math.nan, len(base), math.nan))
                if not math.isnan(value):
                    present.append(float(value))
    baselines = pd.DataFrame(rows, columns=list(BASELINE_COLUMNS))
    baselines["nights"] = baselines["nights"].astype("int64")

    def order(flag: Flag) -> tuple[Any, ...]:
        return (flag.started_at, flag.series, flag.figure)

    return baselines, sorted(flags, key=order), sorted(within, key=order)


def _timing_errors(group: pd.DataFrame, kind: str, window: int) -> list[float]:
    """Per night of one series, how far the harness's timing error can move a figure of ``kind``
    between that night and its baseline: the night's lag plus the median lag of its previous
    ``window`` nights (each side is good only to its own lag), in the figure's unit. The lag is the
    p99 for a percentile, the longest stall for the longest silence (over the keep-alive interval,
    as that figure is), each night's plus the timing resolution it read at (``timing_resolution_ms``:
    coalesced reads may move any stamp by that much). NaN where a night's lag is unknown: nothing is
    then excused."""
    lag_ms = group["harness_lag_p99_ms" if kind == "percentile" else "harness_lag_max_ms"].to_numpy(dtype="float64")
    if "timing_resolution_ms" in group.columns:
        lag_ms = lag_ms + np.nan_to_num(group["timing_resolution_ms"].to_numpy(dtype="float64"), nan=0.0)
    per = group["keep_alive_interval_s"].to_numpy(dtype="float64") if kind == "longest" else None
    errors: list[float] = []
    for index, lag in enumerate(lag_ms):
        earlier = [x for x in lag_ms[max(0, index - window) : index] if not math.isnan(x)]
        error_s = (lag + (_median(earlier) if earlier else lag)) / 1000.0
        errors.append(error_s / per[index] if per is not None else error_s)
    return errors


def read_history(
    paths: Iterable[str | Path],
    window: int = DEFAULT_WINDOW,
    sensitivity: float = DEFAULT_SENSITIVITY,
    min_nights: int = DEFAULT_MIN_NIGHTS,
) -> History:
    """The history of ``paths``: nights read, baselines and flags computed."""
    nights, left_out = read_nights(paths)
    baselines, flags, within = regressions(nights, window, sensitivity, min_nights)
    return History(nights, flags, left_out, baselines, window, sensitivity, min_nights, within)


def newest_flags(history: History) -> list[Flag]:
    """The flags of each series' newest night."""
    newest = history.nights.groupby("series")["run_dir"].last().to_dict()
    return [flag for flag in history.flags if newest.get(flag.series) == flag.run_dir]


def fails_the_job(flag: Flag, newest: bool, any_night: bool = False) -> bool:
    """Whether ``flag`` fails a nightly job: a regression of the server (not of the harness or its
    box) on its series' newest night, or on any night when asked (``--fail-on-any``)."""
    return figure(flag.figure).subject == "server" and (newest or any_night)


# -- writing and reading back ---------------------------------------------------------------------


def write_history(history: History, out: Path) -> None:
    """``history.parquet`` (the nights), ``history-flags.parquet`` (``FLAG_COLUMNS``) and
    ``history-baselines.parquet`` (``BASELINE_COLUMNS``) into ``out``, each atomically."""
    out.mkdir(parents=True, exist_ok=True)
    flags = pd.DataFrame([flag.__dict__ for flag in history.flags], columns=list(FLAG_COLUMNS))
    for name, table in (
        (HISTORY_FILE, history.nights),
        (FLAGS_FILE, flags),
        (BASELINES_FILE, history.baselines),
    ):
        _write_atomically(table, out / name)


def _write_atomically(table: pd.DataFrame, path: Path) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        table.to_parquet(temporary, index=False)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def load_history(out: Path) -> History:
    """The history ``write_history`` wrote into ``out`` (its left-out inputs are not kept)."""
    nights = pd.read_parquet(out / HISTORY_FILE)
    flags_table = pd.read_parquet(out / FLAGS_FILE)
    flags = [Flag(**{key: row[key] for key in FLAG_COLUMNS}) for row in flags_table.to_dict("records")]
    return History(nights, flags, [], pd.read_parquet(out / BASELINES_FILE))


# -- what the console says ------------------------------------------------------------------------


def shown(value: float, unit: str) -> str:
    """A figure in its unit, for a person."""
    if math.isnan(value):
        return "-"
    if unit == "s":
        return f"{value * 1000:.1f} ms"
    if unit == "ms":
        return f"{value:.1f} ms"
    if unit == "share":
        return f"{value:.2%}"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "/s":
        return f"{value:.2f}/s"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:.1f} {unit}"


NEWEST = ", the newest night"


def flag_line(flag: Flag, newest: bool) -> str:
    """``regression: <series>: <figure> on <night> ...`` in one line (``harness change:`` for a
    figure of the harness or its box, which is no regression of the server)."""
    figure_ = figure(flag.figure)
    kind = "regression" if figure_.subject == "server" else "harness change"
    percent = f"{flag.change / abs(flag.baseline_median):+.0%}" if flag.baseline_median else "from 0"
    when = pd.Timestamp(flag.started_at).strftime("%Y-%m-%d %H:%M")
    return (
        f"{kind}: {flag.series}: {figure_.label} on {flag.run_dir} ({when}{NEWEST if newest else ''}):"
        f" {shown(flag.value, figure_.unit)} against a baseline median of {shown(flag.baseline_median, figure_.unit)}"
        f" ({percent}, {flag.score:.1f} robust SDs, over {flag.baseline_nights} nights)"
    )


def summary_line(history: History, out_page: Path) -> str:
    """The history's last line: nights, series, regressions, what was left out, the page."""
    nights = len(history.nights)
    series = history.nights["series"].nunique()
    server = sum(figure(flag.figure).subject == "server" for flag in history.flags)
    said = f"history: {nights} night{'s' * (nights != 1)} in {series} series, {server} regression(s)"
    if len(history.flags) > server:
        said += f", {len(history.flags) - server} harness change(s)"
    if history.within_timing_error:
        said += f", {len(history.within_timing_error)} move(s) within the harness's timing error"
    if history.left_out:
        said += f", {len(history.left_out)} left out"
    return f"{said}: {out_page}"
