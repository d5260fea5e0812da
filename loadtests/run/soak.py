"""The nightly soak job: one long Locust run, watched, checkpointed, judged for drift and baseline.

``python -m loadtests soak`` runs ``locust -f <scenario> --headless`` as a child, started as
``launch`` starts one (``run.child_run``: its own session, so Ctrl-C reaches only us, and we end
Locust with SIGTERM, which makes it stop its users and write its report). While it runs we refresh
a progress line from the run directory's parquet parts, sample the memory of the harness and of the
bundled server into ``resources.csv``, and rewrite ``summary.json`` every checkpoint interval, so a
run killed after hours still leaves a usable report. At the end we add the drift windows and gates,
compare with ``--baseline`` when given, and print the verdict as the last line; the exit code says
the same (0 pass, 1 fail). When Locust or the scenario refuses an option before any run starts
(exit 2), we say so in one line on stderr and exit 2 too: a usage error, not a failed run.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.base.ending_signals import ENDING_SIGNALS
from loadtests.declare import catalog
from loadtests.declare.options import Surface, option
from loadtests.errors import (
    INCONCLUSIVE_EXIT_CODE,
    UNWRITTEN_EXIT_CODE,
    USAGE_EXIT_CODE,
    InvalidValue,
    ManifestError,
    RunInProgress,
)
from loadtests.judge.drift import DRIFT_GATES, DriftLimits
from loadtests.judge.summary import FAIL, INCONCLUSIVE, Summary
from loadtests.record.run_dir import RunDir
from loadtests.report import compare
from loadtests.run.child_run import ChildRun, HeadlessRun
from loadtests.run.progress import ProgressPrinter, RunProgress
from loadtests.run.resources import ResourceSampler
from loadtests.services.stack import SERVER_NAMES

SAMPLE_INTERVAL_S = 5.0
LAST_JUDGING_WAIT_S = 60.0
"""How long the soak's last judgement waits for another holder of the run directory (a ``report``)."""
DEFAULT_SCENARIO = catalog.locate(option("scenario").default_on(Surface.SOAK))


_SHOWN_LINES = (
    "gate ", "arrivals: ", "coverage: ", "sse-soak:", "Traceback", "run directory:", "live metrics:",
    *(f"{n}:" for n in SERVER_NAMES),
)  # fmt: skip
"""The Locust run's lines the soak passes on: gates, notices, tracebacks, the run directory, where
the live metrics are served, the server."""


def _soak_default(name: str) -> Any:
    """The soak's default for the option ``name``, as its declaration holds it."""
    return option(name).default_on(Surface.SOAK)


@dataclass
class SoakPlan:
    """One soak: its fields are the soak's options (``python -m loadtests soak``), each defaulting
    to the option's declared default (``loadtests.declare.options``)."""

    scenario: Path = DEFAULT_SCENARIO
    duration_s: float = _soak_default("duration")
    """The option ``duration`` (Locust's ``-t``): how long the run sends load, in seconds."""
    users: int = _soak_default("users")
    spawn_rate: float = _soak_default("spawn_rate")
    processes: int | None = _soak_default("processes")
    host: str | None = _soak_default("host")
    report_dir: str = _soak_default("report_dir")
    baseline: str | None = _soak_default("baseline")
    progress_interval: float | None = _soak_default("progress_interval")
    checkpoint_interval: float = _soak_default("checkpoint_interval")
    limits: DriftLimits = field(default_factory=DriftLimits)
    thresholds: compare.Thresholds = field(default_factory=compare.Thresholds)
    locust_args: list[str] = field(default_factory=list)

    def headless(self) -> HeadlessRun:
        """This soak's Locust run, as ``launch`` would describe the same run, plus ``--stop-timeout``:
        at the end each user gets 5 s to finish the stream in hand before Locust stops it."""
        if not (self.duration_s >= 1 and float(self.duration_s).is_integer()):  # Locust reads -t 0s as no limit
            raise InvalidValue(f"the duration must be a whole number of seconds, at least 1, got {self.duration_s}")
        return HeadlessRun(
            self.scenario,
            self.users,
            int(self.duration_s),
            self.spawn_rate,
            self.report_dir,
            self.host or None,
            self.processes or None,
            {"stop_timeout": 5},
            self.locust_args,
        )

    def command(self) -> list[str]:
        return self.headless().command()


class Soak:
    """The soak job: the Locust run started by ``run.child_run`` (which makes the run directory and
    hands it over), and its watcher. It learns what the run started (the server's pid, for its
    memory) from the run's manifest: nothing depends on the wording of Locust's output."""

    def __init__(self, plan: SoakPlan, printer: ProgressPrinter | None = None) -> None:
        self.plan = plan
        self.printer = printer or ProgressPrinter()
        self.run_dir: RunDir | None = None
        self.interrupted_by: str | None = None
        self._locust: ChildRun | None = None
        self._sampler: ResourceSampler | None = None
        self._services_known = False
        self._last_error: str | None = None
        self._held: list[str] | None = []
        """Lines passed on before the run wrote its manifest, held until it does (or Locust exits):
        a Locust that refuses to start is the soak's one refusal line, not its lines and then that
        line. None once released."""
        self.html_unwritten: str | None = None
        """One line saying report.html could not be written at the end; None when it was."""

    def run(self) -> int:
        started = time.monotonic()
        headless = self.plan.headless()
        self.run_dir = headless.make_run_dir()
        with ChildRun.start(headless, self.run_dir, on_line=self._on_line) as self._locust:
            self._sampler = ResourceSampler(self._locust.pid)
            self._sampler.path = self.run_dir.resources
            # SIGTERM for any ending signal (a hang-up too): Locust then stops its users and writes its report
            with self._locust.forwarding(ENDING_SIGNALS, signal.SIGTERM):
                self._watch(started)
            locust_code, _, _ = self._locust.wait()
        self.interrupted_by = self._locust.interrupted_by
        return self._finish(locust_code)

    def _on_line(self, line: str) -> None:
        """Pass on the lines worth seeing; remember the last error, for a refusal before any run."""
        if line.startswith("sse-soak: ") or "error: " in line:
            self._last_error = line
        if line.startswith(_SHOWN_LINES):
            if self._held is not None and self.run_dir is not None and not self.run_dir.manifest.exists():
                self._held.append(line)
                return
            self._release_held()
            self.printer.print(line)

    def _release_held(self) -> None:
        held, self._held = self._held, None
        for line in held or ():
            self.printer.print(line)

    def _learn_services(self) -> None:
        """Once the run has written its manifest: sample the server's memory apart from the harness's."""
        assert self.run_dir is not None and self._sampler is not None
        try:
            manifest = self.run_dir.read_manifest()
        except ManifestError as exc:
            self.printer.print(f"sse-soak: {exc}; the server's memory is not sampled")
            self._services_known = True
            return
        if manifest is None:
            return
        self._sampler.service_pids.update(service.pid for service in manifest.services)
        server = next(filter(None, (manifest.service(name) for name in SERVER_NAMES)), None)
        self._sampler.server_pid = server.pid if server else None
        self._services_known = True

    def _watch(self, started: float) -> None:
        """Sample memory every ``SAMPLE_INTERVAL_S`` (each drift window needs samples), show progress
        every progress interval, checkpoint every checkpoint interval, until Locust exits."""
        assert self._locust is not None and self._sampler is not None and self.run_dir is not None
        interval = self.plan.progress_interval or (1.0 if self.printer.in_place else 10.0)
        tick = min(interval, SAMPLE_INTERVAL_S, self.plan.duration_s / self.plan.limits.windows / 3)
        next_checkpoint = started + self.plan.checkpoint_interval
        next_progress = started
        progress = RunProgress(self.run_dir)
        while self._locust.running():
            time.sleep(tick if self._services_known else min(tick, 0.5))
            if not self._services_known:
                self._learn_services()
                if not self._services_known:
                    continue
            _, harness_mb, server_mb = self._sampler.sample()
            if time.monotonic() >= next_progress:
                progress.refresh()
                elapsed = time.monotonic() - started
                self.printer.show(progress.line(elapsed, self.plan.duration_s - elapsed, harness_mb, server_mb))
                next_progress += interval
            if time.monotonic() >= next_checkpoint:
                self._judge(partial=True)
                next_checkpoint += self.plan.checkpoint_interval

    def _judge(self, partial: bool) -> Any:
        """The run judged from what is on disk, its drift gates added: at a checkpoint (``partial``:
        summary.json only; the HTML report reads every frame) or at the end, when report.html and
        requests.csv follow the summary unless the disk refused it (a disk that refuses them is said
        in ``html_unwritten``, one line)."""
        from loadtests.judge.drift import drift_gates  # pandas, only when needed
        from loadtests.record.run_dir import RunRecord
        from loadtests.run.judging import JudgeOptions, SoakState, judge, write_html_files

        assert self.run_dir is not None
        told = JudgeOptions(add_gates=drift_gates(self.plan.limits), soak=SoakState(partial, self.plan.duration_s))
        record = RunRecord(self.run_dir)
        if not partial:
            record.read_every_frame()  # the report shows every frame: one read of the file, not three
        summary = judge(record, told, html=False)
        if not partial and summary.unwritten is None:
            try:
                write_html_files(record, summary)
            except OSError as exc:  # the disk filled up after the summary
                self.html_unwritten = f"sse-soak: report.html was not written in {self.run_dir}: {exc.strerror or exc}"
        return summary

    def _judge_last(self) -> Any:
        """The soak's last judgement, holding the run directory (``RunDir.writer_lock``) as the run did
        until it ended: no ``report`` or late writer changes it meanwhile. A holder that keeps it
        past ``LAST_JUDGING_WAIT_S`` is named in one line, and the run judged all the same."""
        assert self.run_dir is not None
        try:
            lock = self.run_dir.writer_lock(LAST_JUDGING_WAIT_S)
        except RunInProgress:
            held = f"another process held {self.run_dir} for {LAST_JUDGING_WAIT_S:g} s"
            self.printer.print(f"sse-soak: {held}; the run is judged all the same")
            return self._judge(partial=False)
        with lock:
            return self._judge(partial=False)

    def _finish(self, locust_code: int) -> int:
        assert self.run_dir is not None
        if not self.run_dir.manifest.exists() and locust_code == USAGE_EXIT_CODE:  # an option refused: no run
            with contextlib.suppress(OSError):
                self.run_dir.path.rmdir()
            print(
                f"python -m loadtests soak: locust refused to start: {self._last_error or 'see its output above'}",
                file=sys.stderr,
                flush=True,
            )
            return USAGE_EXIT_CODE
        self._release_held()
        self.printer.print(f"locust exited with {locust_code}")
        if not self.run_dir.holds_results():
            self.printer.print("verdict: FAIL (the run wrote no results)")
            return 1
        summary = self._judge_last()
        for gate in summary.gates:
            if gate.name in DRIFT_GATES:
                self.printer.print(gate.line())
        windows = summary.windows_line()
        if windows is not None:
            self.printer.print(windows)
        regressions = self._compare_with_baseline(summary)
        code = self._verdict(summary, locust_code, regressions)
        if summary.unwritten is not None:  # the verdict stands; the record on disk lacks it: never 0
            from loadtests.run.judging import keep_elsewhere

            self.printer.print(keep_elsewhere(self.run_dir, summary))
            return UNWRITTEN_EXIT_CODE
        if self.html_unwritten is not None:
            self.printer.print(self.html_unwritten)
            return UNWRITTEN_EXIT_CODE
        return code

    def _verdict(self, summary: Summary, locust_code: int, regressions: list[str]) -> int:
        """Print the report's place and the soak's verdict; its exit code."""
        self.printer.print(f"report: {self.run_dir}")
        reasons = [gate.name for gate in summary.gates if not gate.passed and not gate.unjudged] + regressions
        if self.interrupted_by:
            reasons.insert(0, f"interrupted by {self.interrupted_by}")
        if locust_code not in (0, 1, INCONCLUSIVE_EXIT_CODE):
            reasons.append(f"locust exit code {locust_code}")
        elif locust_code == 1 and summary.verdict != FAIL:
            reasons.append("locust reported unexpected outcomes")
        if reasons:
            self.printer.print(f"verdict: FAIL ({', '.join(reasons)})")
            return 1
        if summary.verdict == INCONCLUSIVE:  # nothing against the server, but its point went unjudged
            self.printer.print(summary.verdict_line())
            return INCONCLUSIVE_EXIT_CODE
        self.printer.print("verdict: PASS")
        return 0

    def _compare_with_baseline(self, summary: Summary) -> list[str]:
        if not self.plan.baseline:
            return []
        try:
            base = Summary.load(self.plan.baseline)
        except (OSError, ValueError) as exc:
            self.printer.print(f"baseline: cannot read {self.plan.baseline}: {exc}")
            return ["baseline unreadable"]
        lacking = compare.missing_figures(base)
        different = compare.incomparable(base, summary)
        if lacking or different:
            why = different or f"it lacks {', '.join(lacking)}"
            self.printer.print(f"baseline: {self.plan.baseline} is no comparison for this run: {why}")
            return ["baseline not comparable"]
        rows = compare.compare(base, summary, self.plan.thresholds)
        self.printer.print(compare.render(rows, str(self.plan.baseline), str(self.run_dir)))
        return [f"regression in {row.metric}" for row in rows if row.regressed]
