"""Start and stop the bundled target server as a child process.

The server runs in its own process (its asyncio loop and uvicorn must not share a process with
Locust's gevent monkey-patching). Readiness is its ready line on stdout, never a sleep; stopping
is by its own process id: SIGTERM, then SIGKILL after a grace period. Invariant: a
``TargetServerProcess`` that ``start()`` returned is listening; after ``stop()`` its process has
exited and been reaped.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

READY_PATTERN = re.compile(r"^target_server ready: (?P<url>http://\S+)")


class ServerStartError(RuntimeError):
    """The server exited or stayed silent before printing its ready line."""


@dataclass
class TargetServerProcess:
    """A running ``python -m target_server``; ``url`` is its base URL."""

    process: subprocess.Popen[str]
    url: str
    args: list[str] = field(default_factory=list)
    _drainer: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls, args: Sequence[str] = (), timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> TargetServerProcess:
        """Launch on a free loopback port (unless ``args`` set ``--port``) and wait for readiness."""
        argv = [sys.executable, "-m", "target_server", *args]
        if "--port" not in args:
            argv += ["--port", "0"]
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env, start_new_session=True
        )
        try:
            url = _wait_for_ready_line(process, timeout)
        except BaseException:
            _terminate(process)
            if process.stdout is not None:
                process.stdout.close()
            raise
        # Keep draining stdout so the child can never block on a full pipe.
        drainer = threading.Thread(target=_drain, args=(process,), daemon=True)
        drainer.start()
        return cls(process, url, list(args), drainer)

    def stop(self, grace: float = 5.0) -> int | None:
        """Stop by pid (SIGTERM, then SIGKILL), reap it and close its pipe; returns the exit code."""
        code = _terminate(self.process, grace)
        if self._drainer is not None:
            self._drainer.join(grace)  # the pipe reaches EOF once the process is gone
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code


def _wait_for_ready_line(process: subprocess.Popen[str], timeout: float) -> str:
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
                raise ServerStartError(f"target server exited with {code} before it was ready: {''.join(seen)!r}")
            seen.append(line)
            match = READY_PATTERN.match(line)
            if match:
                return match["url"]
    raise ServerStartError(f"target server printed no ready line within {timeout:.0f} s")


def _drain(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for _ in process.stdout:
        pass


def _terminate(process: subprocess.Popen[str], grace: float = 5.0) -> int | None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


@contextmanager
def target_server(args: Sequence[str] = (), timeout: float = 30.0) -> Iterator[TargetServerProcess]:
    """A started server for the ``with`` block, always stopped after it."""
    server = TargetServerProcess.start(args, timeout)
    try:
        yield server
    finally:
        server.stop()
