"""Services that end when the run that started them dies, even by SIGKILL.

Each service the harness starts gets a stdin pipe whose write end only the harness holds (see
``stack``). The kernel closes that end when the harness dies, however it dies, so EOF on stdin
means nobody is left to stop the service. Two ways to act on it:

- ``exit_when_stdin_closes()`` (from ``sse_soak_lifeline``, the bundled server's public
  statement of this protocol; the server imports nothing from the harness): our own services run
  a daemon thread that reads stdin and, at EOF, SIGTERMs its own process: the same graceful path
  as a normal stop, with a SIGKILL of itself if that hangs. Opt-in through
  ``SSE_SOAK_EXIT_ON_STDIN_EOF=1``, so a proxy started by hand is not stopped by its terminal.
- ``python -m loadtests.services.parent_watch [--remove DIR] -- COMMAND...``: a watchdog for programs that
  cannot watch a pipe (nginx). It runs COMMAND in the foreground, forwards every ending signal
  (SIGINT, SIGTERM, SIGHUP: ``loadtests.base.ending_signals``) to it as SIGTERM, stops it by pid
  at EOF on its own stdin (and then removes DIR, which no one else is left to remove), and exits
  as COMMAND exited, whether COMMAND was stopped or ended by itself.

A Locust run started by a launcher (the soak job, ``launch``) has no pipe to watch: its stdin is
not ours to read on an event loop. The launcher names itself in ``LAUNCHER_ENV`` and the run's
``end_with_launcher()`` polls its own parent pid: once the launcher is gone, even by SIGKILL, the
run SIGTERMs itself, which ends and judges it as interrupted, as a SIGTERM from the launcher would.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

import psutil

from loadtests.base.ending_signals import ENDING_SIGNALS
from sse_soak_lifeline import ENV_VAR, GRACE_S, exit_when_stdin_closes, wait_for_stdin_eof

__all__ = ["ENV_VAR", "GRACE_S", "LAUNCHER_ENV", "end_with_launcher", "exit_when_stdin_closes", "main", "watchdog"]

LAUNCHER_ENV = "SSE_SOAK_LAUNCHER_PID"
"""The pid of the process that started this Locust run and waits for it."""
LAUNCHER_POLL_S = 0.5


def launcher_environment() -> dict[str, str]:
    """What a launcher adds to the environment of the run it starts."""
    return {LAUNCHER_ENV: str(os.getpid())}


def end_with_launcher() -> bool:
    """In a Locust process whose parent is the launcher named in ``LAUNCHER_ENV``: watch, from a
    greenlet, for that parent to go, then SIGTERM this process. False (nothing watched) without a
    launcher, or in a process another one forked (Locust's ``--processes`` workers: their parent is
    the run's master, which they follow as Locust makes them)."""
    named = os.environ.get(LAUNCHER_ENV, "")
    if not named.isdigit() or os.getppid() != int(named):
        return False
    end_with_parent()
    return True


def end_with_parent(when_gone: Callable[[], None] | None = None) -> None:
    """Watch, from a greenlet, for this process's parent to go (even by SIGKILL: the process is
    re-parented), then call ``when_gone`` and SIGTERM this process, which ends as a Ctrl-C would.
    A launcher's run follows its launcher so; a ``--processes`` worker follows its master."""
    import gevent  # here: ``python -m loadtests.services.parent_watch`` (nginx's watchdog) runs without it

    def watch(parent: int) -> None:
        while os.getppid() == parent:
            gevent.sleep(LAUNCHER_POLL_S)
        if when_gone is not None:
            when_gone()
        os.kill(os.getpid(), signal.SIGTERM)

    gevent.spawn(watch, os.getppid())


def watchdog(command: Sequence[str], remove: Sequence[str] = ()) -> int:
    """Run ``command`` until it exits; its exit status (negative: the signal that ended it).

    Only this (main) thread reaps the child, and signal handlers run in this thread too, so a pid
    that is signalled has never been reaped and cannot have been reused.
    """
    child: subprocess.Popen[bytes] | None = None
    kill_at: list[float] = []
    parent_gone = threading.Event()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        kill_at.append(time.monotonic() + GRACE_S)
        if child is not None:
            child.send_signal(signal.SIGTERM)

    for signum in ENDING_SIGNALS:
        signal.signal(signum, stop)  # before the child exists: a stop that comes first is not lost
    child = subprocess.Popen(list(command), stdin=subprocess.DEVNULL)
    if kill_at:
        child.send_signal(signal.SIGTERM)

    def at_eof() -> None:
        wait_for_stdin_eof()
        parent_gone.set()
        os.kill(os.getpid(), signal.SIGTERM)  # handled by ``stop`` in the main thread

    threading.Thread(target=at_eof, name="parent-watch", daemon=True).start()
    while True:
        try:
            code = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if kill_at and time.monotonic() > kill_at[0]:
                child.kill()
    _end_what_it_left(child.pid)
    if parent_gone.is_set():
        for directory in remove:
            shutil.rmtree(directory, ignore_errors=True)
    return code


def _end_what_it_left(child: int) -> None:
    """Kill what the command left behind in this watchdog's process group (the command's own
    children: nginx's workers outlive a master killed by SIGKILL, and go on serving its port).
    The watchdog leads its group (it is started in a session of its own), and only the command
    and what it started are in it with the watchdog."""
    group = os.getpgid(0)
    if group != os.getpid():
        return  # not started as a group's leader: the group is not ours to end
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if process.pid not in (os.getpid(), child) and os.getpgid(process.pid) == group:
                process.kill()


def _cpu_list(text: str) -> list[int]:
    try:
        cpus = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of CPU numbers") from None
    if not cpus or min(cpus) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of CPU numbers")
    return cpus


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.services.parent_watch",
        description="Run COMMAND; stop it when this process's stdin closes (its parent died); exit as it did.",
    )
    parser.add_argument(
        "--remove",
        action="append",
        default=[],
        metavar="DIR",
        help="directory to remove after COMMAND was stopped because stdin closed",
    )
    parser.add_argument(
        "--cpus",
        type=_cpu_list,
        metavar="N,N...",
        help="run COMMAND (and every process it starts) on these CPUs only",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: the program and its arguments")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the command to run after --")
    if options.cpus:
        try:
            os.sched_setaffinity(0, options.cpus)  # inherited by the child, before it starts anything
        except OSError as error:
            parser.error(f"--cpus {','.join(map(str, options.cpus))}: {error.strerror}")
    code = watchdog(command, options.remove)
    if code < 0:  # ended by a signal: end the same way, so our parent sees what happened
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
