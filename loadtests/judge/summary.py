"""A run's summary: its figures, its gates' results and its verdict, as ``summary.json`` holds them.

``Summary`` is the one typed object every reader and writer shares, and the only code that reads or
writes ``summary.json``: ``Summary.read`` (a run's own file, whole or, for a re-judgement, as much of
it as an older or cut-short file holds), ``Summary.load`` (what ``compare`` is given: a run directory
or the file) and ``Summary.write``. Its verdict is computed in one place, ``Summary.passed``: every
gate passed, at least one request was judged, and the run was not interrupted. The JSON form carries
``passed`` and ``gates_passed`` for readers of the file (people, other versions), but reading it
recomputes them: a file edited to say PASS does not; only ``compare``, which judges the verdict a run
recorded, reads them back (``Summary.recorded_verdict``).

Its sections are typed records (``Causes``, ``KeepalivePerStream``, ``HarnessLag``, ``Arrival``,
``ServerMetrics``, ``Soak``, ``Coverage``: each a ``Section``), read from and written to the same JSON: a file
written before they were typed reads into them and is written back key for key.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from loadtests.client.outcome import OUTCOMES, UNJUDGED_OUTCOMES, Outcome
from loadtests.errors import INCONCLUSIVE_EXIT_CODE, UNWRITTEN_EXIT_CODE, SummaryError, UnknownName
from loadtests.judge.causes import (
    errors_owned,
    headers_withheld,
    keepalive_withheld,
    proxy_timeouts,
    raw_silences,
    run_proxy,
)
from loadtests.judge.gates import (
    DEFAULT_MAX_UNJUDGED_SHARE,
    FAIL,
    INCONCLUSIVE,
    PASS,
    GateResult,
    gate_is_noise,
    run_point,
    verdict_of,
)
from loadtests.judge.keep_alive import interval_line
from loadtests.record.figures import PERCENTILES, count_500s, http_500, inband_500, judged, quantiles
from loadtests.record.lag import lag_summary, timing_resolution_s
from loadtests.record.run_dir import RunDir
from loadtests.record.server_metrics import increase

KEEPALIVE_COUNTED_ON = "raw streams only (the openai SDK cannot see comments)"
SILENCE_BINS_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, float("inf"))
LATENCY_COLUMNS = ("ttfb_s", "ttft_s", "duration_s", "max_gap_s", "max_data_gap_s")


_S = TypeVar("_S", bound="Section")


@dataclass
class Section:
    """A section of summary.json as a typed record. Its known keys are its fields; a key this version
    does not know is kept in ``extra``. Invariant: ``from_json(data).to_json() == data``, key order
    included (a section read from a file writes back the keys it held, in their order; one built here
    writes its fields in order, then ``extra``), so summary.json is written as it always was and an
    older file reads. A key an older file lacks reads as its field's default."""

    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)
    """Keys of the file this version does not know, kept as they were."""
    keys: tuple[str, ...] | None = field(default=None, kw_only=True, compare=False, repr=False)
    """The keys its JSON held, in order; None for a section built here (every field, in order)."""

    @classmethod
    def known(cls) -> list[str]:
        return [item.name for item in dataclasses.fields(cls) if item.name not in ("extra", "keys")]

    @classmethod
    def from_json(cls: type[_S], data: dict[str, Any]) -> _S:
        names = cls.known()
        given = {key: value for key, value in data.items() if key in names}
        others = {key: value for key, value in data.items() if key not in names}
        return cls(**given, extra=others, keys=tuple(data))

    def __bool__(self) -> bool:
        """False for a section read from an empty object, as the object was."""
        return self.keys != ()

    def to_json(self) -> dict[str, Any]:
        names = self.known()
        order = self.keys if self.keys is not None else (*names, *self.extra)
        return {
            key: self.extra[key] if key in self.extra else getattr(self, key)
            for key in order
            if key in names or key in self.extra
        }


@dataclass
class Causes(Section):
    """Failures by cause (``causes``): statuses, proxy and gateway timeouts, keep-alive withheld,
    protocol and harness errors by message, keep-alive frames against silence."""

    status: dict[str, int] = field(default_factory=dict)
    proxy_timeouts_before_headers: int = 0
    cut_after_headers: int = 0
    proxy_timeouts: dict[str, Any] | None = None
    """The rule ``no_proxy_timeouts`` judges by (``loadtests.judge.causes``' ``as_dict``), with its ``line``."""
    keepalive_withheld: dict[str, Any] | None = None
    """Keep-alive withheld on the way (``KeepAliveWithheld.as_dict``), with its ``line``; None when not."""
    writes_merged: dict[str, Any] | None = None
    """Token frames merged on the way (``loadtests.judge.causes.WritesMerged.as_dict``, with its
    ``line``), set by the judgement, which reads the frames; None when not."""
    gateway_500s: dict[str, Any] | None = None
    """The run's 500s (HTTP and in-band) by who wrote them, when a gateway wrote or relayed any
    (``loadtests.judge.causes.ErrorsOwned.as_dict``, with its ``line``); None when none did."""
    headers_withheld: dict[str, Any] | None = None
    """Response headers held until the first token (``HeadersWithheld.as_dict``), with its ``line``;
    None when not (and in summaries written before it)."""
    protocol_errors: dict[str, int] = field(default_factory=dict)
    harness_errors: dict[str, int] = field(default_factory=dict)
    malformed_usage: int = 0
    keepalive_vs_silence: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class KeepalivePerStream(Section):
    """Keep-alive frames per 200 stream, over the raw streams (``keepalive_per_stream``); ``silent_s``
    the seconds those streams waited for their first token, summed (from the send, as
    ``keepalive_covered`` measures it), and ``per_silent_s`` their keep-alive frames over it (None
    without silence; both absent from summaries written before them)."""

    streams: int = 0
    mean: float | None = None
    max: int | None = None
    counted_on: str = KEEPALIVE_COUNTED_ON
    silent_s: float | None = None
    per_silent_s: float | None = None


@dataclass
class HarnessLag(Section):
    """The harness's event-loop lag in milliseconds (``harness_lag_ms``,
    ``loadtests.record.lag.lag_summary``): over every sample and ``by_worker``; ``limit_ms`` and
    ``seconds_above_limit`` only when the run set a limit."""

    limit_ms: float | None = None
    samples: int = 0
    p50: float | None = None
    p99: float | None = None
    max: float | None = None
    seconds_above_limit: float | None = None
    by_worker: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Arrival(Section):
    """Open loop (``--rate``): the schedule asked for (the settings' ``open_loop``) against what was
    sent (``arrival``, ``loadtests.judge.summary.arrival``)."""

    rate: float = 0.0
    arrival: str = ""
    seed: int | None = None
    max_in_flight: int | None = None
    scheduled: int = 0
    sent: int = 0
    not_sent: int = 0
    span_s: float = 0.0
    rate_achieved: float | None = None
    late: int = 0
    start_lateness_s: dict[str, float | None] = field(default_factory=dict)
    ttft_from_schedule_s: dict[str, float | None] = field(default_factory=dict)
    ttft_from_send_s: dict[str, float | None] = field(default_factory=dict)


@dataclass
class ServerMetrics(Section):
    """The server's own figures from its ``/metrics`` (``server_metrics``,
    ``loadtests.record.server_metrics.server_metrics_summary``), or ``available: false`` and why."""

    available: bool = False
    reason: str | None = None
    scrapes: int = 0
    names: dict[str, str] = field(default_factory=dict)
    running: dict[str, float] | None = None
    waiting: dict[str, float] | None = None
    kv_cache_usage: dict[str, float] | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None

    def concept(self, name: str) -> Any:
        """The figures of one concept (``running``, ``waiting``, ..., ``prompt_tokens``), None when
        the section has none."""
        return getattr(self, name, None) if name in self.known() else self.extra.get(name)


@dataclass
class Soak(Section):
    """The soak job's section (``soak``): ``partial`` (a checkpoint of a run still going), its planned
    ``duration_s``, the drift ``limits`` and its ``windows``, each a row of figures and its verdict."""

    partial: bool = False
    duration_s: float | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    windows: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Coverage(Section):
    """What the verdict covers (``coverage``, made by ``coverage``): the requests the gates judged
    against the requests each source saw, and why the others were not judged. The sources: the rows
    recorded; Locust's own count of the run's requests (a live run; in a re-judgement as the run
    recorded it); the server's ``http_requests_total`` on the routes the run used, between its first
    and last scrape, set against the rows that ended in that span; rows the run held but its disk
    refused; workers' requests whose rows never arrived; the open loop's schedule. ``lost`` (rows
    never recorded) is the most any source shows, never their sum (they see the same requests);
    ``seen`` the requests the run sent, by the best count. Invariant: when more than ``max_share``
    of the requests the run made or scheduled were lost or never sent, the verdict is no PASS
    (``requests_completed`` is unjudged, ``shortfall`` says why)."""

    judged: int = 0
    seen: int = 0
    stopped: int = 0
    lost: int = 0
    not_sent: int = 0
    scheduled: int | None = None
    locust: int | None = None
    """Requests Locust's statistics counted (it never counts stopped or unsent ones); None when not known."""
    server: int | None = None
    """The server's own count of requests on the run's routes between its first and last scrape."""
    server_rows: int | None = None
    """Rows that ended in that span (or within ``SCRAPE_EDGE_S`` of it): what ``server`` is set against."""
    server_span_s: float | None = None
    server_weighed: bool = False
    """Whether a shortfall against the server's count counts as lost: only for the bundled server the
    run started (``server_unweighed_why`` says why not)."""
    server_unweighed_why: str | None = None
    """Why the server's count is shown but not weighed; None when it is weighed (and in summaries
    written before it, whose line gives the ``--host`` reason)."""
    unwritten: int = 0
    """Rows the run held and could not write into its tables: the disk refused them, or they did not
    fit the schema (kept as text in ``unwritable-rows.jsonl``)."""
    workers_missing: int = 0
    max_share: float = DEFAULT_MAX_UNJUDGED_SHARE

    @property
    def total(self) -> int:
        """Every request the run made or scheduled: those it sent, by the best count, and those never sent."""
        return self.seen + self.not_sent

    @property
    def unjudged_share(self) -> float:
        """The share of ``total`` lost or never sent (stopped streams are neither: the run ended them)."""
        return (self.lost + self.not_sent) / self.total if self.total else 0.0

    def shortfall(self) -> str | None:
        """Why the verdict covers too few of the run's requests, in a few words; None when it covers enough."""
        if self.unjudged_share <= self.max_share:
            return None
        missing = self.lost + self.not_sent
        return (
            f"{missing} of {self.total} requests {_lost_or_unsent(self)} ({self.unjudged_share:.0%}, over the "
            f"{self.max_share:.0%} allowed): the verdict would cover too few"
        )

    def line(self) -> str:
        """``coverage: N of M requests judged (...)`` in one console line: judged of seen, each source's
        count, what was lost and never sent, and the share allowed when it is exceeded."""
        counted = []
        if self.locust is not None:
            counted.append(f"Locust counted {self.locust}")
        if self.server is not None:
            why = self.server_unweighed_why or HOST_SERVES_OTHERS
            weighed = "" if self.server_weighed else f"; not weighed: {why}"
            counted.append(
                f"the server {self.server} over its {self.server_span_s or 0.0:.0f} s of scrapes, "
                f"against {self.server_rows} rows that ended then{weighed}"
            )
        if self.scheduled is not None:
            counted.append(f"{self.scheduled} scheduled")
        said = f"coverage: {self.judged} of {self.seen} requests judged"
        said += f" ({', '.join(counted)})" if counted else ""
        if self.stopped:
            said += f"; {self.stopped} stopped by the run's end"
        if self.lost:
            how_lost = [f"the run could not write {self.unwritten}"] if self.unwritten else []
            how_lost += (
                [f"{self.workers_missing} from workers whose rows never arrived"] if self.workers_missing else []
            )
            said += f"; {self.lost} lost (never recorded{': ' + ', '.join(how_lost) if how_lost else ''})"
        if self.not_sent:
            said += f"; {self.not_sent} never sent"
        shortfall = self.shortfall()
        if shortfall is not None:
            said += f"; {self.unjudged_share:.0%} not judged, over the {self.max_share:.0%} allowed"
        return said


def _lost_or_unsent(section: Coverage) -> str:
    if section.lost and section.not_sent:
        return "lost or never sent"
    return "lost (never recorded)" if section.lost else "never sent"


@dataclass
class Summary:
    scenario: str
    settings: dict[str, Any]
    frame_sample_rate: float
    requests: int
    outcomes: dict[str, int]
    http_500: int
    inband_500: int
    keepalive_frames: int
    causes: Causes
    latency: dict[str, dict[str, float | int | None]]
    keepalive_per_stream: KeepalivePerStream
    gate_specs: list[dict[str, Any]]
    gates: list[GateResult]
    harness_lag_ms: HarnessLag | None = None
    arrival: Arrival | None = None
    """Open loop (``--rate``): the schedule asked for against what was sent (``arrival``)."""
    server_metrics: ServerMetrics | None = None
    """The server's own figures from its ``/metrics`` (``loadtests.record.server_metrics.server_metrics_summary``),
    or ``available: false`` and why."""
    ended: str | None = None
    interrupted: str | None = None
    """Why the run ended before its planned end (a signal, or no summary of its own): it fails."""
    soak: Soak | None = None
    """The soak job's section: ``partial`` (a checkpoint of a run still going), its planned
    ``duration_s``, the drift ``limits`` and ``windows``."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys of the file this version does not know, kept as they were."""
    said: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    """The keys its file gave a value (not null): a re-judgement carries over only what was said.
    Empty for a summary just computed."""
    point: list[str] | None = None
    """The names of the gates that are the run's point (its scenario's own): one of them unjudged
    makes the run INCONCLUSIVE. None (not recorded): see ``point_names``."""
    lost_rows: dict[str, dict[str, Any]] | None = None
    """Workers whose rows never all reached the master, with their counts (``RunTables.lost_rows``)."""
    parts: dict[str, int] | None = None
    """Each parquet file of the run directory's tables and its rows, as judged (``RunDir.part_counts``):
    a later ``report`` refuses a directory that lost or changed one. None: not recorded (older runs)."""
    coverage: Coverage | None = None
    """What the verdict covers: the requests judged against those each source saw (``Coverage``);
    None in a summary written before it was recorded."""
    gate_sources: dict[str, dict[str, str]] = field(default_factory=dict)
    """Where each stored gate type sse-soak does not ship is defined (``loadtests.judge.gates.gate_sources``),
    so a later ``report`` can load a user's gate class; in the file only when there is one."""
    unrebuilt: tuple[str, ...] = field(default=(), compare=False)
    """One line for each stored gate this judgement could not rebuild (judged unjudged instead); never
    in the file: ``report`` says them."""
    unwritten: str | None = field(default=None, compare=False)
    """Why this summary could not be written into its run directory (``RecordNotWritten``'s line);
    never in the file. A run with it exits ``UNWRITTEN_EXIT_CODE``."""
    stated: tuple[bool, bool] | None = field(default=None, compare=False, repr=False)
    stated_verdict: str | None = field(default=None, compare=False, repr=False)
    """``verdict`` as its file stated it (PASS, FAIL or INCONCLUSIVE); None for an older file."""
    """``(gates_passed, passed)`` as its file stated them (an older file: ``passed`` for both); None
    for a summary just computed, or a file that stated no verdict."""

    @property
    def requests_judged(self) -> int:
        """Requests the gates judged: every row but the streams the run itself stopped and the
        scheduled requests it never sent."""
        return self.requests - sum(self.outcomes.get(outcome, 0) for outcome in UNJUDGED_OUTCOMES)

    @property
    def gates_passed(self) -> bool:
        """No gate failed (an unjudged gate is no failure)."""
        return all(gate.passed or gate.skipped for gate in self.gates)

    @property
    def verdict(self) -> str:
        """PASS, FAIL or INCONCLUSIVE by ``loadtests.judge.gates.verdict_of``, the one rule (a soak's
        windows are judged by it too); never read back from a file."""
        return verdict_of(self.gates, self.point_names, self.requests_judged, self.interrupted)

    @property
    def unjudged_point(self) -> list[GateResult]:
        """The gates of the run's point that could not be judged."""
        points = self.point_names
        return [gate for gate in self.gates if gate.skipped and gate.name in points]

    @property
    def point_names(self) -> set[str]:
        """The run's point by ``run_point``: as recorded; for a summary that recorded none, the gates
        it stored (the scenario's and the run's, not the always-on ones); ``requests_completed`` always."""
        return set(run_point(self.point, [str(spec.get("name")) for spec in self.gate_specs]))

    @property
    def passed(self) -> bool:
        """The verdict is PASS."""
        return self.verdict == PASS

    @property
    def exit_code(self) -> int:
        """0 for PASS, 1 for FAIL, ``INCONCLUSIVE_EXIT_CODE`` for INCONCLUSIVE; ``UNWRITTEN_EXIT_CODE``
        whatever the verdict when the summary could not be written where it belongs."""
        if self.unwritten is not None:
            return UNWRITTEN_EXIT_CODE
        return {PASS: 0, FAIL: 1}.get(self.verdict, INCONCLUSIVE_EXIT_CODE)

    @property
    def recorded(self) -> str:
        """The verdict as the run recorded it: its file's ``verdict``, else PASS or FAIL as its file's
        ``passed`` said (an older file), else as computed."""
        if self.stated_verdict is not None:
            return self.stated_verdict
        if self.stated is not None:
            return PASS if self.stated[1] else FAIL
        return self.verdict

    @property
    def recorded_verdict(self) -> tuple[bool, bool]:
        """``(gates_passed, passed)`` as the run recorded them: as its file stated, else as computed."""
        return self.stated if self.stated is not None else (self.gates_passed, self.passed)

    def causes_lines(self) -> list[str]:
        """The ``causes:`` line (``loadtests.judge.causes``'s one phrase, and the statuses) and, when the
        run found keep-alive withheld, its line: what the console, and report.html, say of causes."""
        causes = self.causes
        timeouts = causes.proxy_timeouts or {}
        said = timeouts.get("line") or (  # a summary written before the one rule of loadtests.judge.causes
            f"{causes.proxy_timeouts_before_headers} proxy 504s before headers, "
            f"{causes.cut_after_headers} streams cut after headers"
        )
        lines = [f"causes: {said}; statuses {causes.status or '{}'}"]
        for withheld in (causes.headers_withheld, causes.keepalive_withheld):
            if withheld:
                lines.append(withheld["line"])
        if causes.gateway_500s:
            lines.append(causes.gateway_500s["line"])
        if causes.writes_merged:
            lines.append(causes.writes_merged["line"])
        return lines

    def console_lines(self) -> list[str]:
        """What a finished run prints before its ``ended`` and verdict lines: its requests by outcome,
        its arrivals (open loop), what its verdict covers (``Coverage.line``), the causes of failures,
        and each gate's line but those of gates outside the run's point that had nothing to judge
        (``truncation_honoured: 0/0`` in a scenario that never truncates): noise there, kept in
        summary.json and counted in the verdict line."""
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in self.outcomes.items() if n)
        lines = [f"requests: {self.requests} ({outcomes or 'none'})"]
        if self.arrival is not None:
            lines.append(arrival_line(self.arrival))
        if self.coverage is not None:
            lines.append(self.coverage.line())
        inferred = interval_line(self.settings)
        lines += [inferred] if inferred else []
        lines += self.causes_lines()
        lag = self.harness_lag_ms
        if lag is not None and lag.p99 is not None:
            coarse_ms = timing_resolution_s(self.settings) * 1000.0
            coalesced = f", plus reads coalesced to {coarse_ms:g} ms (--timing-resolution-ms)" if coarse_ms else ""
            lines.append(
                f"timing: good to {lag.p99 + coarse_ms:.1f} ms (the harness's event-loop lag p99 while streams were "
                f"open, max {lag.max or 0.0:.1f} ms{coalesced}; a request open during a stall longer than a gate's "
                "tolerance is unjudged by it, not failed)"
            )
        read_path = self.settings.get("read_path")
        if read_path is not None:  # recorded since the compiled read path exists
            lines.append(read_path_line(read_path))
        return lines + [gate.line() for gate in self.gates if not gate_is_noise(gate, self.point_names)]

    def windows_line(self) -> str | None:
        """A soak's windows by verdict in one line, naming the windows that did not pass and why
        (``windows: 8 PASS, 1 FAIL (4: no_http_500), 1 INCONCLUSIVE (10: unjudged covered)``);
        None for a run without windows."""
        windows = [window for window in (self.soak.windows if self.soak else []) if window.get("verdict")]
        if not windows:
            return None
        parts = []
        for verdict in (PASS, FAIL, INCONCLUSIVE):
            chosen = [window for window in windows if window["verdict"] == verdict]
            if not chosen:
                continue
            why = [
                f"{window['window']}: " + (window.get("failed") or f"unjudged {window.get('unjudged') or 'no request'}")
                for window in chosen[:3]
            ]
            more = f", {len(chosen) - 3} more" if len(chosen) > 3 else ""
            parts.append(f"{len(chosen)} {verdict}" + (f" ({'; '.join(why)}{more})" if verdict != PASS else ""))
        return f"windows: {', '.join(parts)}"

    def verdict_line(self) -> str:
        """``verdict: PASS``, or ``verdict: FAIL (...)`` / ``verdict: INCONCLUSIVE (...)`` with why, in
        one line: the interruption, what could not be judged, too few requests covered, the gates
        passed on how many requests, the failed gates. Every verdict is said after its ``coverage:``
        line (``Coverage.line``: judged of seen, by source)."""
        verdict = self.verdict
        if verdict == PASS:
            return "verdict: PASS"
        passed = sum(1 for gate in self.gates if gate.passed and not gate.skipped)  # skipped: judged nothing
        failed = [gate.name for gate in self.gates if not gate.passed and not gate.skipped]
        unjudged = len(self.gates) - passed - len(failed)
        reasons = [f"interrupted: {self.interrupted}"] if self.interrupted else []
        if not self.requests_judged and not failed:
            reasons.append("no request finished")
        elif verdict == INCONCLUSIVE:
            reasons.append("its point could not be judged: " + ", ".join(g.name for g in self.unjudged_point))
        shortfall = self.coverage.shortfall() if self.coverage is not None else None
        if shortfall is not None:
            reasons.append(shortfall)
        counted = f"{passed}/{len(self.gates)} gates passed on {self.requests_judged} requests judged"
        reasons.append(counted + (f", {unjudged} unjudged" if unjudged else ""))
        if failed:
            reasons.append("failed: " + ", ".join(failed))
        return f"verdict: {verdict} ({'; '.join(reasons)})"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            **self.extra,
            "scenario": self.scenario,
            "settings": self.settings,
            "frame_sample_rate": self.frame_sample_rate,
            "requests": self.requests,
            "outcomes": self.outcomes,
            "http_500": self.http_500,
            "inband_500": self.inband_500,
            "keepalive_frames": self.keepalive_frames,
            "causes": self.causes.to_json(),
            "latency": self.latency,
            "keepalive_per_stream": self.keepalive_per_stream.to_json(),
        }
        if self.harness_lag_ms is not None:
            data["harness_lag_ms"] = self.harness_lag_ms.to_json()
        if self.arrival is not None:
            data["arrival"] = self.arrival.to_json()
        if self.server_metrics is not None:
            data["server_metrics"] = self.server_metrics.to_json()
        data["gate_specs"] = self.gate_specs
        data["gates"] = [dataclasses.asdict(gate) for gate in self.gates]
        if self.soak is not None:
            data["soak"] = self.soak.to_json()
        if self.point is not None:
            data["point"] = self.point
        if self.lost_rows:
            data["lost_rows"] = self.lost_rows
        if self.coverage is not None:
            data["coverage"] = self.coverage.to_json()
        if self.parts is not None:
            data["parts"] = self.parts
        if self.gate_sources:
            data["gate_sources"] = self.gate_sources
        data.update(
            ended=self.ended,
            interrupted=self.interrupted,
            gates_passed=self.gates_passed,
            passed=self.passed,
            verdict=self.verdict,
        )
        return data

    @classmethod
    def from_json(
        cls, data: dict[str, Any], source: str = "summary.json", required: Sequence[str] | None = None
    ) -> Summary:
        """The summary in ``data``; raises ``SummaryError`` naming ``source`` when a field is of the wrong
        type or one of ``required`` (by default those of a whole summary) is missing. A figure a file
        does not hold is zero or empty: ``said`` tells which it held."""
        check_fields(data, source, _FIELDS, required=_REQUIRED if required is None else required)
        try:
            gates = [_gate_result(gate) for gate in data.get("gates", [])]
        except (KeyError, TypeError) as exc:
            raise SummaryError(f"{source}: not a run summary (a gate without {exc})") from None
        fields = {field.name for field in dataclasses.fields(cls)}
        passed = data.get("passed")
        return cls(
            scenario=data.get("scenario", ""),
            settings=data.get("settings") or {},
            frame_sample_rate=data.get("frame_sample_rate", 1.0),
            requests=data.get("requests", 0),
            outcomes=dict(data.get("outcomes", {})),
            http_500=data.get("http_500", 0),
            inband_500=data.get("inband_500", 0),
            keepalive_frames=data.get("keepalive_frames", 0),
            causes=_section(Causes, data.get("causes", {}), source),
            latency=data.get("latency", {}),
            keepalive_per_stream=_section(KeepalivePerStream, data.get("keepalive_per_stream", {}), source),
            gate_specs=data.get("gate_specs", []),
            gates=gates,
            harness_lag_ms=_optional_section(HarnessLag, data.get("harness_lag_ms"), source),
            arrival=_optional_section(Arrival, data.get("arrival"), source),
            server_metrics=_optional_section(ServerMetrics, data.get("server_metrics"), source),
            ended=data.get("ended"),
            interrupted=data.get("interrupted"),
            soak=_optional_section(Soak, data.get("soak"), source),
            point=data.get("point"),
            parts=data.get("parts"),
            lost_rows=data.get("lost_rows"),
            coverage=_optional_section(Coverage, data.get("coverage"), source),
            gate_sources=dict(data.get("gate_sources") or {}),
            extra={key: value for key, value in data.items() if key not in fields | _COMPUTED},
            said=frozenset(key for key, value in data.items() if value is not None),
            stated=None if passed is None else (data.get("gates_passed", passed), passed),
            stated_verdict=data.get("verdict") if data.get("verdict") in (PASS, FAIL, INCONCLUSIVE) else None,
        )

    @classmethod
    def read(cls, file: Path, *, whole: bool = True) -> Summary:
        """The summary in ``file``; ``whole=False`` for a re-judgement, which needs no field (it
        recomputes the figures and carries over what the file ``said``). Raises ``SummaryError``."""
        return cls.from_json(_read_object(file), str(file), required=_REQUIRED if whole else ())

    @classmethod
    def load(cls, path: str | Path) -> Summary:
        """A run directory's summary, or the summary file itself, as ``compare`` reads it: with its
        counts and its stated verdict. Raises ``SummaryError`` naming the path and what is wrong."""
        path = Path(path)
        if not path.exists():
            raise SummaryError(f"{path}: no such file or directory")
        file = RunDir(path).summary if path.is_dir() else path
        if path.is_dir() and not file.exists():
            raise SummaryError(f"{path}: no summary.json in this directory (not a run directory, or one still running)")
        data = _read_object(file)
        problem = _comparable_problem(data)
        if problem is not None:
            raise SummaryError(f"{file}: {problem}")
        return cls.from_json(data, str(file), required=_COMPARED)

    def write(self, run: RunDir) -> Path:
        """Write ``summary.json`` into ``run`` (the file ``read`` reads back equal) and return its path."""
        return run.write_json(RunDir.SUMMARY, self.to_json())


def _section(kind: type[_S], data: Any, source: str) -> _S:
    """The section ``data`` holds; ``SummaryError`` naming ``source`` when it is not an object."""
    if not isinstance(data, dict):
        raise SummaryError(f"{source}: not a run summary (the {kind.__name__} section is not an object)")
    return kind.from_json(data)


def _optional_section(kind: type[_S], data: Any, source: str) -> _S | None:
    return None if data is None else _section(kind, data, source)


_COMPUTED = {"passed", "gates_passed", "verdict"}
"""Written for readers of the file, never read back: ``Summary`` computes them."""


def _gate_result(gate: dict[str, Any]) -> GateResult:
    judged = gate.get("judged_rows")
    return GateResult(
        str(gate["name"]),
        bool(gate["passed"]),
        str(gate["detail"]),
        bool(gate.get("skipped", False)),
        int(gate.get("unjudged_rows") or 0),
        None if judged is None else int(judged),
    )


def check_fields(data: dict[str, Any], source: str, keys: Iterable[str], required: Iterable[str] = ()) -> None:
    """Raise ``SummaryError`` naming ``source`` for the first of ``keys`` present with a value of the
    wrong type, then for the first of ``required`` missing."""
    for key in keys:
        valid, expected = _FIELDS[key]
        if key in data and not valid(data[key]):
            raise SummaryError(f"{source}: not a run summary ({key!r} must be {expected})")
    for key in required:
        if key not in data:
            raise SummaryError(f"{source}: not a run summary (no {key!r})")


def _comparable_problem(data: dict[str, Any]) -> str | None:
    """Why ``data`` is no summary ``compare`` can read, or None; every missing field, then every one
    of the wrong type it reads, named at once (a file of hand-edited figures gets one answer)."""
    missing = [key for key in _COMPARED if key not in data]
    if missing:
        return f"not a run summary (no {', '.join(repr(key) for key in missing)})"
    wrong = [key for key in _COMPARED_TYPES if key in data and not _FIELDS[key][0](data[key])]
    if wrong:
        return f"not a run summary ({', '.join(repr(key) for key in wrong)} of the wrong type)"
    return None


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _read_object(file: Path) -> dict[str, Any]:
    """The JSON object in ``file``; raises ``SummaryError`` naming it when it cannot be read, is not
    JSON, or holds anything but an object."""
    try:
        value = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SummaryError(f"{file}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SummaryError(f"{file}: not a run summary (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{file}: not a run summary (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), "null")
        raise SummaryError(f"{file}: not a run summary (a JSON {kind}, expected an object)")
    return value


def _optional(kind: type | tuple[type, ...]) -> Callable[[Any], bool]:
    return lambda value: value is None or isinstance(value, kind)


def is_count(value: Any) -> bool:
    """A JSON count: a non-negative integer, not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _share(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


def _number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def _optional_objects(value: Any) -> bool:
    """None, or an object whose values are objects (``lost_rows``' figures by worker)."""
    return value is None or (isinstance(value, dict) and all(isinstance(entry, dict) for entry in value.values()))


def _figures(value: Any) -> bool:
    """An object of figures by name: ``latency``'s ``{"ttft_s": {"p50": 0.2, ...}, ...}``."""
    return isinstance(value, dict) and all(
        isinstance(entry, dict) and all(map(_number_or_none, entry.values())) for entry in value.values()
    )


_REQUIRED = ("scenario", "requests", "outcomes", "http_500", "inband_500")
_COMPARED = ("requests", "http_500", "inband_500", "outcomes", "passed", "latency", "keepalive_per_stream")
"""What ``compare`` needs of a file (no ``scenario``: a baseline kept by hand may lack it)."""
_COMPARED_TYPES = (*_COMPARED, "gates_passed")
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "scenario": (lambda v: isinstance(v, str), "a string"),
    "requests": (is_count, "a count"),
    "outcomes": (lambda v: isinstance(v, dict) and all(map(is_count, v.values())), "an object of counts"),
    "http_500": (is_count, "a count"),
    "inband_500": (is_count, "a count"),
    "gate_specs": (lambda v: isinstance(v, list) and all(isinstance(s, dict) for s in v), "a list of objects"),
    "gates": (lambda v: isinstance(v, list) and all(isinstance(g, dict) for g in v), "a list of objects"),
    "settings": (_optional(dict), "an object"),
    "frame_sample_rate": (_share, "a number from 0 to 1"),
    "ended": (_optional(str), "a string"),
    "interrupted": (_optional(str), "a string"),
    "soak": (_optional(dict), "an object"),
    "point": (lambda v: v is None or (isinstance(v, list) and all(isinstance(n, str) for n in v)), "a list of names"),
    "parts": (lambda v: v is None or (isinstance(v, dict) and all(map(is_count, v.values()))), "an object of counts"),
    "lost_rows": (
        lambda v: v is None or (isinstance(v, dict) and all(isinstance(w, dict) for w in v.values())),
        "an object",
    ),
    "arrival": (_optional(dict), "an object"),
    "coverage": (_optional(dict), "an object"),
    "gate_sources": (_optional_objects, "an object of objects"),
    "server_metrics": (_optional(dict), "an object"),
    "passed": (lambda v: isinstance(v, bool), "true or false"),
    "gates_passed": (lambda v: isinstance(v, bool), "true or false"),
    "latency": (_figures, "an object of figures"),
    "keepalive_per_stream": (lambda v: isinstance(v, dict) and _number_or_none(v.get("mean")), "an object"),
}


def causes(
    requests: pd.DataFrame, settings: dict[str, Any] | None = None, read_timeout: float | None = None
) -> dict[str, Any]:
    """Failures by cause: status codes, proxy and gateway timeouts before the headers versus streams
    cut after them (``proxy_timeouts``: the rule ``no_proxy_timeouts`` judges by, with its line), keep-
    alive comments withheld on the way (``keepalive_withheld``, the line ``keepalive_covered`` says),
    protocol and harness errors by message, and keep-alive frames per stream against the silence each
    stream endured (raw streams only: the SDK cannot see comments). ``settings`` are the run's: its
    ``proxy``, ``keep_alive_interval`` and ``proxy_read_timeout``. A read timeout is judged (and
    named) only where one was in force: ``read_timeout``, the ``no_proxy_timeouts`` gate's, when the
    scenario declares that gate (its line and this one never disagree), else the settings' when the
    run started a proxy; a run without either had no proxy timer, and no window is named."""
    settings = settings or {}
    proxy = settings.get("proxy")
    if read_timeout is None and run_proxy(proxy) is not None:
        read_timeout = settings.get("proxy_read_timeout")
    verdict_rows = judged(requests)  # the rows the gates read: their lines and these never disagree
    found = proxy_timeouts(verdict_rows, read_timeout, proxy)
    withheld = keepalive_withheld(
        verdict_rows,
        settings.get("keep_alive_interval"),
        proxy,
        found.read_timeout or settings.get("proxy_read_timeout"),
    )
    held = headers_withheld(verdict_rows, proxy)
    five_hundreds = verdict_rows[http_500(verdict_rows) | inband_500(verdict_rows)]
    owned = errors_owned(five_hundreds[five_hundreds["outcome"] != Outcome.GATEWAY_TIMEOUT])
    statuses = requests["status"].dropna().astype(int).value_counts().sort_index()
    streamed = requests[(requests["status"] == 200) & requests["keepalive_frames"].notna()]  # raw streams only
    bins = pd.cut(streamed["silence_before_first_token_s"], SILENCE_BINS_S, right=False)
    by_silence = streamed.groupby(bins, observed=True)["keepalive_frames"].agg(["size", "mean", "min", "max"])
    return {
        "status": {str(code): int(n) for code, n in statuses.items()},
        "proxy_timeouts_before_headers": len(found.before_headers),
        "cut_after_headers": int((requests["outcome"] == Outcome.CUT).sum()),
        "proxy_timeouts": {**found.as_dict(), "line": found.phrase()},
        "keepalive_withheld": None if withheld is None else withheld.as_dict(),
        "writes_merged": None,  # the judgement sets it from the frames (loadtests.run.judging)
        "gateway_500s": None if not owned.phrase() else {**owned.as_dict(), "line": f"500s: {owned.phrase()}"},
        "headers_withheld": None if held is None else held.as_dict(),
        "protocol_errors": _messages(requests[requests["outcome"] == Outcome.PROTOCOL_ERROR]),
        "harness_errors": _messages(requests[requests["outcome"] == Outcome.HARNESS_ERROR]),
        "malformed_usage": int(requests["raw_usage"].notna().sum()),
        "keepalive_vs_silence": [
            {
                "silence_s": f"{interval.left:g}-{interval.right:g}",
                "streams": int(row["size"]),
                "keepalive_mean": round(float(row["mean"]), 3),
                "keepalive_min": int(row["min"]),
                "keepalive_max": int(row["max"]),
            }
            for interval, row in by_silence.iterrows()
        ],
    }


def _messages(rows: pd.DataFrame) -> dict[str, int]:
    """Count of rows per ``error_message``, most frequent first."""
    return {str(message): int(n) for message, n in rows["error_message"].fillna("").value_counts().items()}


def latency(requests: pd.DataFrame) -> dict[str, dict[str, float | int | None]]:
    """p50/p90/p95/p99/max of each timing over the requests that have it."""
    return {column: spread(requests[column]) for column in LATENCY_COLUMNS}


def spread(values: pd.Series) -> dict[str, float | int | None]:
    """``count``, p50/p90/p95/p99 and ``max`` of the values present, rounded to the microsecond: one
    entry of the ``latency`` section."""
    present = values.dropna()
    entry: dict[str, float | int | None] = {"count": len(present)}
    entry.update({f"p{p}": q for p, q in zip(PERCENTILES, quantiles(present, PERCENTILES), strict=True)})
    entry["max"] = round(float(present.max()), 6) if len(present) else None
    return entry


TOKEN_GAP = "token_gap_s"
"""The ``latency`` entry of the gaps between tokens (``token_gaps``): every gap, not one per stream.
Set by the judgement, which reads the frames (``loadtests.run.judging``); absent from a soak's
checkpoints and from summaries written before it."""


def keepalive_per_stream(requests: pd.DataFrame) -> dict[str, Any]:
    """Keep-alive frames per 200 stream, over the streams whose client sees comments (raw), and per
    second those streams waited silent for their first token (``KeepalivePerStream``)."""
    streamed = requests.loc[requests["status"] == 200, "keepalive_frames"].dropna()
    if streamed.empty:
        return {"streams": 0, "mean": None, "max": None, "counted_on": KEEPALIVE_COUNTED_ON}
    mean, most = round(float(streamed.mean()), 4), int(streamed.max())
    raw, silence = raw_silences(requests)
    timed = silence.notna()
    silent = float(silence[timed].clip(lower=0).sum())
    frames = float(raw.loc[timed, "keepalive_frames"].astype("float64").sum())
    return {
        "streams": len(streamed),
        "mean": mean,
        "max": most,
        "counted_on": KEEPALIVE_COUNTED_ON,
        "silent_s": round(silent, 6),
        "per_silent_s": round(frames / silent, 6) if silent > 0 else None,
    }


def summarize(
    scenario: str,
    requests: pd.DataFrame,
    gates: Sequence[GateResult],
    settings: dict[str, Any] | None = None,
    gate_specs: Sequence[dict[str, Any]] = (),
    frame_sample_rate: float = 1.0,
    lag: pd.DataFrame | None = None,
    lag_limit_ms: float | None = None,
    read_timeout: float | None = None,
) -> Summary:
    """The summary of a run's request table and its gates' results; ``harness_lag_ms`` condenses
    ``lag`` (the harness's own lag samples) against ``lag_limit_ms``, absent without samples;
    ``read_timeout`` is the ``no_proxy_timeouts`` gate's, for the causes (else the settings')."""
    counts = requests["outcome"].value_counts()
    http_500, inband_500 = count_500s(requests)
    return Summary(
        scenario=scenario,
        settings=settings or {},
        frame_sample_rate=frame_sample_rate,
        requests=len(requests),
        outcomes={outcome.value: int(counts.get(outcome, 0)) for outcome in OUTCOMES},
        http_500=http_500,
        inband_500=inband_500,
        keepalive_frames=int(requests["keepalive_frames"].sum()),
        causes=Causes.from_json(causes(requests, settings, read_timeout)),
        latency=latency(requests),
        keepalive_per_stream=KeepalivePerStream.from_json(keepalive_per_stream(requests)),
        gate_specs=list(gate_specs),
        gates=list(gates),
        harness_lag_ms=None if lag is None else HarnessLag.from_json(lag_summary(lag, lag_limit_ms)),
        arrival=_optional_section(Arrival, arrival((settings or {}).get("open_loop"), requests), "arrival"),
    )


LATE_S = 0.010
"""A scheduled request that started later than this started late (``late`` in the arrival section)."""


def arrival(open_loop: dict[str, Any] | None, requests: pd.DataFrame) -> dict[str, Any] | None:
    """Open loop: the rate asked for, how many requests the schedule made due and how many were sent,
    the rate achieved over the schedule's span, how late requests started, and TTFT measured from the
    scheduled time (what a user arriving then waited) beside TTFT from the send. None in a closed loop."""
    if not open_loop:
        return None
    rate = float(open_loop["rate"])
    scheduled = requests[requests["scheduled_time"].notna()]
    sent = scheduled[scheduled["outcome"] != Outcome.NOT_SENT]
    span = (
        float(scheduled["scheduled_time"].max() - scheduled["scheduled_time"].min()) + 1 / rate
        if len(scheduled)
        else 0.0
    )
    lateness = sent["start_lateness_s"].dropna()
    from_schedule = (sent["start_lateness_s"] + sent["ttft_s"]).dropna()
    return {
        **open_loop,
        "scheduled": len(scheduled),
        "sent": len(sent),
        Outcome.NOT_SENT.value: len(scheduled) - len(sent),
        "span_s": round(span, 3),
        "rate_achieved": round(len(sent) / span, 3) if span else None,
        "late": int((lateness > LATE_S).sum()),
        "start_lateness_s": _spread(lateness),
        "ttft_from_schedule_s": _spread(from_schedule),
        "ttft_from_send_s": _spread(sent["ttft_s"].dropna()),
    }


def _spread(values: pd.Series) -> dict[str, float | None]:
    """p50, p99 and max, rounded to the microsecond; None each when there are no values."""
    p50, p99 = quantiles(values, (50, 99))
    return {"p50": p50, "p99": p99, "max": round(float(values.max()), 6) if len(values) else None}


ARRIVAL_LINE_KEYS = ("rate", "arrival", "scheduled", "sent", "not_sent", "late", "rate_achieved", "start_lateness_s")


def arrival_line(section: Arrival | dict[str, Any]) -> str:
    """The arrival section (or its JSON, as ``arrival`` makes it) in one console line; ``KeyError`` for
    a section (a file's) that lacks a key it says (``UnknownName``, a ``KeyError``)."""
    if isinstance(section, dict):
        section = Arrival.from_json(section)
    absent = [key for key in ARRIVAL_LINE_KEYS if section.keys is not None and key not in section.keys]
    if absent:
        raise UnknownName(f"the arrival section has no {absent[0]!r}")
    achieved = "-" if section.rate_achieved is None else f"{section.rate_achieved:g}"
    lateness = section.start_lateness_s
    spread = f"p99 {_seconds(lateness.get('p99'))}, max {_seconds(lateness.get('max'))}"
    return (
        f"arrivals: asked {section.rate:g}/s ({section.arrival}), {section.scheduled} scheduled, "
        f"{section.sent} sent ({achieved}/s), {section.not_sent} not sent; "
        f"{section.late} started over {LATE_S * 1000:g} ms late ({spread})"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


SERVED_ROUTES = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
"""A row's ``route`` and the handler the server's ``http_requests_total`` counts it under
(``loadtests.declare.workload.ROUTE_PATHS``, as vLLM's instrumentator labels it)."""
SERVED_COUNTER = "http_requests_total"
SCRAPE_EDGE_S = 0.5
"""A request that ended this close outside the scrapes' span may be in the server's count (its end
is stamped by the client, the count by the server): it is set against the count, so ``lost`` by the
server's count is a lower bound."""


@dataclass(frozen=True)
class LiveCounts:
    """What only the live run knows of its requests: Locust's count of them, and the rows its disk
    refused (``Coverage.locust``, ``Coverage.unwritten``); a re-judgement carries them over."""

    locust: int | None = None
    unwritten: int = 0


HOST_SERVES_OTHERS = "a --host server may serve other clients"


def server_unweighed_why(settings: dict[str, Any]) -> str | None:
    """Why the server's own request count cannot count rows as lost, or None when it can: only the
    bundled server the run started serves the run's recorded requests alone. A ``--host`` server may
    serve others; a server the run started that is not the bundled one (``--server vllm``) is sent
    slot holders (``loadtests.load.slot_holders``) that the run never records."""
    if settings.get("host") is not None:
        return HOST_SERVES_OTHERS
    if (settings.get("server") or "bundled") != "bundled":
        return f"the {settings.get('server')} server also counts the run's slot holders, which are not recorded"
    return None


def coverage(
    requests: pd.DataFrame,
    server_metrics: pd.DataFrame,
    settings: dict[str, Any],
    live: LiveCounts,
    lost_rows: dict[str, dict[str, Any]] | None,
    max_share: float,
) -> dict[str, Any]:
    """The ``coverage`` section (``Coverage``) of the run whose rows are ``requests``: judged rows
    against Locust's count (``live``), the server's count in ``server_metrics`` (weighed only when the
    run started the server: no ``host`` in ``settings``), the rows it could not write, the workers' rows
    that never arrived (``lost_rows``) and the open loop's schedule."""
    outcomes = requests["outcome"]
    judged_rows = int((~outcomes.isin(UNJUDGED_OUTCOMES)).sum())
    stopped = int((outcomes == Outcome.STOPPED).sum())
    not_sent = int((outcomes == Outcome.NOT_SENT).sum())
    server, server_rows, span = served(requests, server_metrics)
    unweighed_why = server_unweighed_why(settings)
    weighed = unweighed_why is None
    missing = sum(int(figures.get("missing") or 0) for figures in (lost_rows or {}).values())
    shortfalls = [live.unwritten, missing]
    if live.locust is not None:
        shortfalls.append(live.locust - judged_rows)
    if weighed and server is not None and server_rows is not None:
        shortfalls.append(server - server_rows)
    lost = max(0, *shortfalls)
    scheduled = int(requests["scheduled_time"].notna().sum()) if (settings.get("open_loop") or not_sent) else None
    return {
        "judged": judged_rows,
        "seen": judged_rows + stopped + lost,
        "stopped": stopped,
        "lost": lost,
        "not_sent": not_sent,
        "scheduled": scheduled,
        "locust": live.locust,
        "server": server,
        "server_rows": server_rows,
        "server_span_s": span,
        "server_weighed": weighed and server is not None,
        "server_unweighed_why": None if weighed or server is None else unweighed_why,
        "unwritten": live.unwritten,
        "workers_missing": missing,
        "max_share": max_share,
    }


def served(requests: pd.DataFrame, server_metrics: pd.DataFrame) -> tuple[int | None, int | None, float | None]:
    """``(count, rows, span_s)``: the requests the server's ``http_requests_total`` counted on the
    routes the rows used between its first and last scrape (``span_s`` apart), and the rows sent that
    ended in that span or within ``SCRAPE_EDGE_S`` outside it; Nones without two such scrapes."""
    handlers = {SERVED_ROUTES[route] for route in requests["route"].dropna().unique() if route in SERVED_ROUTES}
    counter = server_metrics[server_metrics["name"] == SERVED_COUNTER]
    if counter.empty or not handlers:
        return None, None, None
    ours = counter["labels"].map(lambda labels: any(f'handler="{handler}"' in labels for handler in handlers))
    if not ours.any():  # the server counts none of the run's routes (another name, or none of them yet)
        return None, None, None
    # every scrape, 0 where it had no sample yet of these handlers (a counter appears at its first request)
    series = counter[ours].groupby("time")["value"].sum().reindex(counter["time"].unique(), fill_value=0.0)
    series = series.sort_index()
    if len(series) < 2:
        return None, None, None
    first, last = float(series.index[0]), float(series.index[-1])
    sent = requests[requests["outcome"] != Outcome.NOT_SENT]
    ends = sent["start_time"].astype("float64") + sent["duration_s"].astype("float64")
    rows = int(((ends > first - SCRAPE_EDGE_S) & (ends <= last + SCRAPE_EDGE_S)).sum())
    return round(increase(series) or 0.0), rows, round(last - first, 3)


def read_path_line(read_path: str) -> str:
    """How the run's raw bodies were read (``RunSettings.read_path``): the records are the same
    either way; the Python path spends more CPU a frame."""
    if read_path == "compiled":
        return "read path: compiled (loadtests.client._fastread)"
    return (
        f"read path: {read_path} (no compiled reader, or SSE_SOAK_PURE_PYTHON_READS=1: "
        "the same records, more CPU a frame)"
    )
