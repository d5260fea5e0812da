"""Is the new run worse than the base run? A side-by-side table of figures and a regression verdict.

Works from two ``summary.json`` files (a run directory or the summary itself, read by
``Summary.load``), so a nightly job needs to keep only the last good summary. Regressions, each
with a default threshold:

- the share of HTTP 500 + in-band 500 rose at all (``max_500_rate_increase``, default 0);
- the failure rate (5xx, in-band errors, protocol errors, cuts, timeouts, connect errors and
  harness errors over judged requests) rose by more than ``max_failure_rate_increase``
  (absolute, default 0.001 = 0.1 point);
- a timing percentile (TTFT p50/p95, duration p95, max_gap_s p99) grew by more than
  ``max_latency_increase`` (relative, default 0.25), ignoring figures under 5 ms in the base;
- mean keep-alive frames per raw stream (the SDK cannot see comments) fell by more than
  ``max_keepalive_drop`` (relative, 0.5);
- the base run passed its gates and the new one did not.

What each run's verdict covers (its ``coverage``: requests seen, the share lost or never sent)
is shown for information: a run that covered too few is INCONCLUSIVE by its own verdict.
The server's own figures from its ``/metrics`` (waiting requests p95 and max, KV-cache usage max;
``SERVER_FIGURES``) are shown for information, never a regression: they describe the load as much
as the server. A figure a summary lacks (no metrics, an older summary) is shown as ``-``.

Thresholds are numbers >= 0; ``inf`` turns a check off (never flag). NaN and negative values are
refused (``Thresholds`` raises ``ValueError``), and so is a keep-alive drop above 1 other than
``inf``: a share cannot fall by more than all of it. A file that is not a run summary raises
``SummaryError`` naming the file and what is wrong, and so does one without the sections compare
reads (``latency`` and its timings, ``keepalive_per_stream``). Runs of different scenarios or
load settings (``incomparable``) are refused unless asked (``--allow-different``). ``python -m loadtests
compare`` exits 0 on no regression, 1 on a regression, 2 on bad input (one line naming the file or
option).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from loadtests.client.outcome import FAILURE_OUTCOMES, Outcome
from loadtests.errors import InvalidValue
from loadtests.judge.gates import INFERRED, UNKNOWN
from loadtests.judge.summary import INCONCLUSIVE, Summary

LATENCY_FIGURES = (("ttft_s", "p50"), ("ttft_s", "p95"), ("duration_s", "p95"), ("max_gap_s", "p99"))
LATENCY_FLOOR_S = 0.005
SERVER_FIGURES = (("waiting", "p95"), ("waiting", "max"), ("kv_cache_usage", "max"))


def threshold_problem(name: str, value: float) -> str | None:
    """Why ``value`` is no threshold for ``name``, or None: NaN and negative never are; ``inf``
    (never flag) always is; a keep-alive drop is a share, at most 1."""
    if name == "max_keepalive_drop" and not (0 <= value <= 1 or value == math.inf):
        return f"expected a share from 0 to 1 (0.5 = half) or inf (never flag), got {value:g}"
    if not value >= 0:  # NaN too
        return f"expected a number >= 0, or inf (never flag), got {value:g}"
    return None


@dataclass(frozen=True)
class Thresholds:
    max_500_rate_increase: float = 0.0
    max_failure_rate_increase: float = 0.001
    max_latency_increase: float = 0.25
    max_keepalive_drop: float = 0.5

    def __post_init__(self) -> None:
        for field in fields(self):
            problem = threshold_problem(field.name, getattr(self, field.name))
            if problem is not None:
                raise InvalidValue(f"{field.name}: {problem}")


@dataclass(frozen=True)
class Row:
    metric: str
    base: float | None
    new: float | None
    regressed: bool
    rule: str = ""

    def cells(self) -> list[str]:
        change = ""
        if self.base is not None and self.new is not None:
            delta = self.new - self.base
            change = f"{delta:+.4g}" + (f" ({delta / self.base:+.0%})" if self.base else "")
        return [
            self.metric,
            _fmt(self.base),
            _fmt(self.new),
            change,
            ("REGRESSION " + self.rule) if self.regressed else "",
        ]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _rate(count: int, summary: Summary) -> float:
    return count / summary.requests_judged if summary.requests_judged else 0.0


COMPARABLE_SETTINGS = ("proxy", "proxy_read_timeout", "keep_alive_interval", "open_loop", "timing_resolution_ms")
"""The settings two runs must share to be compared: how the load was made and measured (the timing
resolution too: reads coalesced to 5 ms move a 4 ms TTFT p50 by more than any threshold). The server
may differ (another build, another host, injected faults): comparing servers is what compare is
for, so a keep-alive interval a run inferred from its server's comments (or did not know) is not
held. Duration and prompt sizing may differ too: the figures are rates and percentiles."""


def incomparable(base: Summary, new: Summary) -> str | None:
    """Why ``new`` is no fair comparison with ``base`` (another scenario, or other settings), or
    None. A summary that does not record a setting (a baseline kept by hand) is not held to it."""
    if base.scenario and new.scenario and base.scenario != new.scenario:
        return f"the base ran {base.scenario}, the new run {new.scenario}"
    measured = {  # an interval inferred from a server's comments is the server's, measured: never held
        "keep_alive_interval"
        for summary in (base, new)
        if summary.settings.get("keep_alive_interval_source") in (INFERRED, UNKNOWN)
    }
    differing = [
        f"{name} {base.settings[name]!r} against {new.settings[name]!r}"
        for name in COMPARABLE_SETTINGS
        if name in base.settings
        and name in new.settings
        and name not in measured
        and base.settings[name] != new.settings[name]
    ]
    return f"the runs differ in {'; '.join(differing)}" if differing else None


def missing_figures(summary: Summary) -> list[str]:
    """The timing figures ``compare`` reads that ``summary`` lacks (``latency.ttft_s`` ...): a
    summary without them is no comparison, never a pass by default."""
    return sorted({f"latency.{column}" for column, _ in LATENCY_FIGURES if column not in summary.latency})


def compare(base: Summary, new: Summary, limits: Thresholds = Thresholds()) -> list[Row]:
    """Every figure side by side; ``regressed`` marks those beyond ``limits``. The verdicts compared
    are those the runs recorded (``Summary.recorded_verdict``)."""
    rows = [Row("requests judged", base.requests_judged, new.requests_judged, False)]
    for label, figure in (
        ("requests seen (Locust, server, schedule)", "total"),
        ("share lost or never sent", "unjudged_share"),
    ):
        rows.append(Row(label, _covered(base, figure), _covered(new, figure), False))
    rate_500 = [_rate(s.http_500 + s.inband_500, s) for s in (base, new)]
    rows.append(
        Row(
            "500 rate (HTTP + in-band)",
            rate_500[0],
            rate_500[1],
            rate_500[1] - rate_500[0] > limits.max_500_rate_increase,
            f"> +{limits.max_500_rate_increase:g}",
        )
    )
    failure = [_rate(sum(s.outcomes.get(o, 0) for o in FAILURE_OUTCOMES), s) for s in (base, new)]
    rows.append(
        Row(
            "failure rate",
            failure[0],
            failure[1],
            failure[1] - failure[0] > limits.max_failure_rate_increase,
            f"> +{limits.max_failure_rate_increase:g}",
        )
    )
    for outcome in (Outcome.OK, Outcome.REJECTED, *FAILURE_OUTCOMES):
        rates = [_rate(s.outcomes.get(outcome, 0), s) for s in (base, new)]
        rows.append(Row(f"rate {outcome}", rates[0], rates[1], False))
    for column, stat in LATENCY_FIGURES:
        old, now = (s.latency.get(column, {}).get(stat) for s in (base, new))
        grew = (
            old is not None
            and now is not None
            and old >= LATENCY_FLOOR_S
            and now > old * (1 + limits.max_latency_increase)
        )
        rows.append(Row(f"{column} {stat}", old, now, grew, f"> +{limits.max_latency_increase:.0%}"))
    old_ka, new_ka = (s.keepalive_per_stream.mean for s in (base, new))
    dropped = old_ka is not None and old_ka >= 1 and (new_ka or 0) < old_ka * (1 - limits.max_keepalive_drop)
    rows.append(Row("keep-alive frames per raw stream", old_ka, new_ka, dropped, f"< -{limits.max_keepalive_drop:.0%}"))
    for concept, stat in SERVER_FIGURES:
        label = f"server {concept.replace('_', ' ').replace('kv', 'KV')} {stat}"
        rows.append(Row(label, _server_figure(base, concept, stat), _server_figure(new, concept, stat), False))
    (base_gates, base_passed), (new_gates, new_passed) = base.recorded_verdict, new.recorded_verdict
    judged = new.recorded != INCONCLUSIVE  # a run that could not judge its point regressed in nothing it judged
    rows.append(
        Row(
            "every gate passed (1 yes, 0 no)",
            float(base_gates),
            float(new_gates),
            base_gates and not new_gates and judged,
            "pass -> fail",
        )
    )
    rows.append(
        Row(
            "verdict passed (1 yes, 0 no; an interrupted run fails)",
            float(base_passed),
            float(new_passed),
            base_passed and not new_passed and judged,
            "pass -> fail",
        )
    )
    return rows


def _covered(summary: Summary, figure: str) -> float | None:
    """A figure of ``summary``'s coverage (``Coverage.total``, ``Coverage.unjudged_share``), None
    when it recorded none (an older summary) or one of another type (a file edited by hand)."""
    if summary.coverage is None:
        return None
    try:
        value = getattr(summary.coverage, figure)
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _server_figure(summary: Summary, concept: str, stat: str) -> float | None:
    """``summary``'s server figure, None when it has none (or not a finite number)."""
    figures = summary.server_metrics.concept(concept) if summary.server_metrics is not None else None
    value = figures.get(stat) if isinstance(figures, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def render(rows: list[Row], base_name: str, new_name: str) -> str:
    table = [["metric", f"base: {base_name}", f"new: {new_name}", "change", ""], *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table
    )
