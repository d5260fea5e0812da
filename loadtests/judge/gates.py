"""Pass/fail rules over a run's request table, each reported as one line with its figure.

Always on: at least one request finished (``requests_completed``); every finished request ended
as its spec expects (``outcomes_as_expected``: the rule Locust's statistics use too, so the verdict
and the exit code come from one judgement); no HTTP 500; no in-band error with code 500; no
protocol error; no harness error (sse-soak failing, not the server); truncation honoured (every
truncated ``ok`` request whose server reported usage counted exactly the tokens it asked to
keep). With no finished request the others say ``no requests to judge`` and count as not passed
(``SKIP``), never as a vacuous PASS. A scenario adds ``Expect`` gates: rows selected by a pandas
query must all satisfy another query, and there must be at least ``min_rows`` of them, so a gate
never passes on an empty selection; its queries are checked against the request table's columns
when a scenario declares it (``Expect.check``). Rows of streams the run itself stopped (``outcome ==
"stopped"``) are no verdict on the server and are left out of every gate.

Every gate subclasses ``Gate``. A gate that depends on the run's settings reads them itself:
``NoProxyTimeouts()`` is completed from the run's proxy read timeout and keep-alive interval by
``Gate.for_run`` when the scenario builds its gate list, so every gate judged or stored in
``summary.json`` has concrete figures. This module stores and loads gates (``Gate.spec``,
``Gate.from_spec``): each gate class joins ``GATE_TYPES`` when it is defined, so a summary names
its gates by class and old summaries load as long as the class keeps its name and fields.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pandas as pd

from loadtests.base.safe_text import printable
from loadtests.client.outcome import Outcome
from loadtests.errors import InvalidValue, SummaryError, WrongType, error_kind
from loadtests.judge.causes import errors_owned, keepalive_tolerance, keepalive_withheld, proxy_timeouts, raw_silences
from loadtests.record import figures
from loadtests.record.lag import (
    DEFAULT_LAG_LIMIT_MS,
    coarse_reads_s,
    explained_by_stall,
    harness_stall_s,
    lag_summary,
)
from loadtests.record.recorder import REQUEST_SCHEMA, to_pandas

DEFAULT_MAX_UNJUDGED_SHARE = 0.1
"""A gate that passed with more of its qualifying requests unjudged than this share is unjudged."""


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    detail: str
    skipped: bool = False
    """Unjudged: nothing (or too little) to judge; not passed, and said so instead of a figure. Stored
    as ``skipped`` (the name older summaries use)."""

    @property
    def unjudged(self) -> bool:
        return self.skipped

    unjudged_rows: int = 0
    """Qualifying requests this gate could not judge: their apparent violation is within what the
    harness's own stall while they were open could explain (``Gate.resolution_s``)."""
    judged_rows: int | None = None
    """Qualifying requests it judged; None when the gate does not count rows."""

    @property
    def word(self) -> str:
        """``PASS``, ``FAIL`` or ``UNJUDGED``: the one word the console and report.html give this result."""
        return UNJUDGED if self.skipped else PASS if self.passed else FAIL

    def line(self) -> str:
        """The gate's console line; its detail may quote the server (error messages), so it is
        made ``printable``."""
        return printable(f"gate {self.word} {self.name}: {self.detail}")


PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
"""The three verdicts: the server passed; the server did something wrong; the run could not judge."""
UNJUDGED = "UNJUDGED"
"""A gate's word when it had nothing (or too little) to judge (``GateResult.word``); never a verdict."""


def run_point(declared: Iterable[str] | None, gates: Iterable[str] = ()) -> list[str]:
    """The one rule for the run's point, wherever it is computed: the gates ``declared`` to be it,
    else every one of ``gates`` (the names of the gates the scenario or the run added, never the
    always-on ones), and always ``requests_completed``, of every run's point; each once, in that
    order. An unjudged gate among them makes the run INCONCLUSIVE; an unjudged gate outside them had
    nothing to judge that the run set out to judge (``truncation_honoured`` where nothing truncates)."""
    chosen = gates if declared is None else declared
    return list(dict.fromkeys([*chosen, RequestsCompleted.name]))


def verdict_of(
    results: Iterable[GateResult], point: Collection[str], requests_judged: int, interrupted: str | None = None
) -> str:
    """The one verdict rule, for a run or a window of one: ``FAIL`` when a gate failed (evidence
    against the server) or the run was interrupted; else ``INCONCLUSIVE`` when no request was judged
    or a gate of ``point`` is unjudged (it could not judge what it set out to judge), and
    ``requests_completed`` is of every run's point (unjudged: nothing finished, or rows were lost);
    else ``PASS``."""
    results = list(results)
    if any(not result.passed and not result.skipped for result in results) or interrupted is not None:
        return FAIL
    points = run_point(point)
    if requests_judged == 0 or any(result.skipped and result.name in points for result in results):
        return INCONCLUSIVE
    return PASS


def gate_is_noise(result: GateResult, point: Collection[str]) -> bool:
    """A result a reader need not be shown: unjudged with no row left unjudged (it had nothing to
    judge, not too little), and not of the run's point (``run_point``), so the verdict ignores it
    too, as ``truncation_honoured`` at 0/0 in a scenario that never truncates. Neither the console
    nor the page shows it; ``summary.json`` keeps it."""
    return result.skipped and not result.unjudged_rows and result.name not in run_point(point)


QUEUE_FOR_SILENCE = (
    "against a server with fast prefill, silence comes from queueing: the run fills the server's slots with "
    "streams of its own, and its 'silence by queueing' line says what it found and held, or which bound it reached"
)
"""How a run whose point is silence makes it happen when the server's prefill is fast."""


def unjudged(name: str, detail: str) -> GateResult:
    """The one rule for empty evidence: a gate with no row to judge is unjudged, never a PASS on 0/0
    (nor a FAIL: the server did nothing wrong that the run saw)."""
    return GateResult(name, False, detail, skipped=True)


NOTHING_TO_JUDGE = "no requests to judge"


@dataclass(frozen=True)
class RunTables:
    """What a run recorded, as gates read it: ``requests`` are the judged rows (stopped streams left
    out); ``lag`` the harness's lag samples; ``resources`` the soak's memory samples."""

    requests: pd.DataFrame
    lag: pd.DataFrame | None = None
    resources: pd.DataFrame | None = None
    lost_rows: dict[str, dict[str, Any]] | None = None
    """Workers whose rows never all arrived (``loadtests.run.collect.Collector.lost``): their missing
    requests are not judged, so ``requests_completed`` is not either."""
    uncovered: str | None = None
    """Why the rows cover too few of the requests the run made or scheduled (more than the allowed
    share lost or never sent: ``loadtests.judge.summary.Coverage.shortfall``): ``requests_completed``
    is unjudged, so the verdict is no PASS; None when they cover enough."""


class RunFigures(Protocol):
    """What a gate may read from a run's settings (``loadtests.declare.scenario.RunSettings`` has it)."""

    @property
    def proxy_read_timeout(self) -> float: ...

    @property
    def keep_alive_interval(self) -> float | None: ...

    @property
    def proxy(self) -> str: ...


GATE_TYPES: dict[str, type[Gate]] = {}
"""Every gate type ``summary.json`` can store, by class name: a concrete subclass of ``Gate`` joins
on its definition, so gates defined elsewhere (``loadtests.judge.drift``) are stored like these."""


class Gate(ABC):
    """A rule over a run. Subclasses are frozen dataclasses whose fields are all their figures, so
    ``spec()`` stores one as ``{"type": ClassName, **fields}`` and ``from_spec`` rebuilds it; a
    class whose name starts with ``_`` is a base for others and is never stored."""

    name: str
    resolution_s: float | None = None
    """The timing tolerance its judgement relies on, in seconds: a request it would fail while the
    harness stalled this long is unjudged for it instead. None: a rule on statuses and outcomes, which
    no stall of the harness can move."""

    judges_requests: ClassVar[bool] = True
    """Its judgement is of the requests alone, so any slice of them (a soak's window) can be judged
    by it; False for a gate over the whole run's samples (lag, memory, drift between windows)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("_"):
            GATE_TYPES[cls.__name__] = cls

    @abstractmethod
    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        """The result over the judged request rows."""

    def evaluate_run(self, tables: RunTables) -> GateResult:
        """The result over what the run recorded; a gate that needs more than the requests (lag or
        memory samples) overrides this, and ``evaluate`` is then its judgement of requests alone."""
        return self.evaluate(tables.requests)

    def check(self) -> None:
        """Raise ``ValueError`` (one line) when the gate cannot judge any run: checked when a scenario
        declares it. Nothing to check by default."""
        return None

    def for_run(self, settings: RunFigures) -> Gate:
        """The gate with whatever it reads from the run's settings filled in; itself when it reads none."""
        return self

    def spec(self) -> dict[str, Any]:
        """The gate as plain data, so ``summary.json`` can carry it and a report can re-judge a run;
        only concrete gates (settings filled in by ``for_run``) can be stored."""
        kind = type(self).__name__
        if GATE_TYPES.get(kind) is not type(self) or not dataclasses.is_dataclass(self):
            raise WrongType(f"{kind} is not a gate type sse-soak can store")
        return {"type": kind, **dataclasses.asdict(self)}

    @staticmethod
    def from_spec(spec: dict[str, Any]) -> Gate:
        """The gate ``spec()`` stored; ``ValueError`` for a type no loaded module defines, ``TypeError``
        for fields it does not take."""
        fields = dict(spec)
        kind = fields.pop("type")
        if kind not in GATE_TYPES:
            raise InvalidValue(f"unknown gate type {kind!r}; known: {', '.join(GATE_TYPES)}")
        return GATE_TYPES[kind](**fields)


SHIPPED_PACKAGE = "loadtests"
"""The package whose gate types every sse-soak process defines: their specs need no source."""


def gate_sources(gates: Iterable[Gate]) -> dict[str, dict[str, str]]:
    """Where each stored gate type that sse-soak does not ship is defined (a gate class in a user's
    locustfile): its module's name and, when it has one, its file, by type name, so a later judgement
    in another process (``python -m loadtests report``, the soak job) can load it. A gate that could
    not be rebuilt keeps the source it was stored with. Empty for a run of shipped gates only."""
    sources: dict[str, dict[str, str]] = {}
    for gate in gates:
        if isinstance(gate, _Unrebuilt):
            if gate.source:
                sources[gate.kind] = dict(gate.source)
            continue
        kind = type(gate)
        if kind.__module__.partition(".")[0] == SHIPPED_PACKAGE:
            continue
        file = getattr(sys.modules.get(kind.__module__), "__file__", None)
        sources[kind.__name__] = {"module": kind.__module__, **({"file": str(Path(file).resolve())} if file else {})}
    return sources


def rebuild_gates(
    specs: Iterable[dict[str, Any]], sources: dict[str, dict[str, str]], never_from: Path | None = None
) -> tuple[list[Gate], list[str]]:
    """The gates stored as ``specs``, and one line for each that could not be rebuilt. A type no loaded
    module defines is looked for where ``sources`` says it is defined (its module by name, else its
    file), never in a file under ``never_from`` (the run directory judged: its files are data someone
    may have sent, never code to run). A user's gate (one with a source) that still cannot be rebuilt
    is judged unjudged, its line saying why, its spec stored again as it was; any other spec that
    cannot be rebuilt raises ``SummaryError`` (the file is no summary this harness can read), naming
    the spec by number."""
    gates: list[Gate] = []
    refused: list[str] = []
    for number, spec in enumerate(specs, 1):
        kind = str(spec.get("type"))
        source = sources.get(kind)
        why = _load_source(kind, source, never_from) if source is not None and kind not in GATE_TYPES else None
        try:
            gates.append(Gate.from_spec(spec))
            continue
        except (KeyError, TypeError, ValueError) as exc:
            if source is None:
                raise SummaryError(f"gate spec {number} cannot be rebuilt ({error_kind(exc)}: {exc})") from None
            why = why or f"{error_kind(exc)}: {exc}"
        name = str(spec.get("name") or kind)
        line = f"gate {name} ({kind}) cannot be rebuilt: {why}; the other gates are judged, {name} is unjudged"
        refused.append(line)
        gates.append(_Unrebuilt(name, f"cannot be rebuilt in this process: {why}", dict(spec), kind, dict(source)))
    return gates, refused


def _load_source(kind: str, source: dict[str, str], never_from: Path | None = None) -> str | None:
    """Load the module ``source`` names, so the gate classes it defines join ``GATE_TYPES``: from its
    file when it is still there, as Locust loads a locustfile (its folder first on ``sys.path``), else
    by its module's name; never a file under ``never_from``. None when ``kind`` is then known; else
    why not, in a few words."""
    module, file = source.get("module", ""), source.get("file")
    path = Path(file) if file else None
    if path is not None and never_from is not None and path.resolve().is_relative_to(never_from.resolve()):
        return f"its file {path} lies inside the run directory, whose files are never run as code"
    if path is None or not path.is_file():
        if module and module != "__main__":
            with contextlib.suppress(Exception):  # a user's module: whatever it raises, it is not found
                importlib.import_module(module)
        if kind in GATE_TYPES:
            return None
        where = "summary.json names no file for it" if path is None else f"its file {path} is gone"
        return f"its module {module!r} cannot be imported here and {where}"
    name = module if module and module != "__main__" and module not in sys.modules else f"_sse_soak_{path.stem}"
    folder = str(path.parent)
    try:
        loader = importlib.machinery.SourceFileLoader(name, str(path))
        loaded = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))  # type: ignore[arg-type]
        sys.modules[name] = loaded
        sys.path.insert(0, folder)
        try:
            loader.exec_module(loaded)
        finally:
            sys.path.remove(folder)
    except (Exception, SystemExit) as exc:  # a user's file: whatever it raises is why, never a crash
        sys.modules.pop(name, None)
        return f"loading {path} failed ({error_kind(exc)}: {exc})"
    return None if kind in GATE_TYPES else f"{path} defines no gate class {kind!r}"


def _examples(rows: pd.DataFrame, limit: int = 3) -> str:
    ids = ", ".join(rows["request_id"].head(limit))
    return f" (e.g. {ids})" if ids else ""


def _by_message(rows: pd.DataFrame, limit: int = 3) -> str:
    """``2x <message>; 1x <message>`` for the most frequent messages of ``rows``."""
    counts = rows["error_message"].fillna("(no message)").value_counts()
    shown = "; ".join(f"{n}x {message}" for message, n in counts.head(limit).items())
    return shown + (f"; and {len(counts) - limit} other messages" if len(counts) > limit else "")


@dataclass(frozen=True)
class RequestsCompleted(Gate):
    """At least one request finished (stopped streams do not count): an empty run is no pass."""

    name: str = "requests_completed"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        if requests.empty:
            return unjudged(self.name, "no request finished: nothing was judged")
        return GateResult(self.name, True, f"{len(requests)} requests finished")

    def with_losses(
        self, result: GateResult, lost: dict[str, dict[str, Any]] | None, uncovered: str | None = None
    ) -> GateResult:
        """``result``, unjudged when a worker's rows never all arrived (the line names each such
        worker, how many of the requests it started have no row, and when it was last heard from) or
        when the rows cover too few of the run's requests (``uncovered``, said in the line)."""
        if uncovered is not None:
            result = unjudged(self.name, f"{result.detail}; {uncovered}")
        if not lost:
            return result
        said = "; ".join(
            f"{worker} started {figures['started']} requests and sent {figures['rows']} rows ({figures['missing']} "
            f"missing; last heard from at {figures['last_heard']} UTC)"
            for worker, figures in sorted(lost.items())
        )
        return unjudged(self.name, f"{result.detail}; rows lost: {said}: those requests were not judged")


@dataclass(frozen=True)
class OutcomesAsExpected(Gate):
    """Every finished request ended with the outcome its spec expects (``ok`` unless it says)."""

    name: str = "outcomes_as_expected"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        expected = requests["expected"].fillna(Outcome.OK)
        bad = requests[requests["outcome"] != expected]
        detail = f"{len(requests) - len(bad)}/{len(requests)} requests ended as their spec expects"
        if not bad.empty:
            counts = bad.assign(_expected=expected[bad.index]).groupby(["outcome", "_expected"]).size()
            seen = ", ".join(f"{n} {outcome} (expected {wanted})" for (outcome, wanted), n in counts.items())
            detail += f"; instead: {seen}{_examples(bad)}"
        return GateResult(self.name, bad.empty, detail)


def _no_outcome(name: str, requests: pd.DataFrame, outcome: Outcome, counted: str) -> GateResult:
    """No row has ``outcome``; the detail counts them (``counted`` words it) by message."""
    bad = requests[requests["outcome"] == outcome]
    detail = f"{len(bad)} {counted}"
    if not bad.empty:
        detail += f": {_by_message(bad)}{_examples(bad)}"
    return GateResult(name, bad.empty, detail)


@dataclass(frozen=True)
class NoProtocolErrors(Gate):
    """No 2xx stream broke the event-stream protocol (content type, JSON frames, UTF-8, line length)."""

    name: str = "no_protocol_errors"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        return _no_outcome(self.name, requests, Outcome.PROTOCOL_ERROR, f"protocol errors of {len(requests)} requests")


@dataclass(frozen=True)
class NoHarnessErrors(Gate):
    """sse-soak did not fail while handling any request (a failure of ours, not the server's)."""

    name: str = "no_harness_errors"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        return _no_outcome(self.name, requests, Outcome.HARNESS_ERROR, "requests failed inside sse-soak itself")


@dataclass(frozen=True)
class NoHttp500(Gate):
    name: str = "no_http_500"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        bad = requests[figures.http_500(requests)]
        detail = f"{len(bad)} HTTP 500 of {len(requests)} requests"
        timed_out = bad["outcome"] == Outcome.GATEWAY_TIMEOUT
        if timed_out.any():  # LiteLLM answers its read timeout so: the client got a 500, the server sent none
            detail += (
                f" ({int(timed_out.sum())} of them a gateway's own timeout, by its message: see no_proxy_timeouts)"
            )
        owned = errors_owned(bad[~timed_out]).phrase()  # the rest: a gateway's rewrap, or the server's
        detail += f": {owned}" if owned else ""
        return GateResult(self.name, bad.empty, detail + _examples(bad))


@dataclass(frozen=True)
class NoInband500(Gate):
    name: str = "no_inband_500"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        bad = requests[figures.inband_500(requests)]
        owned = errors_owned(bad).phrase()  # LiteLLM writes its own mid-stream, for a server that dropped the stream
        detail = f"{len(bad)} in-band errors with code 500 under HTTP 200{f': {owned}' if owned else ''}"
        return GateResult(self.name, bad.empty, detail + _examples(bad))


@dataclass(frozen=True)
class TruncationHonoured(Gate):
    """``usage.prompt_tokens`` equals the tokens kept: ``min(k, prompt tokens)`` for ``k > 0``."""

    name: str = "truncation_honoured"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        checked = requests[
            (requests["outcome"] == Outcome.OK)
            & (requests["truncate_prompt_tokens"] > 0)
            & requests["usage_prompt_tokens"].notna()
        ]
        kept = checked["truncate_prompt_tokens"].where(
            checked["prompt_tokens"].isna(), checked[["truncate_prompt_tokens", "prompt_tokens"]].min(axis=1)
        )
        bad = checked[checked["usage_prompt_tokens"] != kept]
        detail = f"{len(checked) - len(bad)}/{len(checked)} truncated requests reported the kept token count"
        if checked.empty:
            return unjudged(self.name, detail + ": no truncated request finished ok with usage, nothing to judge")
        if not bad.empty:
            first = bad.iloc[0]
            detail += (
                f"; {first['request_id']} asked to keep {first['truncate_prompt_tokens']} and the server counted "
                f"{first['usage_prompt_tokens']}"
            )
        return GateResult(self.name, bad.empty, detail)


@dataclass(frozen=True)
class Expect(Gate):
    """Every row matching ``where`` (all rows when it is None) must match ``require`` (pandas query
    syntax), and at least ``min_rows`` rows must match ``where``."""

    name: str
    where: str | None
    require: str
    min_rows: int = 1
    resolution_s: float | None = None
    """The timing tolerance ``require`` relies on (say 0.25 for ``max_gap_s <= interval + 0.25``); None
    for a rule on statuses and outcomes. A row that breaks ``require`` while the harness stalled this
    long or longer is unjudged, not failed."""
    unexercised: str | None = None
    """What to do when too few rows match ``where`` (said in the unjudged line): how a run makes the
    condition the gate is about happen."""

    def check(self) -> None:
        """Raise ``ValueError`` (one line naming the gate and the unknown name) when ``where`` or
        ``require`` is not a query the request table can answer: a misspelt column, bad syntax."""
        empty = to_pandas(REQUEST_SCHEMA.empty_table())
        for part, query in (("where", self.where), ("require", self.require)):
            if not query:
                continue
            try:
                empty.query(query)
            except NameError as exc:  # pandas' UndefinedVariableError: a name that is no column
                found = re.search(r"name '([^']+)'", str(exc))
                name = found[1] if found else str(exc)
                close = difflib.get_close_matches(name, list(empty.columns), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise InvalidValue(
                    f"gate {self.name}: {part} names {name}, which is no column of the request table{hint}: {query}"
                ) from None
            except (SyntaxError, ValueError, TypeError) as exc:
                raise InvalidValue(f"gate {self.name}: {part} is not a valid query ({exc}): {query}") from None

    def spec(self) -> dict[str, Any]:
        spec = super().spec()
        for optional in ("resolution_s", "unexercised"):  # stored as before they existed: older readers load it
            if spec.get(optional) is None:
                spec.pop(optional, None)
        return spec

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        selected = requests.query(self.where) if self.where and len(requests) else requests
        good = selected.query(self.require) if len(selected) else selected
        bad = selected.drop(good.index)
        excused = _excused(bad, self.resolution_s)
        bad = bad.drop(excused.index)
        selected = selected.drop(excused.index)
        passed = bad.empty and len(selected) >= self.min_rows
        detail = f"{len(good)}/{len(selected)} rows{f' where {self.where}' if self.where else ''} have {self.require}"
        if len(selected) < self.min_rows:
            detail += f"; needs at least {self.min_rows} such rows"
        if not bad.empty:
            counts = bad.groupby(["outcome", "status"], dropna=False).size()
            seen = ", ".join(f"{n} {outcome}/{status}" for (outcome, status), n in counts.items())
            detail += f"; instead: {seen}{_examples(bad)}"
        elif len(selected) < self.min_rows:  # too little evidence, and none against: nothing judged
            advice = f" ({self.unexercised})" if self.unexercised else ""
            return unjudged(self.name, detail + advice + _excused_detail(excused))
        return GateResult(self.name, passed, detail + _excused_detail(excused), False, len(excused), len(selected))


@dataclass(frozen=True)
class NoProxyTimeouts(Gate):
    """No stream died of a proxy's or gateway's timeout, by the one rule of ``loadtests.judge.causes``
    (which the ``causes:`` line reads too): no 408, 504 or 524, no 502 and no cut after a silence in
    the read timeout's window, no in-band timeout. The detail names the cause: the longest silence
    against the read timeout and the keep-alive, and the proxy when an answer names it. Cuts after
    a silence outside the window are not this proxy's doing (a server dropping the connection, say)
    and are counted apart, for other gates to judge.

    ``NoProxyTimeouts()`` (no read timeout given) judges the run's own ``--proxy-read-timeout`` and
    keep-alive interval: ``for_run`` fills both in; it cannot judge before that."""

    read_timeout: float | None = None
    keep_alive_interval: float | None = None
    """The server's keep-alive interval: 0 when off, None when unknown (``--host`` not told it)."""
    name: str = "no_proxy_timeouts"
    proxy: str | None = None
    """The proxy the run started (``--proxy``), to name it and to know its timer's tick; None when
    not recorded (a gate stored before the field)."""

    def for_run(self, settings: RunFigures) -> NoProxyTimeouts:
        """The gate with the run's figures, when it was declared without a read timeout."""
        if self.read_timeout is not None:
            return self
        return dataclasses.replace(
            self,
            read_timeout=settings.proxy_read_timeout,
            keep_alive_interval=settings.keep_alive_interval,
            proxy=settings.proxy,
        )

    def spec(self) -> dict[str, Any]:
        if self.read_timeout is None:
            raise WrongType(
                "NoProxyTimeouts() without its read timeout cannot be stored: store for_run(settings) of it"
            )
        stored = super().spec()
        if stored.get("proxy") is None:
            del stored["proxy"]  # stored as before the field unless there is something to say
        return stored

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        if self.read_timeout is None:
            raise InvalidValue("NoProxyTimeouts() has no read timeout yet: judge for_run(settings) of it")
        found = proxy_timeouts(requests, self.read_timeout, self.proxy)  # what the causes: line says too
        timer = found.timer
        assert timer is not None  # a read timeout was given
        runs = timer.runs_s  # the timeout the proxy runs (Apache's 1.5 s is 2 s), never the figure asked
        detail = found.phrase()
        if not found.count:
            silence = requests["silence_before_first_token_s"].astype("float64")
            if "silence_from_send_s" in requests.columns:  # a gateway that holds the headers hides no silence
                silence = pd.to_numeric(requests["silence_from_send_s"], errors="coerce").fillna(silence)
            tested = int((silence >= runs * 0.95).sum())
            if not tested:  # no stream went silent for the timeout: it never put the proxy to the test
                longest_silence = "none" if silence.dropna().empty else f"{silence.max():.2f} s"
                return unjudged(
                    self.name,
                    f"{detail}; no stream was silent before its first token for {timer.describe()} "
                    f"(longest {longest_silence}): nothing tested it ({QUEUE_FOR_SILENCE})",
                )
            return GateResult(self.name, True, f"{detail}; {tested} streams silent over the read timeout")
        silences = found.silences()
        interval = self.keep_alive_interval
        keep_alive = "of unknown interval" if interval is None else "off" if not interval else f"every {interval:g} s"
        longest = f"longest silence {silences.max():.2f} s" if len(silences) else "silence unknown"
        detail += f"; {longest} against {timer.describe()} with server keep-alive {keep_alive}"
        if interval is None or interval >= runs or not interval:
            detail += " (a keep-alive interval below the read timeout would keep these streams alive)"
        return GateResult(self.name, False, detail + _examples(found.rows))


KEEP_ALIVE_HOW_TO = "pass --keep-alive-interval S (the server's --sse-keep-alive-interval) to judge keep-alive"
GIVEN, BUNDLED, REAL_VLLM, INFERRED, UNKNOWN = "given", "bundled server", "real vLLM", "inferred", "unknown"
"""Where a run's keep-alive interval comes from (``keep_alive_interval_source`` in its settings): the
command line, the bundled server's arguments, the real vLLM the run started (its arguments, in whole
seconds), the comments the run saw (``--host``), or nowhere."""


@dataclass(frozen=True)
class KeepAliveCovered(Gate):
    """Keep-alive covered every long silence: each raw stream (the SDK cannot see comments) silent
    from its send to its first token for longer than the server's keep-alive ``interval`` plus a
    tolerance got at least one keep-alive frame per ``interval + tolerance`` of that silence. The
    silence counts from the send, not the headers, so a gateway that holds the headers until the
    first token cannot hide it (a row without ``silence_from_send_s``, from an older run, is judged
    on its silence from the headers). The scenario adds it whenever the run knows the interval; a
    ``--host`` run that does not know it gets it at judge time (``loadtests.run.judging``), at the interval
    the comments show, or without one: then it is skipped, without failing the run, saying how to
    give the interval."""

    interval: float | None = None
    name: str = "keepalive_covered"
    source: str | None = None
    """How ``interval`` was found when the run was not told it (inferred from comments), for the line."""
    proxy: str | None = None
    """The proxy the run started (``--proxy``), named when no comment reached the client."""

    def spec(self) -> dict[str, Any]:
        stored = super().spec()
        for optional in ("source", "proxy"):
            if stored[optional] is None:
                del stored[optional]  # a summary's gate reads as before unless there is something to say
        return stored

    @property
    def tolerance(self) -> float:
        """``loadtests.judge.causes.keepalive_tolerance`` of the interval."""
        return keepalive_tolerance(self.interval or 0.0)

    @property
    def resolution_s(self) -> float:  # type: ignore[override]  # derived from the interval, never set
        return self.tolerance

    @property
    def period(self) -> float:
        """The interval plus its tolerance: the longest silence that needs no keep-alive frame."""
        return (self.interval or 0.0) + self.tolerance

    def required_frames(self, silence: pd.Series) -> pd.Series:
        """The fewest keep-alive frames a raw stream silent ``silence`` seconds must have got: one per
        whole ``period`` of it, none for a silence up to one period (report.html draws this step)."""
        return (silence // self.period).where(silence > self.period, 0).astype(int)

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        if self.interval is None:
            unknown = f"the server's keep-alive interval is unknown and no stream showed it: {KEEP_ALIVE_HOW_TO}"
            return unjudged(self.name, unknown)
        period = self.period
        raw, silence = raw_silences(requests)
        silent = raw[silence > period]
        implied = self.required_frames(silence[silent.index])
        short = silent[silent["keepalive_frames"] < implied]
        # The harness's worst stall while a stream was open may have moved the stamps its silence is
        # measured between: a shortfall that such a stall explains is unjudged, not failed.
        stall = harness_stall_s(short)
        allowed = self.required_frames((silence[short.index] - stall).clip(lower=0.0))
        excused = short[short["keepalive_frames"] >= allowed]
        short = short.drop(excused.index)
        silent = silent.drop(excused.index)
        frames = int(silent["keepalive_frames"].sum())
        found = f", the interval {self.source}" if self.source else ""
        detail = (
            f"{len(silent) - len(short)}/{len(silent)} raw streams silent over {period:.2f} s (keep-alive every "
            f"{self.interval:g} s + {self.tolerance:.2f} s{found}) got a keep-alive per {period:.2f} s of silence "
            f"({frames} keep-alive frames on them)"
        )
        if not short.empty:
            first = short.iloc[0]
            detail += (
                f"; {first['request_id']} was silent {silence[short.index[0]]:.2f} s with "
                f"{int(first['keepalive_frames'])} keep-alive frames, {implied[short.index[0]]} implied"
                f"{_examples(short)}"
            )
        detail += _excused_detail(excused)
        if silent.empty:
            return unjudged(self.name, detail + ": no raw stream was silent that long, nothing to judge")
        withheld = keepalive_withheld(requests, self.interval, self.proxy)
        if withheld is not None:  # the summary's causes say the same line (loadtests.judge.causes)
            detail += "; " + withheld.line()
        passed = short.empty and withheld is None
        return GateResult(self.name, passed, detail, False, len(excused), len(silent))


@dataclass(frozen=True)
class Unjudgeable(Gate):
    """A gate a scenario cannot form for this run (say, one written in a keep-alive interval a
    ``--host`` run does not know): always unjudged, its ``reason`` saying why and how to fix it."""

    name: str
    reason: str

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        return unjudged(self.name, self.reason)


@dataclass(frozen=True)
class _Unrebuilt(Gate):
    """A user's gate this process cannot rebuild (its class not found, or not taking its stored
    fields): always unjudged, ``reason`` saying why; stored again exactly as it was (``stored``, and
    its ``source``), so a judgement that can load its class judges it. Never stored as itself."""

    name: str
    reason: str
    stored: dict[str, Any]
    kind: str
    source: dict[str, str] | None = None

    def spec(self) -> dict[str, Any]:
        return dict(self.stored)

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        return unjudged(self.name, self.reason)


@dataclass(frozen=True)
class HarnessKeptUp(Gate):
    """The load generator kept up: in every process, the p99 of its event loop's lag samples
    (``loadtests.record.lag``) is at most ``limit_ms``. Judged on ``lag.parquet``'s samples while streams
    were open (``judge`` passes ``lag.while_streams_open``), not on the requests: when it fails,
    timings finer than the lag measure the harness, not the server."""

    limit_ms: float = DEFAULT_LAG_LIMIT_MS
    name: str = "harness_kept_up"
    judges_requests: ClassVar[bool] = False

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        """Requests alone hold no lag samples: skipped, saying so."""
        return self.evaluate_run(RunTables(requests))

    def evaluate_run(self, tables: RunTables) -> GateResult:
        requests, lag = tables.requests, tables.lag
        if lag is None or lag.empty:
            return GateResult(self.name, False, "no lag samples recorded: the harness's timing is unknown", True)
        by_worker = lag_summary(lag, self.limit_ms)["by_worker"]
        worker, worst = max(by_worker.items(), key=lambda item: item[1]["p99"])
        where = f" in {worker}" if len(by_worker) > 1 else ""
        detail = (
            f"p99 lag {worst['p99']:.1f} ms{where} (limit {self.limit_ms:g} ms; max {worst['max']:.1f} ms, "
            f"{worst['seconds_above_limit']:.2f} s in stalls over the limit, {len(by_worker)} process(es))"
        )
        if worst["p99"] <= self.limit_ms:
            return GateResult(self.name, True, detail)
        stalled = int((requests.get("harness_lag_max_s", pd.Series(dtype=float)) * 1000.0 > self.limit_ms).sum())
        detail += (
            f"; timings of this run finer than {worst['p99']:.0f} ms are not trustworthy: the load generator was late, "
            f"not the server ({stalled} requests were open during a stall over the limit, see harness_lag_max_s); "
            "run with more --processes or fewer users"
        )
        return GateResult(self.name, False, detail)


ALWAYS_ON: tuple[Gate, ...] = (
    RequestsCompleted(),
    OutcomesAsExpected(),
    NoHttp500(),
    NoInband500(),
    NoProtocolErrors(),
    NoHarnessErrors(),
    TruncationHonoured(),
)


def evaluate(
    tables: RunTables, gates: Iterable[Gate] = (), max_unjudged_share: float = DEFAULT_MAX_UNJUDGED_SHARE
) -> list[GateResult]:
    """Results of the always-on gates, then ``gates``, over the rows the run did not stop. With no
    such row, every always-on gate but ``requests_completed`` is unjudged; so is a gate that passed
    with more than ``max_unjudged_share`` of its qualifying rows unjudged (too thin to pass)."""
    tables = dataclasses.replace(tables, requests=figures.judged(tables.requests))
    results = []
    for gate in ALWAYS_ON:
        if isinstance(gate, RequestsCompleted):
            results.append(gate.with_losses(gate.evaluate(tables.requests), tables.lost_rows, tables.uncovered))
        elif tables.requests.empty:
            results.append(unjudged(gate.name, NOTHING_TO_JUDGE))
        else:
            results.append(gate.evaluate(tables.requests))
    results.extend(gate.evaluate_run(tables) for gate in gates)
    return [_thin_evidence(result, max_unjudged_share) for result in results]


def _thin_evidence(result: GateResult, max_unjudged_share: float) -> GateResult:
    """A passed result on too few judged rows is unjudged; a failure stands (its evidence survived)."""
    if not result.passed or not result.unjudged_rows or result.judged_rows is None:
        return result
    qualifying = result.unjudged_rows + result.judged_rows
    if result.unjudged_rows <= max_unjudged_share * qualifying:
        return result
    return dataclasses.replace(
        result,
        passed=False,
        skipped=True,
        detail=f"{result.detail}; {result.unjudged_rows} of {qualifying} unjudged, over the "
        f"{max_unjudged_share:.0%} allowed: too few judged to pass",
    )


def _excused(bad: pd.DataFrame, resolution_s: float | None) -> pd.DataFrame:
    """The rows of ``bad`` (breaking a timing rule) during which the harness stalled for at least the
    rule's resolution: their violation may be the harness's, so they are unjudged, not failed."""
    if resolution_s is None or bad.empty:
        return bad.iloc[0:0]
    return bad[explained_by_stall(bad, resolution_s)]


def _excused_detail(excused: pd.DataFrame) -> str:
    if excused.empty:
        return ""
    coarse = coarse_reads_s(excused) * 1000.0
    worst = float(harness_stall_s(excused).max()) * 1000.0 - coarse
    read_at = f" and read at a {coarse:g} ms timing resolution (--timing-resolution-ms)" if coarse else ""
    return (
        f"; {len(excused)} requests unjudged: the harness stalled up to {worst:.0f} ms while they were open"
        f"{read_at}, enough to explain their violation{_examples(excused)}"
    )
