"""A headless Locust run in a child process: the one place the harness starts one.

``launch`` (a run for Python callers, and its plan) and the soak job (this launcher plus a
watcher) both describe their run as a ``HeadlessRun`` and start it as a ``ChildRun``, so the same
run gets the same command line and its child is treated alike. Invariants kept here:

- the child runs in its own session: a Ctrl-C at the terminal reaches only the launcher, which
  decides what the run gets (SIGINT with a grace period for ``launch``, SIGTERM for the soak);
- it names its launcher (``LAUNCHER_ENV``), so it ends itself if the launcher dies, even by SIGKILL;
- the run directory is made here and handed over (``SSE_SOAK_RUN_DIR``): results are read from
  it, never from what the child prints;
- the API key travels in its environment, never on its command line;
- a child still going at its time limit is killed with its process group (Locust's workers);
- leaving a ``ChildRun`` (its ``with`` block) never leaves the child running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from loadtests.declare.options import locust_arguments, option
from loadtests.errors import InvalidValue
from loadtests.record.run_dir import RUN_DIR_ENV, RunDir
from loadtests.services.parent_watch import launcher_environment

INTERRUPT_GRACE_S = 60.0
"""How long a run interrupted by Ctrl-C gets to write its summary before it is killed."""
OUTPUT_DRAIN_S = 10.0
"""How long the output is read after the child ended. A service the run started shares its stderr
and ends within seconds of the run (it watches a pipe); none may hold the launcher forever."""


@dataclass(frozen=True)
class HeadlessRun:
    """What to run: a locustfile, headless, for ``duration_s`` with ``users``, and its options."""

    locustfile: Path
    users: int
    duration_s: int
    """The option ``duration`` (Locust's ``-t``): how long the run sends load, in whole seconds."""
    spawn_rate: float | None = None
    """Users started per second (default: all at once)."""
    report_dir: str | os.PathLike[str] = option("report_dir").default
    host: str | None = None
    """The server under test; None lets the scenario start its bundled stack."""
    processes: int | None = None
    """Locust's worker processes; None runs in one process."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Any other option of the scenario or of Locust, as keywords (``options.locust_arguments``); these win
    over the named fields above."""
    extra_args: Sequence[str] = ()
    """Arguments passed as they are, last, so they win over everything before them."""
    api_key: str | None = field(default=None, repr=False)
    """Never shown: a failing test prints its run, and CI logs are read by many."""

    def locust_arguments(self) -> list[str]:
        """Locust's arguments after ``-f <locustfile>``; ``ValueError`` for a run Locust would read
        as unbounded or empty (``-t 0s`` is no limit at all)."""
        if self.users < 1 or self.duration_s < 1:
            raise InvalidValue(f"a run needs at least 1 user and 1 s, got {self.users} users for {self.duration_s} s")
        rate = self.users if self.spawn_rate is None else self.spawn_rate
        named = {"host": self.host, "processes": self.processes, "report_dir": self.report_dir}
        return [
            *("-u", str(self.users), "-r", f"{rate:g}", "-t", f"{self.duration_s}s", "--headless", "--only-summary"),
            *locust_arguments({**named, **self.options}),
            *self.extra_args,
        ]

    def command(self) -> list[str]:
        return [sys.executable, "-m", "locust", "-f", str(self.locustfile), *self.locust_arguments()]

    def environment(self) -> dict[str, str]:
        """This process's environment, with the API key when the run has one."""
        environment = dict(os.environ)
        if self.api_key is not None:
            environment["SSE_SOAK_API_KEY"] = self.api_key
        return environment

    def make_run_dir(self) -> RunDir:
        """A new run directory under ``report_dir``, named after the locustfile (``RunDirError``)."""
        return RunDir.create(self.report_dir, self.locustfile.stem)


class ChildRun:
    """A command started in its own session, stdout and stderr read together: each line kept and,
    when ``on_line`` is given, passed to it (without its newline) from a reader thread."""

    def __init__(
        self,
        command: Sequence[str],
        environment: Mapping[str, str],
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        self.interrupted_by: str | None = None
        """The name of the signal ``forwarding`` passed on, if one came."""
        self._on_line = on_line
        self._lines: list[str] = []
        self._started = time.monotonic()
        self.process = subprocess.Popen(
            list(command),
            env={**environment, **launcher_environment()},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name="child-run-output", daemon=True)
        self._reader.start()

    @classmethod
    def start(
        cls,
        run: HeadlessRun,
        run_dir: RunDir | None,
        environment: Mapping[str, str] | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> ChildRun:
        """Start ``run``, handing it ``run_dir`` when there is one; ``environment`` is added to the run's."""
        handed = {} if run_dir is None else {RUN_DIR_ENV: str(run_dir)}
        return cls(run.command(), {**run.environment(), **handed, **(environment or {})}, on_line)

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def wait(self, limit_s: float | None = None) -> tuple[int, str, str | None]:
        """``(exit code, output, problem)`` once the child has ended; ``problem`` says so when it was
        still going ``limit_s`` after it started and had to be killed (None: no limit). Ctrl-C here
        reaches the child as SIGINT, which then gets ``INTERRUPT_GRACE_S`` to end before it is
        killed and ``KeyboardInterrupt`` goes on."""
        problem = None
        try:
            self.process.wait(None if limit_s is None else max(0.0, self._started + limit_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            problem = f"killed after {limit_s:g} s: the run did not end by itself"
        except KeyboardInterrupt:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                self.kill()
            raise
        self._reader.join(OUTPUT_DRAIN_S)
        return self.process.returncode, "".join(list(self._lines)), problem

    def kill(self) -> None:
        """Kill the child and its process group (the workers it forked; the services it started
        watch a pipe from it and exit with it), and reap it."""
        if self.process.poll() is None:  # unreaped until we wait: the pid cannot be another's yet
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    @contextlib.contextmanager
    def forwarding(self, signals: Iterable[signal.Signals], as_signal: signal.Signals) -> Iterator[None]:
        """While inside (main thread only): each of ``signals`` sent to this process goes to the
        child as ``as_signal`` and is named in ``interrupted_by``; the previous handlers come back after."""

        def forward(signum: int, _frame: FrameType | None) -> None:
            self.interrupted_by = signal.Signals(signum).name
            if self.process.poll() is None:
                self.process.send_signal(as_signal)

        previous = {sig: signal.signal(sig, forward) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def __enter__(self) -> ChildRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.kill()  # an early exit (an exception) must never leave the run behind
        if not self._reader.is_alive() and self.process.stdout is not None:
            self.process.stdout.close()  # a reader still blocked on it would block the close: left to end at EOF

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.append(line)
            if self._on_line is not None:
                self._on_line(line.rstrip("\n"))


def run_to_end(
    run: HeadlessRun,
    limit_s: float,
    run_dir: RunDir | None = None,
    environment: Mapping[str, str] | None = None,
) -> tuple[int, str, str | None]:
    """Start ``run`` and wait for it (``ChildRun.wait``): ``(exit code, output, problem)``."""
    with ChildRun.start(run, run_dir, environment) as child:
        return child.wait(limit_s)
