"""The nightly soak job: one long Locust run, watched, checkpointed, judged for drift and baseline.

``python -m loadtests soak`` runs ``locust -f <scenario> --headless`` as a child (its own process
group, so Ctrl-C reaches only us, and we end Locust with SIGTERM, which makes it stop its users
and write its report). While it runs we refresh a progress line from the run directory's parquet
parts, sample the memory of the harness and of the bundled server into ``resources.csv``, and
rewrite ``summary.json`` every checkpoint interval, so a run killed after hours still leaves a
usable report. At the end we add the drift windows and gates, compare with ``--baseline`` when
given, and print the verdict as the last line; the exit code says the same (0 pass, 1 fail). When
Locust or the scenario refuses an option before any run starts (exit 2), we say so in one line on
stderr and exit 2 too: a usage error, not a failed run.
"""

from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from loadtests import compare
from loadtests.drift import DRIFT_GATES, DriftLimits, judge_drift
from loadtests.gates import GateResult
from loadtests.progress import ProgressPrinter, RunProgress
from loadtests.resources import ResourceSampler, read_resources

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", re.ASCII)
_UNITS = "hms"
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}
_EXPECTED = "expected e.g. 90s, 20m, 8h, 1h30m or plain seconds"
_SERVICE_LINE = re.compile(r"^(target server|embedded proxy|nginx): \S+ \(pid (\d+)\)")
_REPORT_LINE = re.compile(r"^(?:run directory|report): (.+)$")
SAMPLE_INTERVAL_S = 5.0
USAGE_ERROR = 2  # Locust's (argparse's) code for a bad option, and ours
DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "soak.py"


def parse_duration(text: str) -> int:
    """Whole seconds from ``90s``, ``20m``, ``8h``, ``1h30m``, ``1.5h`` or plain seconds (``45``).

    Locust's ``-t`` counts whole seconds and reads ``0s`` as no limit at all, so a duration under
    1 s or with a fraction of a second is refused rather than rounded; so is anything ambiguous:
    a number without a unit after a unit (``1h2``), a unit twice, units out of order (h, m, s),
    an unknown unit, NaN, inf, zero, negative or empty. Raises ``ValueError`` saying which."""
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"empty; {_EXPECTED}")
    if stripped.startswith("-"):
        raise ValueError(f"{text!r}: a duration must be positive")
    parts, position = [], 0
    while position < len(stripped):
        match = _DURATION_PART.match(stripped, position)
        if match is None:
            raise ValueError(f"{text!r} is not a duration; {_EXPECTED}")
        parts.append((match[1], match[2]))
        position = match.end()
    total, units, before = Fraction(0), "", ""
    for number, unit in parts:
        if not unit and len(parts) > 1:
            later = [f"{before}{number}{u}" for u in _UNITS[_UNITS.index(units[-1]) + 1 :]]
            fix = f"write {' or '.join(later)}" if later else "each number needs a unit: h, m or s"
            raise ValueError(f"{text!r}: {number} after {before} has no unit ({fix})")
        unit = unit or "s"
        if unit not in _UNIT_SECONDS:
            raise ValueError(f"{text!r}: unknown unit {unit!r}; {_EXPECTED}")
        if unit in units:
            raise ValueError(f"{text!r}: the unit {unit} comes twice")
        if units and _UNITS.index(unit) < _UNITS.index(units[-1]):
            raise ValueError(f"{text!r}: units out of order (hours, then minutes, then seconds, e.g. 1h30m)")
        units, before = units + unit, f"{before}{number}{unit}"
        total += Fraction(number) * _UNIT_SECONDS[unit]
    return _whole_seconds(text, total)


def _whole_seconds(text: str, total: Fraction) -> int:
    if total == 0:
        raise ValueError(f"{text!r}: a duration must be positive")
    if total < 1:
        raise ValueError(f"{text!r} is under 1 s, the resolution of Locust's -t (which reads 0s as no limit); "
                         "use at least 1s")  # fmt: skip
    if total.denominator != 1:
        low = math.floor(total)
        raise ValueError(f"{text!r} is {float(total):g} s, not a whole number of seconds (the resolution of "
                         f"Locust's -t); use {low}s or {low + 1}s")  # fmt: skip
    return int(total)


@dataclass
class SoakPlan:
    scenario: Path = DEFAULT_SCENARIO
    duration_s: float = 300.0
    users: int = 8
    spawn_rate: float = 8.0
    processes: int | None = None
    host: str | None = None
    report_dir: str = "reports"
    baseline: str | None = None
    progress_interval: float | None = None
    checkpoint_interval: float = 60.0
    limits: DriftLimits = field(default_factory=DriftLimits)
    thresholds: compare.Thresholds = field(default_factory=compare.Thresholds)
    locust_args: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        if not (self.duration_s >= 1 and float(self.duration_s).is_integer()):  # Locust reads -t 0s as no limit
            raise ValueError(f"the duration must be a whole number of seconds, at least 1, got {self.duration_s}")
        command = [sys.executable, "-m", "locust", "-f", str(self.scenario), "--headless", "-u", str(self.users),
                   "-r", f"{self.spawn_rate:g}", "-t", f"{int(self.duration_s)}s", "--report-dir",
                   self.report_dir, "--only-summary", "--stop-timeout", "5"]  # fmt: skip
        if self.processes:
            command += ["--processes", str(self.processes)]
        if self.host:
            command += ["--host", self.host]
        return command + self.locust_args


class Soak:
    def __init__(self, plan: SoakPlan, printer: ProgressPrinter | None = None) -> None:
        self.plan = plan
        self.printer = printer or ProgressPrinter()
        self.run_dir: Path | None = None
        self.interrupted_by: str | None = None
        self._locust: subprocess.Popen[str] | None = None
        self._sampler: ResourceSampler | None = None
        self._last_error: str | None = None

    def run(self) -> int:
        started = time.monotonic()
        self._locust = subprocess.Popen(self.plan.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
        self._sampler = ResourceSampler(self._locust.pid)
        reader = threading.Thread(target=self._read_output, daemon=True)
        reader.start()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._watch(started)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._locust.poll() is None:  # we are leaving early (an exception): never leave it behind
                self._locust.kill()
                self._locust.wait()
        reader.join(10)
        return self._finish(self._locust.returncode)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.interrupted_by = signal.Signals(signum).name
        if self._locust is not None and self._locust.poll() is None:
            self._locust.send_signal(signal.SIGTERM)  # Locust stops its users and writes its report

    def _read_output(self) -> None:
        assert self._locust is not None and self._locust.stdout is not None
        for raw in self._locust.stdout:
            line = raw.rstrip("\n")
            if line.startswith("sse-soak: ") or "error: " in line:
                self._last_error = line
            service = _SERVICE_LINE.match(line)
            if service and self._sampler is not None:
                self._sampler.service_pids.add(int(service[2]))
                if service[1] == "target server":
                    self._sampler.server_pid = int(service[2])
            directory = _REPORT_LINE.match(line)
            if directory and self.run_dir is None:
                self.run_dir = Path(directory[1])
                if self._sampler is not None:
                    self._sampler.path = self.run_dir / "resources.csv"
            if line.startswith(("gate ", "sse-soak:", "Traceback", "target server:", "run directory:")):
                self.printer.print(line)

    def _watch(self, started: float) -> None:
        """Sample memory every ``SAMPLE_INTERVAL_S`` (each drift window needs samples), show progress
        every progress interval, checkpoint every checkpoint interval, until Locust exits."""
        assert self._locust is not None and self._sampler is not None
        interval = self.plan.progress_interval or (1.0 if self.printer.in_place else 10.0)
        tick = min(interval, SAMPLE_INTERVAL_S, self.plan.duration_s / self.plan.limits.windows / 3)
        next_checkpoint = started + self.plan.checkpoint_interval
        next_progress = started
        progress: RunProgress | None = None
        while self._locust.poll() is None:
            time.sleep(min(tick, 0.5) if progress is None else tick)
            if self.run_dir is None:
                continue
            progress = progress or RunProgress(self.run_dir)
            _, harness_mb, server_mb = self._sampler.sample()
            if time.monotonic() >= next_progress:
                progress.refresh()
                elapsed = time.monotonic() - started
                self.printer.show(progress.line(elapsed, self.plan.duration_s - elapsed, harness_mb, server_mb))
                next_progress += interval
            if time.monotonic() >= next_checkpoint:
                self._checkpoint()
                next_checkpoint += self.plan.checkpoint_interval

    def _checkpoint(self) -> None:
        """Rewrite summary.json from what is on disk now (the gates and drift so far); the HTML report
        waits for the end (it reads every frame), or for ``python -m loadtests report``."""
        from loadtests.rebuild import rebuild_report  # pandas, only when needed

        assert self.run_dir is not None
        rebuild_report(self.run_dir, lambda summary, requests: self._add_drift(summary, requests, True), html=False)

    def _add_drift(self, summary: dict[str, Any], requests: Any, partial: bool) -> None:
        assert self.run_dir is not None
        windows, results = judge_drift(requests, read_resources(self.run_dir), self.plan.limits)
        summary["soak"] = {"partial": partial, "duration_s": self.plan.duration_s, "limits": self.plan.limits.as_dict(),
                           "windows": windows.to_dict(orient="records")}  # fmt: skip
        summary["gates"] += [{"name": r.name, "passed": r.passed, "detail": r.detail} for r in results]
        summary["passed"] = all(g["passed"] for g in summary["gates"])

    def _finish(self, locust_code: int) -> int:
        self.printer.print(f"locust exited with {locust_code}")
        if self.run_dir is None and locust_code == USAGE_ERROR:  # Locust or the scenario refused an option
            print(f"python -m loadtests soak: locust refused to start: {self._last_error or 'see its output above'}",
                  file=sys.stderr, flush=True)  # fmt: skip
            return USAGE_ERROR
        if self.run_dir is None or not (self.run_dir / "requests.parquet").exists():
            self.printer.print("verdict: FAIL (the run wrote no results)")
            return 1
        summary = self._final_summary()
        for gate in summary["gates"]:
            if gate["name"] in DRIFT_GATES:
                self.printer.print(GateResult(**gate).line())
        regressions = self._compare_with_baseline(summary)
        self.printer.print(f"report: {self.run_dir}")
        reasons = [g["name"] for g in summary["gates"] if not g["passed"]] + regressions
        if self.interrupted_by:
            reasons.insert(0, f"interrupted by {self.interrupted_by}")
        if locust_code not in (0, 1):
            reasons.append(f"locust exit code {locust_code}")
        elif locust_code == 1 and summary["passed"]:
            reasons.append("locust reported unexpected outcomes")
        self.printer.print(f"verdict: {'FAIL (' + ', '.join(reasons) + ')' if reasons else 'PASS'}")
        return 1 if reasons else 0

    def _final_summary(self) -> dict[str, Any]:
        from loadtests.rebuild import rebuild_report

        assert self.run_dir is not None
        # The scenario's gates re-judged from disk (one code path with `python -m loadtests report`).
        return rebuild_report(self.run_dir, lambda summary, requests: self._add_drift(summary, requests, False))

    def _compare_with_baseline(self, summary: dict[str, Any]) -> list[str]:
        if not self.plan.baseline:
            return []
        try:
            base = compare.load_summary(self.plan.baseline)
        except (OSError, ValueError) as exc:
            self.printer.print(f"baseline: cannot read {self.plan.baseline}: {exc}")
            return ["baseline unreadable"]
        rows = compare.compare(base, summary, self.plan.thresholds)
        self.printer.print(compare.render(rows, str(self.plan.baseline), str(self.run_dir)))
        return [f"regression in {row.metric}" for row in rows if row.regressed]
