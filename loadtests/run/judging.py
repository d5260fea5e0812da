"""One judgement of a run directory, whoever asks: the end of a scenario, each soak checkpoint, the
end of a soak, and ``python -m loadtests report``.

``judge(run)`` reads what the run wrote (requests, lag and memory samples), evaluates the
always-on gates and the run's own, and writes ``summary.json`` (and, with ``html``, report.html and
requests.csv). The run's gates are stored with it as plain data (``Gate.spec``): given to
``judge`` by the scenario, else those of the summary it already has, else those of its manifest
(a soak checkpoint, a run killed before its summary), plus any ``add_gates`` not stored yet (the
soak's drift gates). How it ended, its soak section and why it has no server metrics (if so) are
carried over the same way. So a re-judgement of any run, a failing soak included, gives the
verdict, gates and sections it had.

A run against ``--host`` whose server's keep-alive interval was not given records it as ``unknown``:
its judgement infers the interval from the keep-alive comments in frames.parquet, records it in the
settings as ``inferred`` and judges ``keepalive_covered`` at it (skipped, with a line saying how to
give the interval, when there is nothing to infer from); a re-judgement keeps what was inferred.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.base.lines import say
from loadtests.errors import NotARunDirectory, RecordNotWritten, RunDirChanged, SummaryError, error_kind
from loadtests.judge.drift import DriftLimits, LatencyDrift, MemoryGrowth, WindowJudge, soak_section
from loadtests.judge.gates import (
    DEFAULT_MAX_UNJUDGED_SHARE,
    INFERENCE_COLUMNS,
    INFERRED,
    UNKNOWN,
    Gate,
    HarnessKeptUp,
    KeepAliveCovered,
    NoProxyTimeouts,
    RunTables,
    evaluate,
    inferred_keep_alive_interval,
)
from loadtests.judge.summary import Summary, summarize
from loadtests.record import figures
from loadtests.record.lag import STALLED_COLUMN, stalled_while_open, while_streams_open
from loadtests.record.run_dir import Manifest, RunDir, parts_problem
from loadtests.record.server_metrics import server_metrics_summary

NO_SUMMARY = "the run ended before writing its summary"


def previous_summary(run: RunDir) -> Summary | None:
    """The summary a run directory holds, as much of it as it says (an older version's, or one cut
    short, can still be re-judged), None when it has none; raises ``NotARunDirectory``, or
    ``SummaryError`` when ``summary.json`` is there but is not a summary."""
    if not run.holds_results():
        raise NotARunDirectory(f"{run} is not a run directory (it holds no {RunDir.REQUESTS})")
    if not run.summary.exists():
        return None
    return Summary.read(run.summary, whole=False)


def unfinished(summary: Summary | None) -> str | None:
    """Why a run directory holds no final verdict, or None when it does: no summary at all, or only
    the soak job's checkpoint of a run still going (or killed before its end)."""
    if summary is None:
        return NO_SUMMARY
    if (summary.soak or {}).get("partial"):
        return f"{NO_SUMMARY} (summary.json is a soak checkpoint)"
    return None


@dataclasses.dataclass(frozen=True)
class SoakState:
    """What the soak job says of the run it watches: a checkpoint (``partial``) or its end."""

    partial: bool
    duration_s: float | None


def judge(
    run: RunDir,
    gates: Sequence[Gate] | None = None,
    *,
    add_gates: Sequence[Gate] = (),
    scenario: str | None = None,
    settings: dict[str, Any] | None = None,
    frame_sample_rate: float | None = None,
    ended: str | None = None,
    interrupted: str | None = None,
    soak: SoakState | None = None,
    server_metrics_unavailable: str | None = None,
    point: Sequence[str] | None = None,
    html: bool = True,
    lost_rows: dict[str, dict[str, Any]] | None = None,
) -> Summary:
    """Judge ``run`` and write its summary; whatever is not given is what the run already said
    (module docstring); ``server_metrics_unavailable`` is why a run without server metrics has none
    (its scraper's finding). Raises ``NotARunDirectory`` or ``SummaryError``."""
    previous = previous_summary(run)
    parts = run.part_counts()
    if previous is not None and previous.parts is not None:
        growing = bool((previous.soak or {}).get("partial"))  # a soak's checkpoint: the run went on writing
        problem = parts_problem(previous.parts, parts, growing)
        if problem is not None:
            raise RunDirChanged(
                f"{run.path}: {problem} since its summary.json was written: judging it again would judge "
                "other rows than the run recorded (summary.json left as it was)"
            )
    if point is None and gates is not None:  # judged by the caller's gates: those are its point
        point = [*(gate.name for gate in gates), "requests_completed"]
    manifest = run.read_manifest()
    specs = _stored_specs(previous, manifest, gates)
    gates = [*_gates_from(specs, run), *(gate for gate in add_gates if gate.spec() not in specs)]
    if lost_rows is None and previous is not None:
        lost_rows = previous.lost_rows
    tables = _tables(run, lost_rows)
    lag_limit = next((gate.limit_ms for gate in gates if isinstance(gate, HarnessKeptUp)), None)
    # Only what the summary said is carried over: a field its file lacks falls back to the manifest.
    said = previous.said if previous is not None else frozenset()
    recorded = _first(
        settings, previous.settings if previous and "settings" in said else None, manifest and manifest.settings, {}
    )
    gates, recorded = _with_inferred_interval(run, gates, recorded)
    share = float(recorded.get("max_unjudged_share", DEFAULT_MAX_UNJUDGED_SHARE))
    results = evaluate(tables, gates, share)
    summary = summarize(
        _first(
            scenario,
            previous.scenario if previous and "scenario" in said else None,
            manifest and manifest.scenario,
            run.path.name.rsplit("-", 1)[0],
        ),
        tables.requests,
        results,
        recorded,
        [gate.spec() for gate in gates],
        _first(frame_sample_rate, previous.frame_sample_rate if previous else None, 1.0),
        tables.lag,
        lag_limit,
        next((gate.read_timeout for gate in gates if isinstance(gate, NoProxyTimeouts)), None),
    )
    summary.point = _point(point, previous if previous and "point" in said else None, manifest)
    if summary.point is None:  # nothing said: the gates it stored (its own, not the always-on ones) are its point
        stored = [str(spec.get("name")) for spec in summary.gate_specs]
        summary.point = list(dict.fromkeys([*stored, "requests_completed"]))
    summary.ended = ended if ended is not None else previous.ended if previous else None
    summary.interrupted = interrupted or (previous.interrupted if previous else None)
    summary.parts = parts
    summary.lost_rows = lost_rows or None
    server_metrics = run.read_server_metrics()
    judge_window = WindowJudge(gates, summary.point_names, share)
    summary.soak = _soak_section(tables, gates, soak, previous, server_metrics, judge_window)
    reason = ((previous.server_metrics if previous else None) or {}).get("reason")
    summary.server_metrics = server_metrics_summary(server_metrics, server_metrics_unavailable or reason)
    try:
        summary.write(run)
    except RecordNotWritten as exc:  # the verdict stands; where the summary went is the caller's to say
        summary.unwritten = str(exc)
        return summary
    if html:
        write_html_files(run, summary)
    return summary


def judge_so_far(run: RunDir, gates: Sequence[Gate], settings: dict[str, Any], point: Sequence[str]) -> Summary:
    """What ``judge`` would say of a run still going, on the rows it wrote so far, by the same gates
    and figures (the web UI's tab shows it); it writes nothing and reads no frames unless the
    keep-alive interval is to be inferred. ``settings`` are the run's as recorded, ``point`` its
    gates' names that are its point."""
    tables = _tables(run, None)
    gates, settings = _with_inferred_interval(run, list(gates), settings)
    results = evaluate(tables, gates, float(settings.get("max_unjudged_share", DEFAULT_MAX_UNJUDGED_SHARE)))
    summary = summarize(
        run.path.name.rsplit("-", 1)[0],
        tables.requests,
        results,
        settings,
        [gate.spec() for gate in gates],
        lag=tables.lag,
        lag_limit_ms=next((gate.limit_ms for gate in gates if isinstance(gate, HarnessKeptUp)), None),
        read_timeout=next((gate.read_timeout for gate in gates if isinstance(gate, NoProxyTimeouts)), None),
    )
    summary.point = [*point, "requests_completed"]
    return summary


def _tables(run: RunDir, lost_rows: dict[str, dict[str, Any]] | None) -> RunTables:
    """The run's tables as its gates read them: every request (with how long the harness stalled
    while it was open), the lag samples taken while streams were open, the memory samples."""
    requests, lag = run.read_requests(), run.read_lag()
    requests[STALLED_COLUMN] = stalled_while_open(requests, lag)
    open_lag = None if lag is None else while_streams_open(lag, requests)
    return RunTables(requests, open_lag, run.read_resources(), lost_rows or None)


def keep_elsewhere(run: RunDir, summary: Summary) -> str:
    """The summary of a run whose directory refused it, in the first place that takes it: a file in
    the system's temporary directory, else standard output; the one line that says where."""
    text = json.dumps(summary.to_json(), indent=2) + "\n"
    fallback = Path(tempfile.gettempdir()) / f"sse-soak-{run.path.name}-summary.json"
    try:
        fallback.write_text(text, encoding="utf-8")
    except OSError:
        say(text, end="")
        return f"sse-soak: {summary.unwritten}; the summary is printed above (no place on disk took it)"
    return f"sse-soak: {summary.unwritten}; the summary is in {fallback}"


def _point(given: Sequence[str] | None, previous: Summary | None, manifest: Manifest | None) -> list[str] | None:
    """The gates that are the run's point: as given, else as its summary said, else as its manifest
    said; None when nothing said (every gate is)."""
    if given is not None:
        return list(given)
    if previous is not None:
        return previous.point
    return manifest.point if manifest is not None else None


def _with_inferred_interval(
    run: RunDir, gates: list[Gate], settings: dict[str, Any]
) -> tuple[list[Gate], dict[str, Any]]:
    """The gates and settings of a run whose server's keep-alive interval was ``unknown`` when it
    started (``--host`` without ``--keep-alive-interval``): ``keepalive_covered`` at the interval the
    run's keep-alive comments show, the settings recording it as ``inferred``; else that gate without an
    interval (skipped, saying how to give one). Any other run's are returned as they are."""
    if settings.get("keep_alive_interval_source") != UNKNOWN:
        return gates, settings
    others = [gate for gate in gates if not isinstance(gate, KeepAliveCovered)]
    found = inferred_keep_alive_interval(run.read_frames(INFERENCE_COLUMNS))
    proxy = settings.get("proxy")
    if found is None:
        return [*others, KeepAliveCovered(None, proxy=proxy)], settings
    interval, streams = found
    inferred = KeepAliveCovered(interval, source=f"inferred from the comments of {streams} streams", proxy=proxy)
    others = [  # a proxy gate told no interval names the one seen
        dataclasses.replace(gate, keep_alive_interval=interval)
        if isinstance(gate, NoProxyTimeouts) and gate.keep_alive_interval is None
        else gate
        for gate in others
    ]
    return [*others, inferred], {**settings, "keep_alive_interval": interval, "keep_alive_interval_source": INFERRED}


def _first(*values: Any) -> Any:
    """The first value that is not None."""
    return next(value for value in values if value is not None)


def _stored_specs(
    previous: Summary | None, manifest: Manifest | None, gates: Sequence[Gate] | None
) -> list[dict[str, Any]]:
    if gates is not None:
        return [gate.spec() for gate in gates]
    if previous is not None:
        return previous.gate_specs
    return manifest.gate_specs if manifest is not None else []


def _gates_from(specs: list[dict[str, Any]], run: RunDir) -> list[Gate]:
    """The gates stored as ``specs``; a spec this harness cannot rebuild is a ``SummaryError``."""
    gates = []
    for number, spec in enumerate(specs, 1):
        try:
            gates.append(Gate.from_spec(spec))
        except (KeyError, TypeError, ValueError) as exc:
            message = f"gate spec {number} cannot be rebuilt ({error_kind(exc)}: {exc})"
            raise SummaryError(f"{run.summary}: {message}") from None
    return gates


def _soak_section(
    tables: RunTables,
    gates: Sequence[Gate],
    soak: SoakState | None,
    previous: Summary | None,
    server_metrics: pd.DataFrame,
    judge: WindowJudge,
) -> dict[str, Any] | None:
    """The drift windows, each judged by ``judge``, when the run has drift gates; the soak's state
    as told, else as before."""
    drift = next((gate for gate in gates if isinstance(gate, (MemoryGrowth, LatencyDrift))), None)
    if drift is None:
        return None
    before = (previous.soak if previous else None) or {}
    state = soak or SoakState(bool(before.get("partial", False)), before.get("duration_s"))
    limits: DriftLimits = drift.limits
    judged = dataclasses.replace(tables, requests=figures.judged(tables.requests))
    return soak_section(judged, limits, state.partial, state.duration_s, server_metrics, judge)


def write_html_files(run: RunDir, summary: Summary) -> None:
    """``requests.csv`` and ``report.html`` (which reads every frame) beside the summary."""
    from loadtests.report.html_report import write_html_report, write_requests_csv  # matplotlib: only here

    requests = run.read_requests()
    write_requests_csv(run.path, requests)
    write_html_report(run.path, summary, requests, run.read_frames(), run.read_lag(), run.read_server_metrics())
