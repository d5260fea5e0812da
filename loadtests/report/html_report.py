"""``report.html``: the page a person reads after a run, and ``requests.csv`` for spreadsheets.

The parquet files and ``summary.json`` are for programs; this page answers, in order, what a
person asks after a soak: did it pass and why (the gates), what happened to the requests (outcome
and status counts), how fast (percentiles), what the wire looked like (gaps between frames, keep-
alive against silence, a timeline), whether the load generator kept up (its own lag), what the
server saw (its queue and KV cache, from its ``/metrics``), and which streams to look at first
(the worst ones, frame by frame). Frame-level parts may come from a sample of the ``ok`` streams;
the page says so.

The timeline, the harness lag and the server's metrics share one time axis (``_run_axis``): seconds
since the run's first request, over the span of its requests.

Invariant: ``report.html`` is one self-contained file. Plots are PNGs embedded as base64 data URIs,
the CSS is inline, there is no script and no external URL, so it opens from disk, from an archive
or attached to a ticket. Every piece of text from the run is HTML-escaped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from loadtests.client.outcome import OUTCOMES, Outcome, RequestRow
from loadtests.judge.causes import raw_silences, run_proxy, run_timer
from loadtests.judge.gates import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNJUDGED,
    Gate,
    GateResult,
    HarnessKeptUp,
    KeepAliveCovered,
    NoProxyTimeouts,
    gate_is_noise,
)
from loadtests.judge.summary import LATENCY_COLUMNS, HarnessLag, ServerMetrics, Soak, Summary, arrival_line
from loadtests.record import figures
from loadtests.record.recorder import FRAME_COLUMNS
from loadtests.record.run_dir import RunDir
from loadtests.record.server_metrics import concept_series
from loadtests.report import html_parts
from loadtests.report.html_parts import MISSING, count_tick, plain_log_ticks, seconds_tick
from loadtests.report.html_parts import empty as _empty
from loadtests.report.html_parts import missing as _missing
from loadtests.report.html_parts import number as _number
from loadtests.report.html_parts import png as _png
from loadtests.report.html_parts import section as _section
from loadtests.report.html_parts import text as _text
from loadtests.report.html_parts import write_atomically as _write_atomically

OUTCOME_COLOURS: dict[str, str] = {  # Outcome members are the strings the tables hold
    Outcome.OK: "#2e7d32",
    Outcome.REJECTED: "#9e9e9e",
    Outcome.HTTP_5XX: "#d32f2f",
    Outcome.GATEWAY_TIMEOUT: "#e65100",
    Outcome.INBAND_ERROR: "#7b1fa2",
    Outcome.CUT: "#ef6c00",
    Outcome.TIMEOUT: "#795548",
    Outcome.CONNECT_ERROR: "#000000",
    Outcome.PROTOCOL_ERROR: "#ad1457",
    Outcome.HARNESS_ERROR: "#4a148c",
    Outcome.STOPPED: "#81d4fa",
}
OTHER_COLOUR = "#607d8b"
REQUEST_COLUMNS = tuple(RequestRow.__dataclass_fields__)
DATA_KINDS = ("data", "error", "done")
GAP_FLOOR_S = 1e-4
FRAMES_PER_STREAM = 40
READ_LATE_SHOWN_S = 0.001
"""A frame whose bytes waited this long in the kernel before the harness read them is marked in its chip."""
KEEPALIVE_STEP_POINTS = 4000
"""Samples of the keep-alive plot's stepped minimum: its steps land within 1/4000 of the axis."""
FIGSIZE = (8.0, 3.5)
DPI = 100

CSS = (
    html_parts.CSS
    + """tr.total td { font-weight: 600; background: #fafafa; }
ul.gates { list-style: none; padding: 0; margin: 6px 0; }
ul.gates li { margin: 3px 0; padding: 3px 8px; border-left: 4px solid; }
li.gate.pass { border-color: #2e7d32; } li.gate.fail { border-color: #c62828; background: #ffebee; }
li.gate.unjudged { border-color: #ef6c00; background: #fff3e0; }
.badge { display: inline-block; min-width: 38px; text-align: center; font-weight: 700; color: #fff;
         border-radius: 3px; padding: 0 4px; margin-right: 4px; }
li.pass .badge { background: #2e7d32; } li.fail .badge { background: #c62828; }
li.unjudged .badge { background: #ef6c00; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
.outcome { font-weight: 600; white-space: nowrap; }
tbody.stream { border-top: 2px solid #9e9e9e; }
td.frames { background: #fcfcfc; font: 11px/1.6 ui-monospace, Menlo, Consolas, monospace; }
span.frame { display: inline-block; border: 1px solid #ddd; border-radius: 3px; padding: 0 4px; margin: 1px 2px; }
span.k-keepalive { background: #e3f2fd; } span.k-comment { background: #f3e5f5; }
span.k-error { background: #f3e5f5; border-color: #7b1fa2; } span.k-done { background: #e8f5e9; }
td.settings-value { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
"""
)


def write_html_report(
    directory: Path,
    summary: Summary,
    requests: pd.DataFrame,
    frames: pd.DataFrame,
    lag: pd.DataFrame | None = None,
    server_metrics: pd.DataFrame | None = None,
) -> Path:
    """Write ``directory / "report.html"`` and return its path; ``lag`` is the run's lag.parquet,
    ``server_metrics`` its server_metrics.parquet. Figures the summary holds (the verdict, counts,
    latency percentiles) are shown from it, never computed again; plots read the tables."""
    requests = _with_columns(requests, REQUEST_COLUMNS)
    frames = _with_columns(frames, FRAME_COLUMNS)
    sample_rate = summary.frame_sample_rate
    sections = [
        _headline_section(summary, requests, sample_rate),
        _outcome_section(requests),
        _timing_section(summary),
        _gap_section(summary, requests, frames, sample_rate),
        _keepalive_section(summary, requests),
        _timeline_section(requests),
        _lag_section(summary, requests, lag),
        _server_section(summary, requests, server_metrics),
        _worst_section(requests, frames, sample_rate),
    ]
    if summary.soak:
        sections.insert(1, _soak_section(summary.soak))
    title = f"sse-soak: {summary.scenario or 'run'}"
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_text(title)}</title>'
        f"<style>{CSS}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
    path = Path(directory) / RunDir.REPORT
    _write_atomically(path, lambda temporary: temporary.write_text(page, encoding="utf-8"))
    return path


def write_requests_csv(directory: Path, requests: pd.DataFrame) -> Path:
    """Write ``directory / "requests.csv"`` (the request table, same columns) and return its path."""
    path = Path(directory) / RunDir.REQUESTS_CSV
    _write_atomically(path, lambda temporary: requests.to_csv(temporary, index=False))
    return path


# --- plumbing --------------------------------------------------------------------------------


def _with_columns(table: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    missing = [column for column in columns if column not in table.columns]
    return table.assign(**{column: pd.Series(np.nan, index=table.index, dtype=object) for column in missing})


def _keep_alive_interval(settings: dict[str, Any]) -> float | None:
    """The run's keep-alive interval; None when keep-alive is off or unknown."""
    interval = _number(settings.get("keep_alive_interval"))
    return interval if interval is not None and interval > 0 else None


def _seconds(value: Any) -> str:
    number = None if _missing(value) else _number(value)
    return MISSING if number is None else f"{number:.4f}"


def _integer(value: Any) -> str:
    number = None if _missing(value) else _number(value)
    return MISSING if number is None else str(int(number))


def _colour(outcome: str) -> str:
    return OUTCOME_COLOURS.get(outcome, OTHER_COLOUR)


def _outcome_label(outcome: Any) -> str:
    name = "" if _missing(outcome) else str(outcome)
    return f'<span class="outcome" style="color:{_colour(name)}">{_text(outcome)}</span>'


def _outcome_order(present: Sequence[Any]) -> list[str]:
    names = {str(outcome) for outcome in present if not _missing(outcome)}
    return [outcome for outcome in OUTCOMES if outcome in names] + sorted(names - set(OUTCOMES))


def _sample_note(sample_rate: float) -> str:
    if sample_rate >= 1.0:
        return ""
    return (
        f'<p class="note">Frame-level plots and tables come from a sample: {sample_rate * 100:g}% of the ok '
        "streams kept their frames; streams whose outcome is not ok are always kept.</p>"
    )


def _figure() -> tuple[Figure, Axes]:
    figure = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    return figure, figure.add_subplot()


# --- 1. headline -----------------------------------------------------------------------------


def _headline_section(summary: Summary, requests: pd.DataFrame, sample_rate: float) -> str:
    word = summary.verdict  # the console's own word (loadtests.judge.gates: PASS, FAIL, INCONCLUSIVE)
    verdict = f'<div class="verdict {word.lower()}">{_text(word)}</div>'
    count = summary.requests
    outcomes = summary.outcomes
    seen = ", ".join(f"{n} {name}" for name, n in outcomes.items() if n) or "none"
    body = (
        f"{verdict}{_ending(summary)}<p><b>{_text(count)}</b> requests ({_text(seen)}){_run_span(requests)}</p>"
        f"{_arrival(summary)}{_coverage(summary)}{_sample_note(sample_rate)}"
        f"<h3>Gates</h3>{_gate_list(summary.gates, summary.point_names)}"
        f"<h3>Causes</h3>{''.join(f'<p>{_text(line)}</p>' for line in summary.causes_lines())}"
        f"<h3>Settings</h3>{_settings_table(summary.settings)}"
    )
    how = (
        f"The verdict is {FAIL} when a gate below failed or the run was interrupted (a signal ended it before its "
        f"planned duration); {INCONCLUSIVE} when nothing failed but the run could not judge its point (no request "
        f"finished, a gate of the scenario's point had nothing to judge: {UNJUDGED}, or more of the run's requests "
        f"than --max-unjudged-share were lost or never sent); {PASS} otherwise. The coverage line sets the requests "
        "judged against those Locust, the server and the schedule counted. Each gate line gives its figure, in the "
        "words the console prints."
    )
    return _section(f"sse-soak run: {summary.scenario or 'run'}", how, body, level=1)


def _arrival(summary: Summary) -> str:
    """Open loop: the rate asked against the rate achieved, as the console says it."""
    section = summary.arrival
    if section is None:
        return ""
    try:
        line = arrival_line(section)
    except (KeyError, TypeError, ValueError):
        return ""  # a summary written by hand or by another version: nothing to show rather than no report
    return f'<p class="arrival">{_text(line.removeprefix("arrivals: "))}</p>'


def _coverage(summary: Summary) -> str:
    """What the verdict covers (judged of seen, by source), as the console says it."""
    if summary.coverage is None:
        return ""
    try:
        line = summary.coverage.line()
    except (KeyError, TypeError, ValueError):
        return ""  # a summary written by hand or by another version: nothing to show rather than no report
    return f'<p class="coverage">{_text(line.removeprefix("coverage: "))}</p>'


def _ending(summary: Summary) -> str:
    """How the run ended: interrupted (a failed verdict whatever the gates say), or just how."""
    if summary.interrupted:
        return f"<p><b>Interrupted: {_text(summary.interrupted)}</b></p>"
    return f"<p>Ended: {_text(summary.ended)}</p>" if summary.ended else ""


def _run_span(requests: pd.DataFrame) -> str:
    starts = pd.to_numeric(requests["start_time"], errors="coerce").dropna()
    if starts.empty:
        return ""
    ends = starts + pd.to_numeric(requests["duration_s"], errors="coerce").reindex(starts.index).fillna(0.0)
    began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(starts.min())))
    return f", started {began}, {float(ends.max() - starts.min()):.1f} s from the first request to the last end"


def _gate_list(gates: Sequence[GateResult], point: Collection[str]) -> str:
    """Each gate's line, but those ``gate_is_noise`` (unjudged on nothing, and not the run's point):
    they are named once below the list, and ``summary.json`` keeps them whole."""
    if not gates:
        return _empty("No gates were evaluated.")
    noise = [gate.name for gate in gates if gate_is_noise(gate, point)]
    lines = []
    for gate in gates:
        if gate_is_noise(gate, point):
            continue
        word = gate.word
        lines.append(
            f'<li class="gate {word.lower()}"><span class="badge">{_text(word)}</span> '
            f"<b>{_text(gate.name)}</b>: {_text(gate.detail)}</li>"
        )
    quiet = (
        _empty(f"Not shown (nothing to judge in this run, and not its point; kept in summary.json): {', '.join(noise)}")
        if noise
        else ""
    )
    return '<ul class="gates">' + "".join(lines) + "</ul>" + quiet


def _settings_table(settings: dict[str, Any]) -> str:
    if not settings:
        return _empty("No settings recorded.")
    rows = "".join(
        f'<tr><th>{_text(key)}</th><td class="settings-value">{_text(value)}</td></tr>'
        for key, value in settings.items()
    )
    return f"<table>{rows}</table>"


# --- 2. outcomes and statuses ----------------------------------------------------------------


def _outcome_section(requests: pd.DataFrame) -> str:
    how = (
        "Each row counts the requests of one route and truncation setting by outcome; "
        "the status table below counts HTTP statuses with the most frequent error each came with."
    )
    if requests.empty:
        return _section("Outcomes by route and truncation", how, _empty("No requests were recorded."))
    return _section("Outcomes by route and truncation", how, _outcome_table(requests) + _status_table(requests))


def _truncation_labels(values: pd.Series) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers.map(lambda v: "none" if pd.isna(v) else str(int(v))).astype(object)


def _row_key(key: tuple[str, str]) -> tuple[str, bool, int]:
    route, truncation = key
    return (route, truncation == "none", 0 if truncation == "none" else int(truncation))


def _outcome_table(requests: pd.DataFrame) -> str:
    keys = pd.DataFrame(
        {
            "route": requests["route"].astype(object).where(requests["route"].notna(), MISSING),
            "truncation": _truncation_labels(requests["truncate_prompt_tokens"]),
            "outcome": requests["outcome"].astype(object).where(requests["outcome"].notna(), MISSING),
        }
    )
    counts = keys.groupby(["route", "truncation", "outcome"]).size()
    outcomes = _outcome_order(list(keys["outcome"].unique()))
    header = "".join(
        f'<th><span class="swatch" style="background:{_colour(o)}"></span>{_text(o)}</th>' for o in outcomes
    )
    rows = []
    for route, truncation in sorted({key[:2] for key in counts.index}, key=_row_key):
        numbers = [int(counts.get((route, truncation, o), 0)) for o in outcomes]
        cells = "".join(
            f'<td class="num" data-outcome="{_text(o)}">{n}</td>' for o, n in zip(outcomes, numbers, strict=True)
        )
        total = sum(numbers)
        rows.append(
            f'<tr data-route="{_text(route)}" data-truncation="{_text(truncation)}"><td>{_text(route)}</td>'
            f'<td>{_text(truncation)}</td>{cells}<td class="num">{total}</td></tr>'
        )
    totals = "".join(
        f'<td class="num" data-outcome="{_text(o)}">{int((keys["outcome"] == o).sum())}</td>' for o in outcomes
    )
    rows.append(
        f'<tr class="total" data-route="all"><td>all</td><td></td>{totals}<td class="num">{len(keys)}</td></tr>'
    )
    return (
        f'<table class="outcomes"><tr><th>route</th><th>truncate_prompt_tokens</th>{header}<th>total</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def _error_summary(rows: pd.DataFrame) -> str:
    parts = rows[["error_code", "error_param", "error_message"]].astype(object)
    texts = [
        " / ".join(_clip(str(value)) for value in row if not _missing(value))
        for row in parts.itertuples(index=False, name=None)
    ]
    texts = [text for text in texts if text]
    if not texts:
        return MISSING
    common = pd.Series(texts).value_counts()
    return f"{_text(common.index[0])} ({int(common.iloc[0])} times)"


def _clip(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status_table(requests: pd.DataFrame) -> str:
    status = pd.to_numeric(requests["status"], errors="coerce")
    labels = status.map(lambda v: "no response" if pd.isna(v) else str(int(v))).astype(object)
    rows = []
    for label in sorted(labels.unique(), key=lambda s: (s == "no response", s)):
        group = requests[labels == label]
        outcomes = ", ".join(f"{n} {o}" for o, n in group["outcome"].value_counts().items())
        rows.append(
            f'<tr data-status="{_text(label)}"><td>{_text(label)}</td><td class="num">{len(group)}</td>'
            f"<td>{_text(outcomes)}</td><td>{_error_summary(group)}</td></tr>"
        )
    return (
        '<table class="statuses"><tr><th>HTTP status</th><th>requests</th><th>outcomes</th>'
        "<th>most frequent error (code / param / message)</th></tr>" + "".join(rows) + "</table>"
    )


# --- 3. timing percentiles -------------------------------------------------------------------


def _timing_section(summary: Summary) -> str:
    header = "".join(f"<th>p{p}</th>" for p in figures.PERCENTILES)
    rows = "".join(_timing_row(column, summary.latency.get(column, {})) for column in LATENCY_COLUMNS)
    table = f'<table class="timings"><tr><th>seconds</th>{header}<th>max</th><th>count</th></tr>{rows}</table>'
    how = (
        "Seconds since each request was sent, over the requests that have the value (rejected ones have no "
        "TTFT); max_gap_s counts any bytes the client saw (for raw streams what a proxy sees; the openai SDK sees no "
        "comments, so for its streams it is the longest wait between chunks), max_data_gap_s data frames only (what a "
        "user sees)."
    )
    return _section("Latency percentiles", how, table)


def _timing_row(column: str, entry: dict[str, float | int | None]) -> str:
    """One timing's percentiles, max and count as the summary holds them (``summary.latency``)."""
    keys = (*(f"p{p}" for p in figures.PERCENTILES), "max")
    cells = "".join(f'<td class="num">{_seconds(entry.get(key))}</td>' for key in keys)
    count = _integer(entry.get("count", 0))
    return f'<tr data-metric="{column}"><th>{column}</th>{cells}<td class="num">{count}</td></tr>'


# --- 4. gaps between frames ------------------------------------------------------------------


@dataclass(frozen=True)
class GapSamples:
    """The gap histogram's curves, in seconds. The raw client sees every byte, comments included;
    the openai SDK sees only the chunks it yields, so its gaps are a curve apart: its first chunk's
    wait may have been filled with keep-alive comments it never saw."""

    any_bytes: np.ndarray
    """``gap_s`` of every frame of the raw streams: the silences a proxy's read timeout measures."""
    data_only: np.ndarray
    """Between consecutive data, error and done frames of one raw stream: what a user waits."""
    sdk_chunks: np.ndarray
    """``gap_s`` of every chunk of the SDK streams, the first one's from the send."""

    @property
    def empty(self) -> bool:
        return not (self.any_bytes.size or self.data_only.size or self.sdk_chunks.size)


def _gap_samples(frames: pd.DataFrame, requests: pd.DataFrame) -> GapSamples:
    """The gap curves of ``frames``, kept apart by whether each stream's client sees comments."""
    raw_ids = requests.loc[figures.sees_comments(requests), "request_id"]
    sdk_ids = requests.loc[~figures.sees_comments(requests), "request_id"]
    raw = frames[frames["request_id"].isin(raw_ids)]
    data = raw[raw["kind"].isin(DATA_KINDS)].sort_values(["request_id", "seq"])
    arrivals = pd.to_numeric(data["t_s"], errors="coerce")
    return GapSamples(
        any_bytes=_gaps(raw),
        data_only=arrivals.groupby(data["request_id"]).diff().dropna().to_numpy(dtype=float),
        sdk_chunks=_gaps(frames[frames["request_id"].isin(sdk_ids)]),
    )


def _gaps(frames: pd.DataFrame) -> np.ndarray:
    return pd.to_numeric(frames["gap_s"], errors="coerce").dropna().to_numpy(dtype=float)


def _gap_section(summary: Summary, requests: pd.DataFrame, frames: pd.DataFrame, sample_rate: float) -> str:
    samples = _gap_samples(frames, requests)
    how = (
        "Counts of gaps by length on log axes. Raw streams (their client sees comments): the any-bytes curve, "
        "every frame keep-alive comments included, is what a proxy's read timeout sees; the data-only curve what a "
        "user sees (where they coincide the thin line lies on the thick one); keep-alive moves the proxy's tail "
        "left. The openai SDK cannot see comments, so its streams are a dashed curve of their own, the gaps between "
        "the chunks it yielded, the first from the send: a long first-chunk wait there may have been covered by "
        "keep-alive the SDK never saw. The vertical lines are the keep-alive interval and, when a proxy timer was "
        f"in force, the read timeout no_proxy_timeouts judges. Gaps under {GAP_FLOOR_S:g} s (one read) are counted "
        "at that floor."
    )
    title = "Gaps between frames"
    if samples.empty:
        return _section(title, how, _sample_note(sample_rate) + _empty("No frames were recorded."))
    figure = _gap_figure(samples, _gap_interval(summary), _read_timeout(summary))
    return _section(title, how, _sample_note(sample_rate) + _png(figure))


def _gap_figure(samples: GapSamples, interval: float | None, read_timeout: float | None) -> Figure:
    curves = (  # drawn in this order, each over the one before: the thin and dashed ones stay visible
        (samples.any_bytes, "raw streams, any bytes (frames.gap_s)", "#64b5f6", 3.2, "-"),
        (samples.data_only, "raw streams, data only (data/error/done)", "#e65100", 1.2, "-"),
        (samples.sdk_chunks, "openai SDK streams, chunks (sees no comments)", "#7b1fa2", 1.4, "--"),
    )
    shown = [(np.maximum(values, GAP_FLOOR_S), *style) for values, *style in curves if values.size]
    both = np.concatenate([values for values, *_ in shown])
    low, high = float(both.min()), float(both.max())
    high = max(high * 1.05, low * 10, read_timeout or 0.0, interval or 0.0)
    bins = np.logspace(math.log10(low), math.log10(high * 1.05), 60)
    figure, axes = _figure()
    for order, (values, label, colour, width, style) in enumerate(shown):
        axes.hist(
            values,
            bins=bins.tolist(),
            histtype="step",
            linewidth=width,
            linestyle=style,
            color=colour,
            label=f"{label}, n={values.size}",
            zorder=2 + order,
        )
    if interval is not None:
        axes.axvline(
            interval, color="#2e7d32", linestyle="--", linewidth=1, label=f"keep-alive interval {interval:g} s"
        )
    if read_timeout is not None:
        axes.axvline(
            read_timeout, color="#c62828", linestyle=":", linewidth=1.2, label=f"proxy read timeout {read_timeout:g} s"
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    plain_log_ticks(axes.xaxis, seconds_tick)
    plain_log_ticks(axes.yaxis, count_tick)
    axes.set_xlabel("gap between consecutive frames (log scale)")
    axes.set_ylabel("frames (log scale)")
    axes.grid(True, which="major", alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=8)
    return figure


def _gap_interval(summary: Summary) -> float | None:
    """The keep-alive interval the run's gate judged (perhaps inferred from its comments), else the settings'."""
    gate = _keepalive_gate(summary)
    return None if gate is None else gate.interval


def _read_timeout(summary: Summary) -> float | None:
    """The proxy read timeout in force, as the causes judged it (``causes.proxy_timeouts``: the
    timeout the proxy runs, Apache's 1.5 s as 2 s); for a summary written before that figure, the
    ``no_proxy_timeouts`` gate's when the run declares it, else the settings' when the run started a
    proxy, each as its kind runs it."""
    judged = _number((summary.causes.proxy_timeouts or {}).get("read_timeout_s"))
    if judged is not None and judged > 0:
        return judged
    settings = summary.settings
    for spec in summary.gate_specs:
        if spec.get("type") == NoProxyTimeouts.__name__:
            timeout = _number(spec.get("read_timeout"))
            timer = run_timer(timeout, spec.get("proxy") or settings.get("proxy"))
            if timer is not None and timer.runs_s > 0:
                return timer.runs_s
    timeout = _number(settings.get("proxy_read_timeout"))
    started = run_proxy(settings.get("proxy")) is not None
    timer = run_timer(timeout, settings.get("proxy")) if started else None
    return timer.runs_s if timer is not None and timer.runs_s > 0 else None


# --- 5. keep-alive against silence -----------------------------------------------------------


def _keepalive_gate(summary: Summary) -> KeepAliveCovered | None:
    """The run's ``keepalive_covered`` gate as it was judged (its interval may have been inferred from
    the comments); else one at the settings' interval; None when keep-alive is off or unknown."""
    for spec in summary.gate_specs:
        if spec.get("type") != KeepAliveCovered.__name__:
            continue
        try:
            gate = Gate.from_spec(spec)
        except (TypeError, ValueError):
            continue  # a summary of another version: fall back to the settings
        if isinstance(gate, KeepAliveCovered) and gate.interval:
            return gate
    interval = _keep_alive_interval(summary.settings)
    return None if interval is None else KeepAliveCovered(interval)


def _keepalive_section(summary: Summary, requests: pd.DataFrame) -> str:
    gate = _keepalive_gate(summary)
    if gate is None:
        expected = "keep-alive is off or its interval unknown, so no count is required"
    else:
        expected = (
            f"the stepped line is the fewest frames the {gate.name} gate accepts: one per whole {gate.period:.2f} s "
            f"of silence (keep-alive every {gate.interval:g} s + {gate.tolerance:.2f} s tolerance), "
            "so a dot under it at a long silence is a stream the gate fails (unless the harness stalled then)"
        )
    raw, silence = raw_silences(requests)  # the gate's own streams and silences
    points = pd.DataFrame(
        {"x": silence, "y": pd.to_numeric(raw["keepalive_frames"], errors="coerce"), "outcome": raw["outcome"]}
    ).dropna(subset=["x", "y"])
    status = pd.to_numeric(requests["status"], errors="coerce")
    sdk = int(((status == 200) & ~figures.sees_comments(requests)).sum())
    how = (
        "Each dot is a raw 200 stream: the silence from its send to its first token (x) against the keep-alive "
        f"frames it received (y); {expected}. Only streams whose client sees comments are drawn: the openai SDK "
        f"cannot see them, so its streams have no keep-alive count ({sdk} SDK streams left out)."
    )
    title = "Keep-alive frames against silence before the first token"
    if points.empty:
        return _section(title, how, _empty("No raw stream got response headers, so there is no silence to plot."))
    return _section(title, how, _png(_keepalive_figure(points, gate)))


def _keepalive_figure(points: pd.DataFrame, gate: KeepAliveCovered | None) -> Figure:
    figure, axes = _figure()
    for outcome in _outcome_order(list(points["outcome"].unique())):
        group = points[points["outcome"].astype(object) == outcome]
        axes.scatter(
            group["x"],
            group["y"],
            s=16,
            alpha=0.6,
            color=_colour(outcome),
            edgecolors="none",
            label=f"{outcome} ({len(group)})",
        )
    if gate is not None:
        right = max(float(points["x"].max()), gate.period) * 1.02
        xs = np.linspace(0.0, right, KEEPALIVE_STEP_POINTS)
        axes.plot(
            xs,
            gate.required_frames(pd.Series(xs)).to_numpy(),
            drawstyle="steps-post",
            linestyle="--",
            color="#424242",
            linewidth=1,
            label=f"{gate.name} minimum:\nfloor(silence / {gate.period:.2f} s)",
        )
    axes.set_xlabel("silence from the send to the first token (s)")
    axes.set_ylabel("keep-alive frames in the stream")
    axes.set_ylim(bottom=-0.5, top=max(float(points["y"].max()), 1.0) + 0.5)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=8)
    return figure


# --- 6. timeline -----------------------------------------------------------------------------


def _timeline_section(requests: pd.DataFrame) -> str:
    how = (
        "Each horizontal segment is one request from its start to its end (x, seconds since the run's first "
        "request), one row per request in start order (earliest at the top), coloured by outcome; very short "
        "requests are drawn with a minimum visible length and later outcomes in the legend are drawn on top."
    )
    spans = pd.DataFrame(
        {
            "start": pd.to_numeric(requests["start_time"], errors="coerce"),
            "duration": pd.to_numeric(requests["duration_s"], errors="coerce").fillna(0.0).clip(lower=0.0),
            "outcome": requests["outcome"].astype(object),
        }
    ).dropna(subset=["start"])
    axis = _run_axis(requests)
    if spans.empty or axis is None:
        return _section("Timeline of requests by outcome", how, _empty("No requests to draw."))
    return _section("Timeline of requests by outcome", how, _png(_timeline_figure(spans, axis)))


@dataclass(frozen=True)
class RunAxis:
    """The time axis the timeline, lag and server plots share: seconds since ``origin`` (the first
    request's start, epoch s), drawn over the requests' span (``extent`` s) with a 1% margin."""

    origin: float
    extent: float

    @property
    def limits(self) -> tuple[float, float]:
        return -self.extent * 0.01, self.extent * 1.01


def _run_axis(requests: pd.DataFrame) -> RunAxis | None:
    """The run's time axis; None without a request start to put it on."""
    starts = pd.to_numeric(requests["start_time"], errors="coerce")
    present = starts.notna()
    if not present.any():
        return None
    origin = float(starts[present].min())
    durations = pd.to_numeric(requests["duration_s"], errors="coerce").fillna(0.0).clip(lower=0.0)
    return RunAxis(origin, max(float((starts[present] + durations[present]).max()) - origin, 1e-3))


def _timeline_figure(spans: pd.DataFrame, axis: RunAxis) -> Figure:
    spans = spans.sort_values("start", kind="stable").reset_index(drop=True)
    begin = spans["start"] - axis.origin
    end = np.maximum(begin + spans["duration"], begin + axis.extent * 0.006)  # every span visible
    figure = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] + 1.0), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    width = min(4.0, max(1.2, 300.0 / len(spans)))
    for outcome in _outcome_order(list(spans["outcome"].unique())):
        mask = spans["outcome"] == outcome
        axes.hlines(
            spans.index[mask],
            begin[mask],
            end[mask],
            colors=_colour(outcome),
            linewidth=width,
            label=f"{outcome} ({int(mask.sum())})",
        )
    axes.set_xlim(axis.limits)
    axes.set_ylim(len(spans) - 0.5, -0.5)
    axes.set_xlabel("seconds since the first request")
    axes.set_ylabel("request (by start)")
    axes.grid(True, axis="x", alpha=0.3)
    legend = figure.legend(loc="outside right upper", fontsize=8)
    for handle in legend.legend_handles:
        if isinstance(handle, Line2D | LineCollection):  # a span's handle: drawn thicker than its span
            handle.set_linewidth(4.0)
    return figure


# --- 7. harness lag --------------------------------------------------------------------------

LAG_PLOT_BINS = 1000
"""The lag plot draws the worst sample of each of this many time bins per process."""


def _lag_limit(summary: Summary) -> float | None:
    """The ``harness_kept_up`` gate's limit in ms when the run judged it (``--harness-lag-limit-ms``);
    None when the gate was off and the lag only measured."""
    for spec in summary.gate_specs:
        if spec.get("type") == HarnessKeptUp.__name__:
            limit = _number(spec.get("limit_ms"))
            if limit is not None and limit > 0:
                return limit
    limit = _number(summary.harness_lag_ms.limit_ms if summary.harness_lag_ms is not None else None)
    return limit if limit is not None and limit > 0 else None


NO_LAG_LIMIT = "no limit set: harness_kept_up is off (--harness-lag-limit-ms)"


def _lag_section(summary: Summary, requests: pd.DataFrame, lag: pd.DataFrame | None) -> str:
    title = "Harness lag"
    lag_figures = summary.harness_lag_ms or HarnessLag()
    limit = _lag_limit(summary)
    threshold = (
        f"the dashed red line is the harness_kept_up gate's limit of {limit:g} ms, which each process's p99 (its "
        "dotted line) must not exceed"
        if limit
        else f"{NO_LAG_LIMIT}, so the lag is a measurement only; each process's p99 is its dotted line"
    )
    how = (
        "How late the load generator's own event loop woke a greenlet that sleeps 10 ms, per process (the worst "
        "sample of each time bin), on the timeline's time axis. While the loop is late, a frame time it records "
        "may be late too: those stalls are the harness's, not the server's (each request's worst is its "
        "harness_lag_max_s, and a timing gate leaves a request it could not time unjudged rather than failed); "
        f"{threshold}."
    )
    if lag is None or lag.empty:
        return _section(title, how, _empty("No lag samples were recorded."))
    over = ("seconds_above_limit",) if limit else ()
    by_worker = lag_figures.by_worker or {}
    rows = "".join(
        f'<tr><td>{_text(worker)}</td><td class="num">{_integer(f["samples"])}</td>'
        + "".join(f'<td class="num">{_text(f.get(key))}</td>' for key in ("p50", "p99", "max", *over))
        + "</tr>"
        for worker, f in by_worker.items()
    )
    over_head = f"<th>s in stalls over {limit:g} ms</th>" if limit else ""
    table = (
        "<table><thead><tr><th>process</th><th>samples</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th>"
        f"{over_head}</tr></thead>{rows}</table>"
    )
    p99 = {str(worker): f["p99"] for worker, f in by_worker.items() if _number(f.get("p99")) is not None}
    return _section(title, how, table + _png(_lag_figure(lag, _run_axis(requests), limit, p99)))


def _lag_figure(
    lag: pd.DataFrame, axis: RunAxis | None, limit_ms: float | None, p99_ms: dict[str, float] | None = None
) -> Figure:
    """On the run's axis; without requests, from the first sample over all of them. The gate's limit
    is a dashed line inside the plot, or the plot says no limit was set; ``p99_ms`` (by process, as
    the summary holds it) are dotted lines in each process's colour."""
    figure, axes = _figure()
    seconds = lag["time"] - (axis.origin if axis else float(lag["time"].min()))
    width = max((float(seconds.max()) - float(seconds.min())) / LAG_PLOT_BINS, 1e-3)
    binned = lag.assign(bin=(seconds // width) * width, lag_ms=lag["lag_s"] * 1000.0)
    top = float(binned["lag_ms"].max())
    for worker, rows in binned.groupby("worker", sort=True):
        worst = rows.groupby("bin")["lag_ms"].max()
        (line,) = axes.plot(worst.index, worst.to_numpy(), linewidth=0.8, label=str(worker))
        p99 = (p99_ms or {}).get(str(worker))
        if p99 is not None:
            axes.axhline(p99, color=line.get_color(), linestyle=":", linewidth=1.2, label=f"{worker} p99 {p99:.3g} ms")
    if limit_ms:
        axes.axhline(
            limit_ms, color="#c0392b", linestyle="--", linewidth=1.2, label=f"harness_kept_up limit {limit_ms:g} ms"
        )
        top = max(top, limit_ms)
    else:
        axes.text(0.01, 0.97, NO_LAG_LIMIT, transform=axes.transAxes, va="top", fontsize=8, color="#555")
    if axis is not None:
        axes.set_xlim(axis.limits)
    axes.set_xlabel("seconds since the first request")
    axes.set_ylabel("loop lag (ms)")
    axes.set_yscale("symlog", linthresh=1.0)
    plain_log_ticks(axes.yaxis, lambda value, _position: f"{value:g}")
    axes.set_ylim(bottom=0.0, top=max(top, 1.0) * 2.0)  # the limit always inside, with room for the note
    axes.grid(True, alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=8)
    return figure


# --- 8. the server's metrics ----------------------------------------------------------------------

_SERVER_FIGURES = (
    ("running", "running requests"),
    ("waiting", "waiting requests"),
    ("kv_cache_usage", "KV-cache usage"),
)


def _server_section(summary: Summary, requests: pd.DataFrame, metrics: pd.DataFrame | None) -> str:
    title = "Server: queue and KV cache"
    how = (
        "What the server said about itself at GET /metrics, scraped by the harness every --server-metrics-interval "
        "seconds: requests "
        "running, requests waiting for a slot and, when the server exposes it, the share of its KV cache in use, "
        "each in its own panel on the timeline's time axis. Waiting requests are queueing the server does, not the "
        "harness."
    )
    section = summary.server_metrics or ServerMetrics()
    series = concept_series(metrics) if metrics is not None and not metrics.empty else pd.DataFrame()
    if not section.available or series.columns.intersection([panel[0] for panel in SERVER_PANELS]).empty:
        reason = section.reason or "the run recorded no server metrics"
        return _section(title, how, _empty(f"No server metrics: {reason}."))
    rows = "".join(
        f"<tr><td>{_text(label)}</td>"
        + "".join(
            f'<td class="num">{_text((section.concept(concept) or {}).get(key))}</td>' for key in ("mean", "p95", "max")
        )
        + "</tr>"
        for concept, label in _SERVER_FIGURES
        if section.concept(concept)
    )
    tokens = ", ".join(
        f"{label} {section.concept(concept):g}"
        for concept, label in (("prompt_tokens", "prompt tokens"), ("generation_tokens", "generated tokens"))
        if section.concept(concept) is not None
    )
    table = (
        f"<p>{_text(section.scrapes)} scrapes{_text(f'; during the run: {tokens}') if tokens else ''}</p>"
        f"<table><thead><tr><th>figure</th><th>mean</th><th>p95</th><th>max</th></tr></thead>{rows}</table>"
    )
    return _section(title, how, table + _png(_server_figure(series, _run_axis(requests))))


SERVER_PANELS = (
    ("running", "running requests", "#1565c0"),
    ("waiting", "waiting requests", "#ef6c00"),
    ("kv_cache_usage", "KV-cache usage (share)", "#2e7d32"),
)
"""The server plot's panels, top to bottom: each series on its own axes, so none can hide another."""


def _server_figure(series: pd.DataFrame, axis: RunAxis | None) -> Figure:
    """Running requests, waiting requests and KV-cache usage, each in its own panel over the run's
    time (one shared axis): on one axes a queue as long as the slots drew ``waiting`` over ``running``."""
    panels = [panel for panel in SERVER_PANELS if panel[0] in series]
    figure = Figure(figsize=(FIGSIZE[0], 0.8 + 1.4 * len(panels)), dpi=DPI, layout="constrained")
    seconds = series.index.to_numpy() - (axis.origin if axis else float(series.index.min()))
    first: Axes | None = None
    for row, (concept, label, colour) in enumerate(panels, start=1):
        axes = figure.add_subplot(len(panels), 1, row, sharex=first)
        first = first or axes
        values = series[concept].to_numpy()
        present = values[~np.isnan(values)]
        top = float(present.max()) if present.size else 0.0
        if concept == "kv_cache_usage":
            axes.plot(seconds, values, linewidth=1.2, color=colour, label=concept)
            axes.set_ylim(0, max(1.0, top))
        else:
            axes.step(seconds, values, where="post", linewidth=1.5, color=colour, label=concept)
            axes.set_ylim(0, max(1.0, top) * 1.1)
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylabel(label.replace(" ", "\n", 1), fontsize=9)
        axes.grid(True, alpha=0.3)
        if row < len(panels):
            axes.tick_params(labelbottom=False)
    if first is not None:
        figure.axes[-1].set_xlabel("seconds since the first request")
        if axis is not None:
            first.set_xlim(axis.limits)
    return figure


# --- 9. worst streams ------------------------------------------------------------------------


def _worst_section(requests: pd.DataFrame, frames: pd.DataFrame, sample_rate: float) -> str:
    how = (
        f"The {figures.WORST_BY_GAP} streams (2xx) with the longest silence, then the failed ones taken in turn from "
        "each failure outcome (cut, in-band error, protocol error, 5xx, timeout, ...); under each, its frames in "
        "order as kind, time since the request was sent (s), +gap since the "
        "previous arrival (s) and bytes."
    )
    title = "Worst streams"
    selection, left_out = figures.worst_streams(requests)
    if selection.empty:
        return _section(title, how, _sample_note(sample_rate) + _empty("No streams to show."))
    wanted = frames[frames["request_id"].isin(selection["request_id"])]
    by_request = {rid: group.sort_values("seq") for rid, group in wanted.groupby("request_id")}
    rows = "".join(_worst_row(row, by_request.get(row["request_id"])) for _, row in selection.iterrows())
    header = (
        "<thead><tr><th>request id</th><th>name</th><th>outcome</th><th>status</th><th>max_gap_s</th>"
        "<th>keep-alive</th><th>harness lag s</th><th>error (code / param / message)</th></tr></thead>"
    )
    more = _empty(f"… {left_out} more streams qualify and are not shown.") if left_out else ""
    return _section(title, how, f'{_sample_note(sample_rate)}<table class="worst">{header}{rows}</table>{more}')


def _worst_row(row: pd.Series, frames: pd.DataFrame | None) -> str:
    error = " / ".join(_text(row[c]) for c in ("error_code", "error_param", "error_message") if not _missing(row[c]))
    cells = (
        f"<td>{_text(row['request_id'])}</td><td>{_text(row['name'])}</td><td>{_outcome_label(row['outcome'])}</td>"
        f'<td class="num">{_integer(row["status"])}</td><td class="num">{_seconds(row["max_gap_s"])}</td>'
        f'<td class="num">{_integer(row["keepalive_frames"])}</td>'
        f'<td class="num">{_seconds(row["harness_lag_max_s"])}</td><td>{error or MISSING}</td>'
    )
    return (
        f'<tbody class="stream" data-request="{_text(row["request_id"])}"><tr>{cells}</tr>'
        f'<tr><td class="frames" colspan="8">{_frame_sequence(row, frames)}</td></tr></tbody>'
    )


def _frame_sequence(row: pd.Series, frames: pd.DataFrame | None) -> str:
    if frames is None or frames.empty:
        counted = sum(_number(row[c]) or 0 for c in ("data_frames", "keepalive_frames", "comment_frames"))
        return "(no frames: no event stream came back)" if counted == 0 else "(frames not sampled)"
    shown = frames[["kind", "t_s", "gap_s", "bytes", "wait_s"]].head(FRAMES_PER_STREAM)
    chips = [
        f'<span class="frame k-{_text(kind)}">{_text(kind)} {_seconds(t)} +{_seconds(gap)} {_integer(size)}B'
        f"{_read_late(wait)}</span>"
        for kind, t, gap, size, wait in shown.itertuples(index=False, name=None)
    ]
    extra = len(frames) - FRAMES_PER_STREAM
    if extra > 0:
        chips.append(f"… {extra} more")
    return "".join(chips)


def _read_late(wait: Any) -> str:
    """A frame the harness read a millisecond or more after its bytes arrived says so."""
    seconds = _number(wait)
    return f" (read {_seconds(seconds)} late)" if seconds is not None and seconds >= READ_LATE_SHOWN_S else ""


# --- soak windows ------------------------------------------------------------------------------

_WINDOW_COLUMNS = (
    ("window", "window"),
    ("verdict", "verdict"),
    ("failed", "failed gates"),
    ("unjudged", "unjudged (its point)"),
    ("start_s", "from s"),
    ("end_s", "to s"),
    ("requests", "requests"),
    ("ok", "ok"),
    ("http_500", "HTTP 500"),
    ("inband_500", "in-band 500"),
    ("cut", "cut"),
    ("ttft_p50_s", "TTFT p50 s"),
    ("ttft_p95_s", "TTFT p95 s"),
    ("max_gap_p99_s", "max gap p99 s"),
    ("keepalive_per_silent_s", "keep-alives per silent s"),
    ("harness_rss_mb", "harness MiB"),
    ("server_rss_mb", "server MiB"),
    ("server_waiting_mean", "server waiting mean"),
    ("server_waiting_max", "server waiting max"),
    ("server_running_mean", "server running mean"),
)


def _soak_section(soak: Soak) -> str:
    windows = pd.DataFrame(soak.windows or [])
    how = (
        "The run cut into equal windows by request start time: drift shows as a trend down the table, and the "
        "memory plot shows whether harness or server memory keeps growing after the first window."
    )
    if windows.empty:
        return _section("Soak windows", how, _empty("No windows: the run recorded no requests."))
    shown = [(column, label) for column, label in _WINDOW_COLUMNS if column in windows]
    header = "".join(f"<th>{_text(label)}</th>" for _, label in shown)
    body = "".join(
        "<tr>" + "".join(f"<td class='num'>{_window_cell(row.get(column))}</td>" for column, _ in shown) + "</tr>"
        for row in windows.to_dict(orient="records")
    )
    partial = " (checkpoint: the run was still going)" if soak.partial else ""
    duration = float(soak.duration_s or 0)
    table = f"<p>{_text(f'{len(windows)} windows over {duration:g} s{partial}')}</p>"
    table += f"<table><tr>{header}</tr>{body}</table>"
    return _section("Soak windows", how, table + _memory_plot(windows))


def _window_cell(value: Any) -> str:
    if _missing(value):
        return "—"
    if isinstance(value, float) and not float(value).is_integer():
        return f"{value:.4g}"
    return _text(int(value) if isinstance(value, float) else value)


def _memory_plot(windows: pd.DataFrame) -> str:
    series = {
        label: windows[column]
        for column, label in (("harness_rss_mb", "harness"), ("server_rss_mb", "server"))
        if column in windows and windows[column].notna().any()
    }
    if not series:
        return _empty("No memory samples (memory is sampled by python -m loadtests soak).")
    figure, axes = _figure()
    for label, values in series.items():
        axes.plot(windows["window"], values, marker="o", label=label)
    axes.set_xlabel("window")
    axes.set_ylabel("mean RSS (MiB)")
    axes.legend(loc="best")
    return _png(figure)
