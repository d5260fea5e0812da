"""A child process the harness starts and stops: its process, the URL it serves, its name.

``ChildService.launch`` starts a program that prints a ready line (``<name> ready: URL``) and returns
once it has; ``stop()`` ends it by its process id (SIGTERM, then SIGKILL after a grace period),
reaps it and closes its pipes. Its stdin is a pipe only this process holds: when this process dies
the kernel closes it and the child stops itself (``sse_soak_lifeline``). A service that exits, or
stays silent, before it is ready is a ``ServerStartError``.

Here, apart from ``stack``, so that the stack and the proxies it starts (``loadtests.services.proxies``)
both build on it without importing each other.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from loadtests.errors import ServerStartError
from sse_soak_lifeline import harness_environment, parse_refusal

READY_LINE = re.compile(r"^(?:target_server|proxy|vllm) ready: (?P<url>http://\S+)")


@dataclass
class ChildService:
    """A started child process and the URL it serves."""

    process: subprocess.Popen[str]
    url: str
    name: str
    _drainer: threading.Thread | None = None
    _cleanup: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def command(self) -> list[str]:
        """The command line it was started with (``launch`` gives ``Popen`` a list of strings)."""
        return [str(part) for part in cast("Sequence[str]", self.process.args)]

    @property
    def description(self) -> str:
        """``URL pid PID args COMMAND``: which server a benchmark measured."""
        return f"{self.url} pid {self.pid} args {shlex.join(self.command)}"

    @classmethod
    def launch(
        cls, argv: Sequence[str], name: str, timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> ChildService:
        """Start ``argv`` and wait for its ready line (``<name> ready: URL``) on stdout. The child
        stops itself if this process dies (its stdin pipe closes)."""
        child_env = {**(os.environ if env is None else env), **harness_environment()}
        process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, start_new_session=True, env=child_env
        )
        try:
            url = _wait_for_ready_line(process, name, timeout)
        except BaseException:
            _terminate(process)
            _close_pipes(process)
            raise
        # Keep draining stdout so the child can never block on a full pipe.
        drainer = threading.Thread(target=_drain, args=(process,), daemon=True)
        drainer.start()
        return cls(process, url, name, drainer)

    def exited(self) -> str | None:
        """How it ended (``exited with 1``, ``was killed by SIGKILL``), or None while it runs."""
        code = self.process.poll()
        return None if code is None else exit_words(code)

    def stop(self, grace: float = 5.0) -> int | None:
        """Stop by pid (SIGTERM, then SIGKILL), reap it, close its pipe; returns the exit code."""
        code = _terminate(self.process, grace)
        if self._drainer is not None:
            self._drainer.join(grace)  # the pipe reaches EOF once the process is gone
        _close_pipes(self.process)
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None
        return code


def exit_words(code: int) -> str:
    """A child's exit status as a line says it: ``exited with 1``, ``was killed by SIGKILL``
    (``Popen.returncode``: negative for the signal that ended it)."""
    if code >= 0:
        return f"exited with {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"


def _wait_for_ready_line(process: subprocess.Popen[str], name: str, timeout: float) -> str:
    """The URL of the child's ready line. A child that exits first is a ``ServerStartError`` that
    quotes its refusal line if it printed one, else whatever it printed on stdout."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = process.stdout.readline()
            if not line:
                code = process.wait()
                refusals = [reason for reason in map(parse_refusal, seen) if reason is not None]
                reason = refusals[-1] if refusals else repr("".join(seen))
                raise ServerStartError(f"{name} exited with {code} before it was ready: {reason}")
            seen.append(line)
            match = READY_LINE.match(line)
            if match:
                return match["url"]
    raise ServerStartError(f"{name} printed no ready line within {timeout:.0f} s")


def _drain(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for _ in process.stdout:
        pass


def _close_pipes(process: subprocess.Popen[str]) -> None:
    """Close our ends of the child's pipes (closing stdin is the child's cue, were it still running)."""
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def _terminate(process: subprocess.Popen[str], grace: float = 5.0) -> int | None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode
