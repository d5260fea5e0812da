"""The system under test as child processes: the bundled server (or real vLLM) and the proxy in front.

Each service runs in its own process (their asyncio loops must not share a process with
Locust's gevent monkey-patching), listens on a free 127.0.0.1 port, and is stopped by its own
process id: SIGTERM, then SIGKILL after a grace period. Readiness is a ready line on stdout for
our own services and an accepted TCP connection for the real proxies (nginx, HAProxy, Caddy,
Apache, Squid), never a sleep. Invariant: a service
that ``start()`` returned is accepting connections; after ``stop()`` its process has exited,
been reaped, and its files are gone.

Nothing outlives the process that started it, even one killed by SIGKILL: every service's stdin
is a pipe whose write end only this process holds, and the kernel closes it when this process
dies. Our services see EOF and stop themselves; a real proxy, which cannot watch a pipe, runs under a
watchdog that does it for it (``loadtests.services.parent_watch``); the pipe and the bundled server's
refusal line are spoken as ``sse_soak_lifeline`` states them. The bundled server's API key
travels in its environment (``VLLM_API_KEY``), never on its command line, where ``ps`` would show it.

The proxy is a kind of ``loadtests.services.proxies`` (the registry ``--proxy`` names): the stack
only asks its kind for the notes on its read timeout and to start it. ``ChildService`` lives in
``loadtests.services.child`` and is re-exported here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from loadtests.errors import InvalidValue
from loadtests.services import proxies
from loadtests.services.child import ChildService
from loadtests.services.proxies.base import Front
from loadtests.services.real_vllm import DEFAULT_RELEASE, VllmProfile

__all__ = [
    "API_KEY_ENV",
    "SERVER_NAMES",
    "ChildService",
    "Service",
    "Stack",
    "TargetServerProcess",
    "split_api_key",
]

API_KEY_ENV = "VLLM_API_KEY"  # vLLM's name; the bundled server reads it too


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


class Service(Protocol):
    """A started part of the stack: its name, the URL it serves, its process id; ``stop()`` ends it;
    ``exited()`` says how it ended by itself (``exited with 1``, ``was killed by SIGKILL``), None while
    it runs."""

    name: str
    url: str

    @property
    def pid(self) -> int: ...

    def exited(self) -> str | None: ...

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
        vllm_release: str = DEFAULT_RELEASE,
    ) -> Stack:
        kinds = proxies.names()
        if proxy not in kinds:
            raise InvalidValue(f"proxy must be one of {', '.join(kinds)}, got {proxy!r}")
        kind = proxies.kind(proxy)
        stack = cls(url=host or "")
        try:
            if host is None and server == "vllm":
                profile = VllmProfile.of(server_args)
                vllm = profile.server(vllm_release)
                stack.notes += [*profile.describe(), *vllm.notes()]
                stack._add(vllm.start())
            elif host is None:
                stack._add(TargetServerProcess.start(server_args))
            # where the server listens: loopback, or its --server-bind address (the embedded proxy's too)
            listen_host = urlsplit(stack.url).hostname if host is None else None
            stack.notes += kind.timeout_notes(read_timeout)
            front = kind.start(Front(stack.url, read_timeout, api_key, listen_host or "127.0.0.1"))
            if front is not None:
                stack._add(front)
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

    def ended(self) -> str | None:
        """The first of its services that no longer runs, as a line says it (``target server (pid
        1234) was killed by SIGKILL``); None while every one runs. Cheap (a non-blocking wait per
        service): the run asks every half second (``loadtests.run.stack_watch``)."""
        for service in self.services:
            how = service.exited()
            if how is not None:
                return f"{service.name} (pid {service.pid}) {how}"
        return None

    @property
    def server_url(self) -> str | None:
        """The URL of the server the stack started (never a proxy's); None when it started none."""
        return next((service.url for service in self.services if service.name in SERVER_NAMES), None)

    def describe(self) -> list[str]:
        return [f"{service.name}: {service.url} (pid {service.pid})" for service in self.services] + self.notes
