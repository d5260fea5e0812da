"""The history's page: one self-contained HTML file, regressions first, then each series' trends.

It answers, in order, what a team asks of its nightly soak: what the history covers and how a night
is judged; which nights regressed (the newest night of a series among them fails the job); which
directories were left out and why; then, per series (one scenario on one server), the trend of each
figure over the nights against its rolling baseline, and the nights themselves, newest first.

Invariants: the page is one file (inline CSS, plots as PNG data URIs, no script, no external URL);
every piece of text from a run directory is HTML-escaped; a figure a series never recorded is said
to be "not recorded", never drawn empty; a series has one trend image of a fixed size whatever its
nights, and its tables show the newest nights and regressions open, the older ones behind a toggle.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from loadtests.judge.gates import FAIL, INCONCLUSIVE, PASS
from loadtests.report import html_parts
from loadtests.report.history import FIGURES, Flag, History, HistoryFigure, fails_the_job
from loadtests.report.html_parts import MISSING, VERDICT_COLOURS, empty, number, png, section, text

TABLE_NIGHTS_SHOWN = 30
"""A series' newest nights shown open in its table; older ones are behind a "details" toggle."""
REGRESSIONS_SHOWN = 50
"""Regressions shown open, newest first; older ones are behind a "details" toggle."""
TABLE_FIGURES = ("ttft_p99_s", "gap_p99_s", "silence_over_interval", "rate_http_5xx", "harness_peak_rss_mb")
"""The figures each series' table of nights shows beside its verdict (every figure is in the plots)."""
PANEL_COLUMNS = 3
PANEL_SIZE = (3.6, 1.9)
"""Inches of one trend panel; a series' image is ``PANEL_COLUMNS`` panels wide whatever its nights."""
LEGEND_HEIGHT = 0.55
DATE_HEIGHT = 0.45
"""Inches above the panels for the legend (and the first titles), and below them for the dates."""
PANEL_GAPS = {"wspace": 0.2, "hspace": 0.28}
DPI = 80
PNG_LEVELS = 16
"""Shades per colour channel of the trend images: a year of nights' dots compress to about half."""
LINED_NIGHTS = 90
"""Up to this many nights a panel joins its values by a line; more would be ink that hides the baseline."""
REGRESSION_COLOUR = "#d32f2f"
VALUE_COLOUR = "#424242"
BASELINE_COLOUR = "#1565c0"
BAND_COLOUR = "#90caf9"
NO_PROXY = ("", "none")
"""A night's ``proxy`` when nothing stood between the harness and the server."""
ROBUST_SD = 1.4826
"""A MAD times this is the standard deviation of a normal distribution with that MAD."""

CSS = (
    html_parts.CSS
    + """span.verdict { font-size: 12px; padding: 0 6px; margin: 0; border-radius: 3px; }
tr.fails-job td { background: #ffebee; font-weight: 600; }
span.fails-job { color: #fff; background: #c62828; border-radius: 3px; padding: 0 4px; font-size: 11px; }
td.regressed { color: #c62828; font-weight: 700; }
p.ok { background: #e8f5e9; border-left: 4px solid #2e7d32; padding: 6px 10px; }
p.alarm { background: #ffebee; border-left: 4px solid #c62828; padding: 6px 10px; }
details summary { cursor: pointer; color: #1565c0; margin: 4px 0; }
td.when, span.when { white-space: nowrap; }
"""
)


@dataclass(frozen=True)
class Scale:
    """How a figure's numbers are shown: multiplied by ``factor``, followed by ``unit``; ``change_unit``
    is the unit of a difference (percentage points for a share)."""

    factor: float
    unit: str
    change_unit: str


def scale_of(figure: HistoryFigure, values: Iterable[Any]) -> Scale:
    """Seconds as ms when every value is under a second, shares as %, other units as they are."""
    if figure.unit == "s":
        present = [abs(value) for value in (number(item) for item in values) if value is not None]
        return Scale(1000.0, "ms", "ms") if not present or max(present) < 1.0 else Scale(1.0, "s", "s")
    if figure.unit == "share":
        return Scale(100.0, "%", "pp")
    if figure.unit == "x":
        return Scale(1.0, "x", "x")
    if figure.unit == "/s":
        return Scale(1.0, "per s", "per s")
    return Scale(1.0, figure.unit, figure.unit)


def _amount(value: Any) -> str:
    """A number with about three significant digits, never in exponent form."""
    figure = number(value)
    if figure is None:
        return MISSING
    size = abs(figure)
    if size >= 100 or figure.is_integer():
        return f"{figure:,.0f}"
    if size >= 10:
        return f"{figure:.1f}"
    if size >= 0.01:
        return f"{figure:.3g}"
    return np.format_float_positional(figure, precision=2, unique=False, fractional=False, trim="-")


def _quantity(value: Any, scale: Scale, unit: str | None = None, signed: bool = False) -> str:
    figure = number(value)
    if figure is None:
        return MISSING
    sign = "+" if signed and figure > 0 else ""
    shown = unit if unit is not None else scale.unit
    gap = "" if shown in ("%", "x", "") else " "
    return html_parts.text(f"{sign}{_amount(figure * scale.factor)}{gap}{shown}")


def _date(value: Any) -> str:
    if html_parts.missing(value):
        return MISSING
    return text(f"{pd.Timestamp(value):%Y-%m-%d %H:%M} UTC")


def _day(value: Any) -> str:
    return MISSING if html_parts.missing(value) else text(f"{pd.Timestamp(value):%Y-%m-%d}")


def _integer(value: Any) -> str:
    figure = number(value)
    return MISSING if figure is None else f"{int(figure):,}"


def _count(count: int, noun: str, nouns: str = "") -> str:
    """``1 night``, ``2 nights``; ``nouns`` when the plural is not the noun and an s."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


def _verdict(word: Any) -> str:
    """The verdict as report.html colours it: its word, on its colour (grey when the word is unknown)."""
    name = "" if html_parts.missing(word) else str(word)
    known = name.lower() if name in VERDICT_COLOURS else "unknown"
    style = "" if name in VERDICT_COLOURS else ' style="background:#607d8b"'
    return f'<span class="verdict {known}"{style}>{text(word)}</span>'


_BY_COLUMN = {figure.column: figure for figure in FIGURES}


def _ordered(nights: pd.DataFrame) -> pd.DataFrame:
    """The nights in start order (stable for equal starts; a night without a start first, so never the
    newest), on a fresh index."""
    return nights.sort_values("started_at", kind="stable", na_position="first").reset_index(drop=True)


def _series_names(nights: pd.DataFrame) -> list[str]:
    return sorted({str(name) for name in nights["series"]})


def _newest_nights(nights: pd.DataFrame) -> set[tuple[str, str]]:
    """(series, run_dir) of each series' newest night: a regression there fails the job."""
    newest = nights.drop_duplicates("series", keep="last")
    return {(str(series), str(run_dir)) for series, run_dir in zip(newest["series"], newest["run_dir"], strict=True)}


def _recorded(nights: pd.DataFrame) -> list[HistoryFigure]:
    """The figures with at least one value among these nights, in ``FIGURES`` order."""
    return [figure for figure in FIGURES if figure.column in nights and nights[figure.column].notna().any()]


# --- the page ----------------------------------------------------------------------------------


def render_history_page(history: History) -> str:
    """The whole page as text: coverage and method, regressions, left out, then each series."""
    nights = _ordered(history.nights)
    names = _series_names(nights)
    anchors = {name: f"series-{number}" for number, name in enumerate(names, start=1)}
    sections = [
        _headline_section(history, nights, names),
        _regressions_section(history.flags, nights, anchors),
        _within_timing_error_section(history, anchors),
        _left_out_section(history),
        _series_overview(nights, history.flags, names, anchors),
    ]
    for name in names:
        sections.append(_series_section(history, nights[nights["series"] == name], name, anchors[name]))
    title = f"sse-soak history: {_count(len(nights), 'night')}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{text(title)}</title>'
        f"<style>{CSS}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def write_history_page(history: History, path: Path) -> None:
    """Write the page at ``path``, atomically: a refused write leaves the old page and no temporary file."""
    page = render_history_page(history)
    html_parts.write_atomically(Path(path), lambda temporary: temporary.write_text(page, encoding="utf-8"))


# --- 1. what the history covers -----------------------------------------------------------------


def _headline_section(history: History, nights: pd.DataFrame, names: Sequence[str]) -> str:
    if nights.empty:
        covered = "No night was read."
    else:
        starts = nights["started_at"].dropna()
        span = f", from {_day(starts.min())} to {_day(starts.max())}" if not starts.empty else ""
        versions = nights["version"].fillna("unknown").astype(str).value_counts(sort=False).sort_index()
        seen = ", ".join(f"{version} ({_count(count, 'night')})" for version, count in versions.items())
        covered = (
            f"{_count(len(nights), 'night')} in {len(names)} series{span}; sse-soak versions: {text(seen)}. "
            "A series is one scenario on one server (and proxy); nights of different series are never compared."
        )
    method = (
        f"Each night's figure is compared with its baseline: the median and the MAD (median absolute deviation) of "
        f"the same figure over the previous {history.window} nights of the same series. A night is flagged when the "
        f"figure moves past the median, the worse way, by more than {history.sensitivity:g} robust standard "
        f"deviations ({ROBUST_SD} times the MAD), with a floor so that a figure that barely ever moved is not "
        "flagged for noise; a night whose baseline is still forming, or that lacks the figure, is not judged on "
        "it. One bad night moves a median little, so it does not hide the next one."
    )
    body = f"<p>{covered}</p><p>{text(method)}</p>"
    return section("sse-soak history", "What the nights below cover, and how a night is judged.", body, level=1)


# --- 2. regressions ------------------------------------------------------------------------------


def _regressions_section(flags: Sequence[Flag], nights: pd.DataFrame, anchors: dict[str, str]) -> str:
    title = "Regressions"
    how = (
        "Each night and figure that moved past its baseline, those of a series' newest night first (they fail the "
        "job); the change is the value minus the baseline's median, in the figure's unit and as a share of the "
        "median; the score is that change in robust standard deviations. pp: percentage points."
    )
    if not flags:
        return section(title, how, '<p class="ok">No regression: no night moved past its baseline.</p>')
    newest = _newest_nights(nights)

    def fails(flag: Flag) -> bool:
        return fails_the_job(flag, (flag.series, flag.run_dir) in newest)

    failing = [flag for flag in flags if fails(flag)]
    ordered = sorted(flags, key=lambda flag: (not fails(flag), -_epoch(flag.started_at)))
    nights_flagged = len({(flag.series, flag.run_dir) for flag in flags})
    harness = sum(_BY_COLUMN[flag.figure].subject == "harness" for flag in flags if flag.figure in _BY_COLUMN)
    found = _count(len(flags) - harness, "regression") + (
        f" and {_count(harness, 'harness change')}" if harness else ""
    )
    summary = f"{found} on {_count(nights_flagged, 'night')}; " + (
        f"{len(failing)} of the server on the newest night of a series: "
        f"{'it fails' if len(failing) == 1 else 'they fail'} the job."
        if failing
        else "none of the server on the newest night of a series: the job does not fail on them."
    )
    header = (
        "<thead><tr><th>series</th><th>night</th><th>figure</th><th>value</th><th>baseline median ± MAD</th>"
        "<th>change</th><th>score (robust SDs)</th></tr></thead>"
    )
    rows = [_regression_row(flag, fails(flag), anchors) for flag in ordered]
    shown = max(REGRESSIONS_SHOWN, len(failing))  # those that fail the job are always in sight
    table = f'<table class="regressions">{header}{"".join(rows[:shown])}</table>'
    if rows[shown:]:
        table += (
            f"<details><summary>{len(rows) - shown} older regressions</summary>"
            f'<table class="regressions">{header}{"".join(rows[shown:])}</table></details>'
        )
    return section(title, how, f'<p class="{"alarm" if failing else "note"}">{text(summary)}</p>{table}')


def _epoch(value: Any) -> float:
    return float(pd.Timestamp(value).value) if not html_parts.missing(value) else -math.inf


def _regression_row(flag: Flag, fails_job: bool, anchors: dict[str, str], last_cell: str | None = None) -> str:
    """One flag as a table row; ``last_cell`` replaces the score (the timing error of a move within it)."""
    figure = _BY_COLUMN.get(flag.figure)
    label = figure.label if figure else flag.figure
    if figure is not None and figure.subject == "harness":
        label += " (the harness, not the server: fails nothing)"
    scale = scale_of(figure, (flag.value, flag.baseline_median)) if figure else Scale(1.0, "", "")
    mark = '<br><span class="fails-job">newest night: fails the job</span>' if fails_job else ""
    last = last_cell if last_cell is not None else _amount(flag.score)
    anchor = anchors.get(flag.series, "")
    return (
        f'<tr class="{"fails-job" if fails_job else "regression"}" data-figure="{text(flag.figure)}">'
        f'<td><a href="#{anchor}">{text(flag.series)}</a></td>'
        f'<td>{text(flag.run_dir)}<br><span class="when">{_date(flag.started_at)}</span>{mark}</td>'
        f"<td>{text(label)}</td>"
        f'<td class="num">{_quantity(flag.value, scale)}</td>'
        f'<td class="num">{_quantity(flag.baseline_median, scale)} ± '
        f"{_quantity(flag.baseline_mad, scale, scale.change_unit)} over {_integer(flag.baseline_nights)} nights</td>"
        f'<td class="num">{_quantity(flag.change, scale, scale.change_unit, signed=True)}{_relative(flag)}</td>'
        f'<td class="num">{last}</td></tr>'
    )


def _within_timing_error_section(history: History, anchors: dict[str, str]) -> str:
    """The moves past a baseline's limit that the harness's own timing error explains: never regressions."""
    title = "Within the harness's own timing error"
    how = (
        "Timing figures that moved past their baseline's limit by less than the harness's own timing error could "
        "move them (the night's event-loop lag plus its baseline's: p99 for a percentile, the longest stall for the "
        "longest silence). Not regressions: a busy box moves the harness's clock, not the server."
    )
    if not history.within_timing_error:
        return section(title, how, "<p>None.</p>")
    header = (
        "<thead><tr><th>series</th><th>night</th><th>figure</th><th>value</th><th>baseline median ± MAD</th>"
        "<th>change</th><th>timing error</th></tr></thead>"
    )
    rows = []
    for flag in sorted(history.within_timing_error, key=lambda flag: -_epoch(flag.started_at)):
        figure = _BY_COLUMN.get(flag.figure)
        scale = scale_of(figure, (flag.value, flag.baseline_median)) if figure else Scale(1.0, "", "")
        error = f"± {_quantity(flag.timing_error, scale, scale.change_unit)}"
        rows.append(_regression_row(flag, False, anchors, error))
    table = f'<table class="within-error">{header}{"".join(rows[:REGRESSIONS_SHOWN])}</table>'
    if rows[REGRESSIONS_SHOWN:]:
        table += (
            f"<details><summary>{len(rows) - REGRESSIONS_SHOWN} older</summary>"
            f'<table class="within-error">{header}{"".join(rows[REGRESSIONS_SHOWN:])}</table></details>'
        )
    return section(title, how, table)


def _relative(flag: Flag) -> str:
    """The change as a share of the baseline's median; "from zero" when the median was zero."""
    median, change = number(flag.baseline_median), number(flag.change)
    if median is None or change is None:
        return ""
    return " (from zero)" if median == 0.0 else f" ({change / abs(median) * 100:+.0f}%)"


# --- 3. left out ---------------------------------------------------------------------------------


def _left_out_section(history: History) -> str:
    title = "Left out"
    how = "Each directory given that could not be read, as given, and why; the other nights were read without it."
    if not history.left_out:
        return section(title, how, "<p>Nothing: every directory given was read.</p>")
    rows = "".join(f"<tr><td>{text(item.path)}</td><td>{text(item.why)}</td></tr>" for item in history.left_out)
    body = (
        f'<p class="note">{_count(len(history.left_out), "directory", "directories")} left out.</p>'
        f'<table class="left-out"><thead><tr><th>directory</th><th>why</th></tr></thead>{rows}</table>'
    )
    return section(title, how, body)


# --- 4. the series -------------------------------------------------------------------------------


def _series_overview(nights: pd.DataFrame, flags: Sequence[Flag], names: Sequence[str], anchors: dict[str, str]) -> str:
    how = "One row per series: its nights, its newest night's verdict and how many of its nights regressed."
    if not names:
        return section("Series", how, empty("No series: no night was read."))
    flagged = {(flag.series, flag.run_dir) for flag in flags}
    rows = []
    for name in names:
        own = nights[nights["series"] == name]
        last = own.iloc[-1]
        regressed = sum(1 for run_dir in own["run_dir"] if (name, str(run_dir)) in flagged)
        rows.append(
            f'<tr><td><a href="#{anchors[name]}">{text(name)}</a></td><td class="num">{len(own)}</td>'
            f"<td>{_day(own['started_at'].min())}</td><td>{_day(own['started_at'].max())}</td>"
            f'<td>{_verdict(last["verdict"])} {text(last["run_dir"])}</td><td class="num">{regressed}</td></tr>'
        )
    header = (
        "<thead><tr><th>series</th><th>nights</th><th>first</th><th>last</th><th>newest night</th>"
        "<th>nights regressed</th></tr></thead>"
    )
    return section("Series", how, f"<table>{header}{''.join(rows)}</table>")


def _series_section(history: History, nights: pd.DataFrame, name: str, anchor: str) -> str:
    flagged = {(flag.run_dir, flag.figure) for flag in history.flags if flag.series == name}
    recorded = _recorded(nights)
    verdicts = nights["verdict"].astype(str).value_counts()
    counted = ", ".join(f"{verdicts.get(word, 0)} {word}" for word in (PASS, FAIL, INCONCLUSIVE))
    first = nights.iloc[0]
    proxy = "" if html_parts.missing(first["proxy"]) else str(first["proxy"])
    where = f"scenario {first['scenario']} on {first['server']}" + (f" via {proxy}" if proxy not in NO_PROXY else "")
    intro = f"<p>{_count(len(nights), 'night')} ({text(counted)}); {text(where)}.</p>"
    absent = [figure.label for figure in FIGURES if figure not in recorded]
    not_recorded = (
        f'<p class="not-recorded">Not recorded in this series: {text(", ".join(absent))}.</p>' if absent else ""
    )
    trends = (
        png(_trend_figure(nights, _baselines_of(history.baselines, name), flagged, recorded), levels=PNG_LEVELS)
        if recorded
        else empty("No figure was recorded in this series.")
    )
    how = (
        "Each panel is one figure over the series' nights: the night's value (grey dots), its baseline's median "
        "(blue line) and the band up to the limit past which the night is flagged (light blue), regressions as "
        "red dots, FAIL nights as red stripes. Below, the nights, newest first; a red figure regressed that night."
    )
    body = intro + trends + not_recorded + _nights_table(nights, flagged)
    return section(name, how, body, anchor=anchor)


def _baselines_of(baselines: pd.DataFrame, series: str) -> dict[str, pd.DataFrame]:
    """The series' baselines by figure column, each indexed by run_dir (one row a night)."""
    own = baselines[baselines["series"] == series] if not baselines.empty else baselines
    return {
        str(column): rows.drop_duplicates("run_dir", keep="last").set_index("run_dir")
        for column, rows in own.groupby("figure", sort=False)
    }


def _nights_table(nights: pd.DataFrame, flagged: set[tuple[str, str]]) -> str:
    shown = [_BY_COLUMN[column] for column in TABLE_FIGURES if column in nights and nights[column].notna().any()]
    scales = {figure.column: scale_of(figure, nights[figure.column]) for figure in shown}
    header = (
        "<thead><tr><th>started</th><th>run directory</th><th>kind</th><th>verdict</th><th>failed gates</th>"
        "<th>requests</th><th>judged</th>"
        + "".join(f"<th>{text(f'{figure.label} ({scales[figure.column].unit})')}</th>" for figure in shown)
        + "<th>regressed</th></tr></thead>"
    )
    rows = [_night_row(night, shown, scales, flagged) for night in nights.iloc[::-1].to_dict(orient="records")]
    table = f'<table class="nights">{header}{"".join(rows[:TABLE_NIGHTS_SHOWN])}</table>'
    older = rows[TABLE_NIGHTS_SHOWN:]
    if older:
        table += (
            f"<details><summary>{len(older)} older nights</summary>"
            f'<table class="nights">{header}{"".join(older)}</table></details>'
        )
    return table


def _night_row(
    night: dict[str, Any], shown: Sequence[HistoryFigure], scales: dict[str, Scale], flagged: set[tuple[str, str]]
) -> str:
    run_dir = str(night["run_dir"])
    regressed = [figure.label for figure in FIGURES if (run_dir, figure.column) in flagged]
    cells = "".join(
        f'<td class="num{" regressed" if (run_dir, figure.column) in flagged else ""}">'
        f"{_quantity(night.get(figure.column), scales[figure.column], '')}</td>"
        for figure in shown
    )
    gates = night.get("gates_failed")
    return (
        f'<tr data-run="{text(run_dir)}"><td class="when">{_date(night.get("started_at"))}</td><td>{text(run_dir)}</td>'
        f"<td>{text(night.get('kind'))}</td><td>{_verdict(night.get('verdict'))}</td>"
        f'<td class="gates">{text(gates) if gates else ""}</td>'
        f'<td class="num">{_integer(night.get("requests"))}</td><td class="num">{_integer(night.get("judged"))}</td>'
        f'{cells}<td class="regressed">{text(", ".join(regressed))}</td></tr>'
    )


# --- 5. the trend panels -------------------------------------------------------------------------


def _trend_figure(
    nights: pd.DataFrame,
    baselines: dict[str, pd.DataFrame],
    flagged: set[tuple[str, str]],
    recorded: Sequence[HistoryFigure],
) -> Figure:
    """One panel per recorded figure, ``PANEL_COLUMNS`` wide, all on the nights' dates: values, the
    baseline's median and its band up to the flag limit, regressions and FAIL nights marked."""
    rows = math.ceil(len(recorded) / PANEL_COLUMNS)
    height = LEGEND_HEIGHT + PANEL_SIZE[1] * rows + DATE_HEIGHT
    figure = Figure(figsize=(PANEL_SIZE[0] * PANEL_COLUMNS, height), dpi=DPI)
    # a fixed layout (the panels' size never changes): matplotlib's constrained one costs 2/3 of the drawing
    margins = {"left": 0.05, "right": 0.99, "top": 1 - LEGEND_HEIGHT / height, "bottom": DATE_HEIGHT / height}
    grid = figure.subplots(rows, PANEL_COLUMNS, sharex=True, squeeze=False, gridspec_kw=margins | PANEL_GAPS)
    starts = pd.to_datetime(nights["started_at"], utc=True)
    times = starts.dt.tz_localize(None).to_numpy()
    run_dirs = nights["run_dir"].astype(str).to_numpy()
    failed = nights["verdict"].astype(str).to_numpy() == FAIL
    line = 0.6 if len(nights) <= LINED_NIGHTS else 0.0  # many nights: dots alone, the baseline stays visible
    for axes, shown in zip(grid.flat, recorded, strict=False):
        values = nights[shown.column].to_numpy(dtype=float)
        scale = scale_of(shown, values)
        baseline = baselines.get(shown.column)
        if baseline is not None:
            rows_by_night = baseline.reindex(run_dirs)
            median = rows_by_night["median"].to_numpy(dtype=float) * scale.factor
            limit = rows_by_night["limit"].to_numpy(dtype=float) * scale.factor
            axes.fill_between(times, median, limit, step="mid", color=BAND_COLOUR, alpha=0.45, linewidth=0)
            axes.plot(times, median, drawstyle="steps-mid", color=BASELINE_COLOUR, linewidth=1.0)
        if failed.any():
            axes.vlines(
                times[failed],
                0,
                1,
                transform=axes.get_xaxis_transform(),
                colors=VERDICT_COLOURS[FAIL],
                alpha=0.25,
                linewidth=2.0,
            )
        axes.plot(times, values * scale.factor, color=VALUE_COLOUR, linewidth=line, marker=".", markersize=3)
        regressed = np.array([(run_dir, shown.column) in flagged for run_dir in run_dirs], dtype=bool)
        if regressed.any():
            axes.scatter(times[regressed], values[regressed] * scale.factor, s=30, color=REGRESSION_COLOUR, zorder=5)
        axes.set_title(f"{shown.label} ({scale.unit})", fontsize=9)
        axes.tick_params(labelsize=7)
        axes.grid(True, alpha=0.3)
        locator = AutoDateLocator(minticks=2, maxticks=5)
        axes.xaxis.set_major_locator(locator)
        axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    for place in range(len(recorded), grid.size):
        grid.flat[place].set_visible(False)
        if place >= PANEL_COLUMNS:  # the panel above an empty place is the last of its column: it shows the dates
            grid.flat[place - PANEL_COLUMNS].tick_params(labelbottom=True)
    figure.legend(
        handles=[
            Line2D([], [], color=VALUE_COLOUR, marker=".", linewidth=0.6, label="night's value"),
            Line2D([], [], color=BASELINE_COLOUR, linewidth=1.0, label="baseline median"),
            Patch(color=BAND_COLOUR, alpha=0.45, label="band up to the flag limit"),
            Line2D([], [], color=REGRESSION_COLOUR, marker="o", linewidth=0, label="regression"),
            Line2D([], [], color=VERDICT_COLOURS[FAIL], alpha=0.4, linewidth=3, label="FAIL night"),
        ],
        loc="upper center",
        ncols=5,
        fontsize=8,
        frameon=False,
    )
    return figure
