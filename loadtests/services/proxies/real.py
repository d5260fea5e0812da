"""What the real proxies share: a config of ours in a fresh directory, a watched start, a port wait.

A real proxy (``RealProxy``: nginx, HAProxy, Caddy, Apache httpd, Squid, each in its own module of
this package) is the Debian package's own binary, started by the run with a config of ours written
to a fresh temporary directory (with its pid file, logs and temp files), listening on a free
loopback port, in the foreground, under our watchdog (``python -m loadtests.services.parent_watch``)
so that it stops when the run's process is gone, even by SIGKILL. Readiness is an accepted TCP
connection: none of them prints a ready line. Invariant: a proxy that ``RealProxy.launch`` returned
accepts connections; after ``stop()`` its processes have exited and its directory is gone.
``start_watched`` does the same for any program that listens on a port it is given (LiteLLM's
gateway).

Every config is SSE-ready where the proxy lets it be (no response buffering, no compression, no
cache, HTTP/1.1 upstream, every request header forwarded) and sets the one timeout the run tests
from ``--proxy-read-timeout``: the longest silence from upstream the proxy tolerates, before and
after the response headers. The client side's own timeouts are set far above it, so the proxy's
read timeout is what cuts a silent stream, never its client timeout. Where a proxy adds something
of its own by default (HAProxy's write delay), the config keeps that default, as users run it, and
says so: the run measures the proxy people deploy, not a tuned one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from loadtests.base.ports import free_loopback_port
from loadtests.errors import InvalidValue, ServerStartError
from loadtests.services.child import ChildService
from loadtests.services.proxies.base import Front, ProxyKind, whole_seconds

CLIENT_SIDE_TIMEOUT_S = 3600
"""Timeouts on the client's side of each proxy: far above any read timeout a run tests."""


@dataclass(frozen=True)
class Upstream:
    """The server behind the proxy: plain HTTP, a host and a port."""

    host: str
    port: int

    @classmethod
    def of(cls, url: str, kind: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ServerStartError(f"--proxy {kind} fronts an http:// server only, not {url.split('://')[0]}://")
        return cls(parts.hostname, parts.port or 80)

    @property
    def address(self) -> str:
        """``host:port``, an IPv6 literal in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Setup:
    """What a config is made of: where its files go, where it listens, what it fronts, its timeout."""

    directory: Path
    port: int
    upstream: Upstream
    read_timeout: float
    no_delay: bool = False
    """HAProxy only: ``option http-no-delay`` (off by default, as users run it)."""

    @property
    def read_timeout_ms(self) -> int:
        return round(self.read_timeout * 1000)

    @property
    def whole_seconds(self) -> int:
        """The read timeout for proxies that take whole seconds, rounded up (never shorter)."""
        return whole_seconds(self.read_timeout)


@dataclass(frozen=True, kw_only=True)
class RealProxy(ProxyKind):
    """A real proxy: its binary and Debian package, its config, how it runs in the foreground. It
    is started with its config in a fresh temporary directory, under our watchdog (``launch``)."""

    binary: str
    package: str
    config_file: str
    render: Callable[[Setup], str]
    command: Callable[[str, Path], list[str]]
    """The argv that runs it in the foreground, given its binary and its directory."""
    run_as: str | None = None
    """The user it serves as when started as root: its directory must be that user's."""
    takes_no_delay: bool = False
    """Its config can turn its write delay off (HAProxy's ``option http-no-delay``, for benchmarks)."""

    def start(self, front: Front) -> ChildService:
        return self.launch(front.upstream, front.read_timeout)

    def launch(self, upstream: str, read_timeout: float, timeout: float = 30.0, no_delay: bool = False) -> ChildService:
        """It in front of ``upstream`` (an ``http://`` URL), under our watchdog: the service's
        process is the watchdog, which stops the proxy when this process dies, passes a stop on to
        it, and exits as the proxy did. Its config, pid file and logs live in a fresh temporary
        directory, removed when it stops."""
        kind = self.name
        if no_delay and not self.takes_no_delay:
            raise InvalidValue("no_delay is HAProxy's option http-no-delay")
        binary = shutil.which(self.binary)
        if binary is None:
            raise ServerStartError(
                f"--proxy {kind} needs {self.binary} installed (Debian: apt-get install {self.package})"
            )
        setup = Setup(
            Path(tempfile.mkdtemp(prefix=f"sse-soak-{kind}-")),
            free_loopback_port(),
            Upstream.of(upstream, kind),
            read_timeout,
            no_delay,
        )
        directory = setup.directory
        (directory / self.config_file).write_text(self.render(setup))
        if self.run_as is not None and os.geteuid() == 0:
            _give_to(directory, self.run_as)
        env = {"XDG_CONFIG_HOME": str(directory), "XDG_DATA_HOME": str(directory)}  # Caddy's state
        logs = [directory / "error.log", directory / "output.log"]
        return start_watched(kind, self.command(binary, directory), directory, setup.port, timeout, env, logs)


def start_watched(
    name: str,
    command: list[str],
    directory: Path,
    port: int,
    timeout: float,
    env: dict[str, str] | None = None,
    logs: list[Path] | None = None,
) -> ChildService:
    """Run ``command`` (which listens on 127.0.0.1:``port``) under our watchdog, in ``directory``,
    its output in ``directory/output.log``, with ``env`` on top of this process's environment; return
    once it accepts connections. The service's process is the watchdog, which stops the command when
    this process dies, passes a stop on to it, exits as it did, and removes ``directory``. If it
    exits or ``timeout`` passes first, it is stopped and a ``ServerStartError`` quotes the last line
    of the first of ``logs`` (default: its output) that has one."""
    argv = [sys.executable, "-m", "loadtests.services.parent_watch", "--remove", str(directory), "--", *command]
    with open(directory / "output.log", "w") as output:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=directory,
        )

    def cleanup() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    service = ChildService(process, f"http://127.0.0.1:{port}", name, None, cleanup)
    try:
        wait_for_port(process, port, timeout, name, logs or [directory / "output.log"])
    except BaseException:
        service.stop()
        raise
    return service


def _give_to(directory: Path, user: str) -> None:
    """Make ``directory`` writable by ``user``, whom the proxy becomes when started as root."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ServerStartError(f"the user {user!r} the proxy serves as does not exist") from None
    os.chown(directory, entry.pw_uid, entry.pw_gid)


def wait_for_port(process: subprocess.Popen[str], port: int, timeout: float, name: str, logs: list[Path]) -> None:
    """Return once something accepts a TCP connection on 127.0.0.1:``port``; a ``ServerStartError``
    quoting the last line of the first log that has one if ``process`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with {process.returncode}: {_last_line(logs)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)  # polling a port: these proxies print no ready line
    raise ServerStartError(f"{name} did not accept connections on 127.0.0.1:{port} within {timeout:.0f} s")


def _last_line(logs: list[Path]) -> str:
    for log in logs:
        try:
            lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
        if lines:
            return lines[-1]
    return "(it wrote nothing)"
