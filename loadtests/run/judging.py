"""One judgement of a run directory, whoever asks: the end of a scenario, each soak checkpoint, the
end of a soak, and ``python -m loadtests report``.

``judge(RunRecord(run), JudgeOptions(...))`` flows one way: the run's record (its manifest and
tables, each read from the directory once: ``loadtests.record.run_dir.RunRecord``), then what the run
is (``_account``: the one place that falls back from what the caller says to what the run said),
then its gates, its summary, and (with ``html``) report.html and requests.csv from the same record.
The run's gates are stored with it as plain data (``Gate.spec``): given by the scenario, else those
of the summary it already has, else those of its manifest (a soak checkpoint, a run killed before
its summary), plus any ``add_gates`` not stored yet (the soak's drift gates). How it ended, its soak
section and why it has no server metrics (if so) are carried over the same way. So a re-judgement of
any run, a failing soak included, gives the verdict, gates and sections it had.

A gate class defined in a user's locustfile is stored with where it is defined (``gate_sources``):
a re-judgement in another process loads it from there. One it cannot load is judged unjudged, its
line saying why (``Summary.unrebuilt``: ``report`` prints it), and the rest are judged as ever.

A run against ``--host`` whose server's keep-alive interval was not given records it as ``unknown``:
its judgement infers the interval once from the comments in frames.parquet
(``loadtests.judge.keep_alive``, robust to a proxy that batches them), records it in the settings as
``inferred`` with how (``keep_alive_inferred``), and every gate judges at it: the run's controller
infers it before it forms the scenario's gates, so gates written in the interval are formed with it;
a run judged from its manifest gets ``keepalive_covered`` and the proxy gate at it. With nothing to
infer from, ``keepalive_covered`` is skipped with a line saying how to give the interval. A
re-judgement keeps what was inferred.
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
from loadtests.errors import NotARunDirectory, RecordNotWritten, RunDirChanged, SummaryError
from loadtests.judge.causes import MERGE_COLUMNS, writes_merged
from loadtests.judge.drift import DriftLimits, LatencyDrift, MemoryGrowth, WindowJudge, soak_section
from loadtests.judge.gates import (
    DEFAULT_MAX_UNJUDGED_SHARE,
    INFERRED,
    UNKNOWN,
    Gate,
    GateResult,
    HarnessKeptUp,
    KeepAliveCovered,
    NoProxyTimeouts,
    RunTables,
    evaluate,
    gate_sources,
    rebuild_gates,
    run_point,
)
from loadtests.judge.keep_alive import INFERENCE_COLUMNS, InferredInterval, infer_interval
from loadtests.judge.summary import (
    TOKEN_GAP,
    Coverage,
    LiveCounts,
    ServerMetrics,
    Soak,
    Summary,
    coverage,
    is_count,
    spread,
    summarize,
)
from loadtests.record import figures
from loadtests.record.lag import (
    RESOLUTION_COLUMN,
    STALLED_COLUMN,
    stalled_while_open,
    timing_resolution_s,
    while_streams_open,
)
from loadtests.record.live_metrics import FAILING, NOT_JUDGED, PASSING
from loadtests.record.run_dir import RunDir, RunRecord, parts_problem
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
    if summary.soak is not None and summary.soak.partial:
        return f"{NO_SUMMARY} (summary.json is a soak checkpoint)"
    return None


@dataclasses.dataclass(frozen=True)
class SoakState:
    """What the soak job says of the run it watches: a checkpoint (``partial``) or its end."""

    partial: bool
    duration_s: float | None


@dataclasses.dataclass(frozen=True)
class JudgeOptions:
    """What the caller of ``judge`` knows of the run that its directory may not say yet; whatever is
    left None (or empty) is what the run already said (module docstring)."""

    gates: Sequence[Gate] | None = None
    """The run's own gates (its scenario's, at its end); None: those the run stored."""
    add_gates: Sequence[Gate] = ()
    """Gates judged beside the run's own and stored with them unless stored already (the soak's drift gates)."""
    scenario: str | None = None
    settings: dict[str, Any] | None = None
    frame_sample_rate: float | None = None
    point: Sequence[str] | None = None
    """The names of the gates declared to be the run's point (``run_point``)."""
    ended: str | None = None
    interrupted: str | None = None
    soak: SoakState | None = None
    server_metrics_unavailable: str | None = None
    """Why a run without server metrics has none (its scraper's finding)."""
    lost_rows: dict[str, dict[str, Any]] | None = None
    live: LiveCounts | None = None
    """What only the live run knows of its requests (Locust's count, rows its disk refused)."""


@dataclasses.dataclass(frozen=True)
class _Account:
    """What the run is and how it ended, each taken once from the first source that says it: the
    caller (``JudgeOptions``), else the summary the run holds (only what its file said), else its
    manifest, else a default. The one place judging falls back."""

    scenario: str
    settings: dict[str, Any]
    gates: list[Gate]
    refused: list[str]
    point: list[str] | None
    frame_sample_rate: float
    ended: str | None
    interrupted: str | None
    soak: SoakState | None
    metrics_reason: str | None
    lost_rows: dict[str, dict[str, Any]] | None
    live: LiveCounts


def _account(record: RunRecord, previous: Summary | None, told: JudgeOptions) -> _Account:
    manifest = record.manifest
    said = previous.said if previous is not None else frozenset()

    def carried(key: str) -> Any:
        return getattr(previous, key) if previous is not None and key in said else None

    if told.gates is not None:
        specs, sources = [gate.spec() for gate in told.gates], gate_sources(told.gates)
    elif previous is not None:
        specs, sources = previous.gate_specs, previous.gate_sources
    else:
        specs, sources = (manifest.gate_specs, manifest.gate_sources) if manifest is not None else ([], {})
    try:
        stored, refused = rebuild_gates(specs, sources, never_from=record.run.path)
    except SummaryError as exc:  # a spec of no known type, nor a user's: no summary this harness reads
        raise SummaryError(f"{record.run.summary}: {exc}") from None
    point = told.point
    if point is None and told.gates is not None:  # judged by the caller's gates: those are its point
        point = run_point(None, [gate.name for gate in told.gates])
    if point is None:
        point = carried("point") if "point" in said else manifest.point if manifest is not None else None
    before = previous.soak if previous is not None else None
    return _Account(
        scenario=_first(
            told.scenario, carried("scenario"), manifest and manifest.scenario, record.run.path.name.rsplit("-", 1)[0]
        ),
        settings=_first(told.settings, carried("settings"), manifest and manifest.settings, {}),
        gates=[*stored, *(gate for gate in told.add_gates if gate.spec() not in specs)],
        refused=refused,
        point=None if point is None else run_point(point),
        frame_sample_rate=_first(told.frame_sample_rate, previous.frame_sample_rate if previous else None, 1.0),
        ended=told.ended if told.ended is not None else previous.ended if previous else None,
        interrupted=told.interrupted or (previous.interrupted if previous else None),
        soak=told.soak or (None if before is None else SoakState(before.partial, before.duration_s)),
        metrics_reason=told.server_metrics_unavailable
        or (previous.server_metrics.reason if previous and previous.server_metrics else None),
        lost_rows=told.lost_rows if told.lost_rows is not None else previous.lost_rows if previous else None,
        live=told.live or _live_counts(previous),
    )


def _live_counts(previous: Summary | None) -> LiveCounts:
    """What the live run counted, as the summary it wrote recorded it; nothing when it recorded none."""
    said = previous.coverage if previous is not None else None
    if not said:
        return LiveCounts()
    return LiveCounts(said.locust if is_count(said.locust) else None, said.unwritten if is_count(said.unwritten) else 0)


def judge(record: RunRecord, options: JudgeOptions | None = None, *, html: bool = True) -> Summary:
    """Judge the run ``record`` holds and write its summary; whatever ``options`` leave out is what
    the run already said (module docstring). One way through: the record (each table read once),
    then the gates, the summary, the report. Raises ``NotARunDirectory``, ``SummaryError`` or
    ``RunDirChanged``."""
    told = options or JudgeOptions()
    previous = _previous_checked(record)
    account = _account(record, previous, told)
    tables = _tables(record, account.lost_rows, account.settings)
    if html:  # the report reads every frame: an inferred keep-alive interval reads them from the same table
        record.read_every_frame()
    gates, settings = _with_inferred_interval(record, account.gates, account.settings)
    share = float(settings.get("max_unjudged_share", DEFAULT_MAX_UNJUDGED_SHARE))
    covered = Coverage.from_json(
        coverage(tables.requests, record.server_metrics, settings, account.live, account.lost_rows, share)
    )
    tables = dataclasses.replace(tables, uncovered=covered.shortfall())
    summary = summarize(
        account.scenario,
        tables.requests,
        evaluate(tables, gates, share),
        settings,
        [gate.spec() for gate in gates],
        account.frame_sample_rate,
        tables.lag,
        next((gate.limit_ms for gate in gates if isinstance(gate, HarnessKeptUp)), None),
        next((gate.read_timeout for gate in gates if isinstance(gate, NoProxyTimeouts)), None),
    )
    checkpoint = account.soak is not None and account.soak.partial  # every frame, each time: not read there
    frames = None if checkpoint else _figure_frames(record)
    merged = None if checkpoint else writes_merged(_columns(frames, MERGE_COLUMNS), settings.get("proxy"))
    summary.causes.writes_merged = None if merged is None else merged.as_dict()
    if frames is not None:
        summary.latency[TOKEN_GAP] = spread(figures.token_gaps(frames))
    summary.gate_sources = gate_sources(gates)
    summary.unrebuilt = tuple(account.refused)
    # nothing said: the gates it stored (its own, not the always-on ones) are its point
    summary.point = account.point or run_point(None, [str(spec.get("name")) for spec in summary.gate_specs])
    summary.ended, summary.interrupted = account.ended, account.interrupted
    summary.parts = record.parts
    summary.lost_rows = account.lost_rows or None
    summary.coverage = covered
    summary.soak = _soak_section(tables, gates, account.soak, record.server_metrics, summary, share)
    if summary.soak is None and previous is not None and previous.soak is not None and previous.soak.partial:
        # the soak job's checkpoint, judged here without its drift gates (the Locust run's own end): the
        # final judgement is the soak job's, and until it is written the directory says it is missing
        summary.soak = previous.soak
    summary.server_metrics = ServerMetrics.from_json(
        server_metrics_summary(record.server_metrics, account.metrics_reason)
    )
    try:
        summary.write(record.run)
    except RecordNotWritten as exc:  # the verdict stands; where the summary went is the caller's to say
        summary.unwritten = str(exc)
        return summary
    if html:
        write_html_files(record, summary)
    return summary


def _previous_checked(record: RunRecord) -> Summary | None:
    """The summary the run holds (``previous_summary``), once its directory is checked to hold the
    rows that summary judged (``RunDirChanged`` when it lost or changed a part)."""
    previous = previous_summary(record.run)
    if previous is not None and previous.parts is not None:
        growing = previous.soak is not None and previous.soak.partial  # a soak's checkpoint: the run went on writing
        problem = parts_problem(previous.parts, record.parts, growing)
        if problem is not None:
            raise RunDirChanged(
                f"{record.run.path}: {problem} since its summary.json was written: judging it again would judge "
                "other rows than the run recorded (summary.json left as it was)"
            )
    return previous


def judge_so_far(record: RunRecord, gates: Sequence[Gate], settings: dict[str, Any], point: Sequence[str]) -> Summary:
    """What ``judge`` would say of a run still going, on the rows it wrote so far, by the same gates
    and figures (the web UI's tab shows it); it writes nothing and reads no frames unless the
    keep-alive interval is to be inferred. ``settings`` are the run's as recorded, ``point`` its
    gates' names declared to be its point."""
    tables = _tables(record, None, settings)
    gates, settings = _with_inferred_interval(record, list(gates), settings)
    results = evaluate(tables, gates, float(settings.get("max_unjudged_share", DEFAULT_MAX_UNJUDGED_SHARE)))
    summary = summarize(
        record.run.path.name.rsplit("-", 1)[0],
        tables.requests,
        results,
        settings,
        [gate.spec() for gate in gates],
        lag=tables.lag,
        lag_limit_ms=next((gate.limit_ms for gate in gates if isinstance(gate, HarnessKeptUp)), None),
        read_timeout=next((gate.read_timeout for gate in gates if isinstance(gate, NoProxyTimeouts)), None),
    )
    summary.point = run_point(point)
    return summary


def gate_states(results: Sequence[GateResult]) -> dict[str, int]:
    """Each gate's state for the live metrics (``loadtests.record.live_metrics``): 1 passing, 0
    failing, -1 not judged (nothing, or too little, to judge yet)."""
    return {result.name: NOT_JUDGED if result.unjudged else PASSING if result.passed else FAILING for result in results}


FIGURE_FRAME_COLUMNS = list(dict.fromkeys([*MERGE_COLUMNS, *figures.TOKEN_GAP_COLUMNS]))
"""The columns of frames.parquet a judgement reads for its figures of frames: token frames merged on
the way (``loadtests.judge.causes.writes_merged``) and the gaps between tokens (``latency.token_gap_s``)."""


def _figure_frames(record: RunRecord) -> pd.DataFrame | None:
    """``FIGURE_FRAME_COLUMNS`` of the run's frames, read once; None when they cannot be read (a
    damaged part): merged writes are then only what the started proxy is known to do, and the
    summary has no ``token_gap_s``."""
    try:
        return record.frame_columns(FIGURE_FRAME_COLUMNS)
    except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError: the verdict does not hang on this line
        return None


def _columns(frames: pd.DataFrame | None, columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=columns) if frames is None else frames[columns]


def _tables(record: RunRecord, lost_rows: dict[str, dict[str, Any]] | None, settings: dict[str, Any]) -> RunTables:
    """The run's tables as its gates read them: every request (with how long the harness stalled
    while it was open, and the timing resolution it read at when the run asked for one: every
    timing tolerance allows for both), the lag samples taken while streams were open, the memory
    samples."""
    requests, lag = record.requests, record.lag
    resolution = timing_resolution_s(settings)
    stalled = requests.assign(**{STALLED_COLUMN: stalled_while_open(requests, lag)})
    if resolution:
        stalled[RESOLUTION_COLUMN] = resolution
    return RunTables(stalled, while_streams_open(lag, requests), record.resources, lost_rows or None)


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


def inferred_interval(record: RunRecord) -> InferredInterval | None:
    """The server's keep-alive interval as the run's comments show it (``loadtests.judge.keep_alive``),
    read from its frames: once per judgement of a run that was not told it, never on the load's loop."""
    return infer_interval(record.frame_columns(INFERENCE_COLUMNS))


def with_inferred(settings: dict[str, Any], found: InferredInterval) -> dict[str, Any]:
    """Recorded settings that say the interval was inferred, and how (``keep_alive_inferred``)."""
    return {
        **settings,
        "keep_alive_interval": found.interval,
        "keep_alive_interval_source": INFERRED,
        "keep_alive_inferred": found.as_settings(),
    }


def _with_inferred_interval(
    record: RunRecord, gates: list[Gate], settings: dict[str, Any]
) -> tuple[list[Gate], dict[str, Any]]:
    """The gates and settings of a run whose server's keep-alive interval is still ``unknown`` when it
    is judged (``--host`` without ``--keep-alive-interval``, judged from its manifest or so far: a
    finished run's controller infers it before it forms its gates): ``keepalive_covered`` at the
    interval the run's comments show, the proxy gate told it, the settings recording it as
    ``inferred``; else that gate without an interval (skipped, saying how to give one). Any other
    run's are returned as they are."""
    if settings.get("keep_alive_interval_source") != UNKNOWN:
        return gates, settings
    others = [gate for gate in gates if not isinstance(gate, KeepAliveCovered)]
    found = inferred_interval(record)
    proxy = settings.get("proxy")
    if found is None:
        return [*others, KeepAliveCovered(None, proxy=proxy)], settings
    interval = found.interval
    inferred = KeepAliveCovered(interval, source=found.source, proxy=proxy)
    others = [  # a proxy gate told no interval names the one seen
        dataclasses.replace(gate, keep_alive_interval=interval)
        if isinstance(gate, NoProxyTimeouts) and gate.keep_alive_interval is None
        else gate
        for gate in others
    ]
    return [*others, inferred], with_inferred(settings, found)


def _first(*values: Any) -> Any:
    """The first value that is not None."""
    return next(value for value in values if value is not None)


def _soak_section(
    tables: RunTables,
    gates: Sequence[Gate],
    soak: SoakState | None,
    server_metrics: pd.DataFrame,
    summary: Summary,
    share: float,
) -> Soak | None:
    """The drift windows, each judged as the run is (its gates that judge requests alone, its point,
    its unjudged share), when the run has drift gates; the soak's state as told, else as before."""
    drift = next((gate for gate in gates if isinstance(gate, (MemoryGrowth, LatencyDrift))), None)
    if drift is None:
        return None
    state = soak or SoakState(False, None)
    limits: DriftLimits = drift.limits
    judged = dataclasses.replace(tables, requests=figures.judged(tables.requests))
    window_judge = WindowJudge(gates, summary.point_names, share)
    return Soak.from_json(soak_section(judged, limits, state.partial, state.duration_s, server_metrics, window_judge))


def write_html_files(record: RunRecord, summary: Summary) -> None:
    """``requests.csv`` and ``report.html`` (which reads every frame) beside the summary, from the
    record the summary was judged from."""
    from loadtests.report.html_report import write_html_report, write_requests_csv  # matplotlib: only here

    write_requests_csv(record.run.path, record.requests)
    write_html_report(record.run.path, summary, record.requests, record.frames, record.lag, record.server_metrics)
