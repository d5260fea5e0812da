"""The system under test as child processes: the bundled server, the embedded proxy, a real proxy.

Each service runs in its own process (their asyncio loops must not share a process with
Locust's gevent monkey-patching), listens on a free 127.0.0.1 port, and is stopped by its own
process id: SIGTERM, then SIGKILL after a grace period. Readiness is a ready line on stdout for
our own services and an accepted TCP connection for the real proxies (``loadtests.services.real_proxies``:
nginx, HAProxy, Caddy, Apache, Squid), never a sleep. Invariant: a service
that ``start()`` returned is accepting connections; after ``stop()`` its process has exited,
been reaped, and its files are gone.

Nothing outlives the process that started it, even one killed by SIGKILL: every service's stdin
is a pipe whose write end only this process holds, and the kernel closes it when this process
dies. Our services see EOF and stop themselves; a real proxy, which cannot watch a pipe, runs under a
watchdog that does it for it (``loadtests.services.parent_watch``); the pipe and the bundled server's
refusal line are spoken as ``sse_soak_lifeline`` states them. The bundled server's API key
travels in its environment (``VLLM_API_KEY``), never on its command line, where ``ps`` would show it.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast
from urllib.parse import urlsplit

from loadtests.errors import InvalidValue, ServerStartError
from loadtests.services.real_vllm import VllmProfile
from sse_soak_lifeline import harness_environment, parse_refusal

READY_LINE = re.compile(r"^(?:target_server|proxy|vllm) ready: (?P<url>http://\S+)")
API_KEY_ENV = "VLLM_API_KEY"  # vLLM's name; the bundled server reads it too
PROXY_KINDS = ("none", "embedded", "nginx", "haproxy", "caddy", "apache", "squid", "litellm")
"""``none``, the embedded proxy, the real ones ``real_proxies`` starts, then LiteLLM's gateway
(``litellm_gateway``)."""


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


def split_api_key(server_args: Sequence[str]) -> tuple[list[str], str | None]:
    """``server_args`` without ``--api-key KEY`` / ``--api-key=KEY``, and the key (the last one
    given, as argparse takes it; None if none). Abbreviations argparse would accept (``--api``)
    count too. A trailing ``--api-key`` without a value is left for the server to reject."""
    args: list[str] = []
    key: str | None = None
    tokens = iter(server_args)
    for token in tokens:
        name, equals, value = token.partition("=")
        if len(name) < 3 or not "--api-key".startswith(name):
            args.append(token)
        elif equals:
            key = value
        else:
            following = next(tokens, None)
            if following is None:
                args.append(token)
            else:
                key = following
    return args, key


class TargetServerProcess(ChildService):
    """``python -m target_server`` on a free loopback port (unless ``args`` set ``--port``). An
    ``--api-key`` in ``args`` is passed as ``VLLM_API_KEY`` in the server's environment instead.
    Without ``env``, the server gets this process's environment minus any ``VLLM_API_KEY`` (one
    exported for a real vLLM), so its key is only ever the one in ``args``."""

    @classmethod
    def start(cls, args: Sequence[str] = (), timeout: float = 30.0, env: dict[str, str] | None = None) -> ChildService:
        args, key = split_api_key(args)
        argv = [sys.executable, "-m", "target_server", *args]
        if "--port" not in args:
            argv += ["--port", "0"]
        if env is None:
            env = {name: value for name, value in os.environ.items() if name != API_KEY_ENV}
        if key is not None:
            env = {**env, API_KEY_ENV: key}
        return cls.launch(argv, "target server", timeout, env)


def start_embedded_proxy(
    upstream: str, read_timeout: float, timeout: float = 30.0, listen_host: str = "127.0.0.1"
) -> ChildService:
    """``python -m loadtests proxy`` in front of ``upstream``, on a free port of ``listen_host``
    (loopback unless the run's server listens elsewhere: ``--server-bind``)."""
    listen = f"[{listen_host}]:0" if ":" in listen_host else f"{listen_host}:0"
    argv = [
        sys.executable,
        "-m",
        "loadtests",
        "proxy",
        "--listen",
        listen,
        "--upstream",
        upstream,
        "--read-timeout",
        repr(read_timeout),
    ]
    return ChildService.launch(argv, "embedded proxy", timeout)


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


class Service(Protocol):
    """A started part of the stack: its name, the URL it serves, its process id; ``stop()`` ends it."""

    name: str
    url: str

    @property
    def pid(self) -> int: ...

    def stop(self) -> int | None: ...


SERVER_NAMES = ("target server", "real vLLM")
"""The names of the services that are the server itself (not a proxy in front of it)."""


@dataclass
class Stack:
    """What stands in front of the harness for one run: a server (unless a host is given: the
    bundled one, or real vLLM with ``server="vllm"``) and a proxy (unless ``proxy`` is ``none``).
    ``url`` is where the harness sends requests; ``notes`` what the server could not be given;
    ``api_key`` is the server's key, which a gateway in front of it (LiteLLM) must send on."""

    url: str
    services: list[Service] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        host: str | None,
        server_args: Sequence[str],
        proxy: str = "none",
        read_timeout: float = 60.0,
        server: str = "bundled",
        api_key: str | None = None,
    ) -> Stack:
        if proxy not in PROXY_KINDS:
            raise InvalidValue(f"proxy must be one of {', '.join(PROXY_KINDS)}, got {proxy!r}")
        stack = cls(url=host or "")
        try:
            if host is None and server == "vllm":
                profile = VllmProfile.of(server_args)
                vllm = profile.server()
                stack.notes += [*profile.describe(), *vllm.notes()]
                stack._add(vllm.start())
            elif host is None:
                stack._add(TargetServerProcess.start(server_args))
            if proxy == "embedded":  # where the server listens: loopback, or its --server-bind address
                listen_host = urlsplit(stack.url).hostname if host is None else None
                stack._add(start_embedded_proxy(stack.url, read_timeout, listen_host=listen_host or "127.0.0.1"))
            elif proxy == "litellm":
                from loadtests.services.litellm_gateway import start_litellm

                stack._add(start_litellm(stack.url, read_timeout, api_key))
            elif proxy != "none":
                # Here, not at the top: the real proxies are built on this module's ChildService.
                from loadtests.services.real_proxies import start_real_proxy, timeout_notes

                stack.notes += timeout_notes(proxy, read_timeout)
                stack._add(start_real_proxy(proxy, stack.url, read_timeout))
        except BaseException:
            stack.stop()
            raise
        return stack

    def _add(self, service: Service) -> None:
        self.services.append(service)
        self.url = service.url

    def stop(self) -> None:
        """Stop everything, the front (proxy) first."""
        while self.services:
            self.services.pop().stop()

    @property
    def server_url(self) -> str | None:
        """The URL of the server the stack started (never a proxy's); None when it started none."""
        return next((service.url for service in self.services if service.name in SERVER_NAMES), None)

    def describe(self) -> list[str]:
        return [f"{service.name}: {service.url} (pid {service.pid})" for service in self.services] + self.notes
