"""SIGINT, SIGTERM and SIGHUP during a Locust run: end the run once, never half-way through its verdict.

Locust turns Ctrl-C into a ``KeyboardInterrupt`` raised in whatever greenlet runs at that instant
(a user's, losing its row, or the one computing the summary, losing the summary), and SIGTERM
into a call of its ``shutdown()`` from a new greenlet while the main greenlet may enter it too
(everything at quitting ran twice); an idle web UI's Ctrl-C was lost in about 1 of 6 tries, raised
where nothing passed it on; SIGHUP (a closed terminal, a CI runner's hang-up) killed the run with
no verdict and no summary. Every ending signal (``loadtests.base.ending_signals``) is handled alike:
SIGINT and SIGHUP come here from Locust's init on (``install(AT_INIT)``), SIGTERM from the first
test start (Locust installs its own after init). The first signal asks
Locust's main greenlet to shut down, the way Ctrl-C does when Locust is idle, so ``shutdown()``
runs once, in one greenlet; while the summary is computed and written
(``deferred()``) a signal is only noted and acted on after (``release()``); while report.html is
written (``interruptible()``) a signal cuts it, and the caller says so. ``restore()`` puts the
previous Python handlers back. Locust's own SIGTERM handler is a libev watcher that Python cannot
see, so after ``restore()`` SIGTERM has its default action: by then the run is written.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import gevent

from loadtests.base.ending_signals import ENDING_SIGNALS
from loadtests.base.lines import say

SIGNALS: tuple[int, ...] = ENDING_SIGNALS
"""What the guard handles once a test started: every signal that ends a run."""
AT_INIT: tuple[int, ...] = tuple(signum for signum in ENDING_SIGNALS if signum != signal.SIGTERM)
"""What it handles from Locust's init on: all but SIGTERM, whose handler Locust installs after init
(ours replaces it at the first test start)."""


class SignalGuard:
    """One per process; ``AT_INIT`` installed at init, SIGTERM too at the first test start, all
    restored when Locust quits."""

    def __init__(self) -> None:
        self.received: list[tuple[str, float]] = []
        """Every signal received, as (name, ``time.monotonic()``)."""
        self.test_started = False
        """Set by the caller at the first test start: before it there is no run to speak of, and a
        signal quits without a word of ours."""
        self.quitting = False
        """Set by the caller once Locust is shutting down: a signal then has nothing left to ask."""
        self.speaks = True
        """Whether this process says what a signal does: not a worker, whose master speaks for the
        run (Ctrl-C reaches every process of ``--processes``: one line, not one per process)."""
        self._previous: dict[int, Any] = {}
        self._mode = "quit"  # "quit": ask Locust to shut down; "defer": note it; "cut": interrupt the writer
        self._writer: Any = None
        self._pending: str | None = None
        self._quit_requested = False

    def install(self, signals: tuple[int, ...] = SIGNALS) -> None:
        """Route ``signals`` here; one installed already stays as it is."""
        for signum in signals:
            if signum not in self._previous:
                self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous = {}

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Signals are noted, not acted on, until ``release()``."""
        previous, self._mode = self._mode, "defer"
        try:
            yield
        finally:
            self._mode = previous

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A signal raises ``KeyboardInterrupt`` in this greenlet (and still counts for ``release()``)."""
        previous, self._mode, self._writer = self._mode, "cut", gevent.getcurrent()
        try:
            yield
        finally:
            self._mode, self._writer = previous, None

    def release(self) -> None:
        """Act on a signal that arrived while deferred or cut: ask Locust to shut down, or say that it
        is ending already (a signal that came while report.html was written but while another
        greenlet ran, say one waiting on a file write, is only noted: the HTML is then whole)."""
        name, self._pending = self._pending, None
        if name is not None:
            self._request_quit(name)

    def end_run(self) -> None:
        """End the run as a first signal does (Locust's main greenlet shuts it down, once), for a
        cause that is no signal and that the caller says (a service of the run died); nothing when
        the run is ending already. Call it from a greenlet, never from a signal handler."""
        if self._quit_requested or self.quitting:
            return
        self._quit_requested = True
        gevent.get_hub().loop.run_callback(self._interrupt_main)

    def _handle(self, signum: int, _frame: Any) -> None:
        # A Python signal handler: it runs between two bytecodes of whatever greenlet is current, so
        # it only notes and schedules (printing here could re-enter a print in progress).
        name = signal.Signals(signum).name
        self.received.append((name, time.monotonic()))
        if self._mode == "quit":
            self._request_quit(name)
            return
        self._pending = name
        if self._mode == "cut" and gevent.getcurrent() is self._writer:
            raise KeyboardInterrupt

    def _request_quit(self, name: str) -> None:
        loop = gevent.get_hub().loop
        said = self.test_started and self.speaks
        if self._quit_requested or self.quitting:
            if said:
                loop.run_callback(_say_if_heard, f"sse-soak: {name}: already ending, the run's report comes first")
            return
        self._quit_requested = True
        if said:
            loop.run_callback(_say_if_heard, f"sse-soak: {name}: ending the run")
        loop.run_callback(self._interrupt_main)

    def _interrupt_main(self) -> None:
        if not self.quitting:  # Locust's main greenlet is waiting for the run: Ctrl-C's own path
            main = gevent.get_hub().parent
            assert main is not None  # the hub of the main thread always runs under its main greenlet
            main.throw(KeyboardInterrupt)


def _say_if_heard(line: str) -> None:
    """``say`` the line; an output that is gone (a closed terminal, whose SIGHUP this may answer)
    loses only the line, and the run ends as it would have."""
    with suppress(OSError):
        say(line)
