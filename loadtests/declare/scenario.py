"""A scenario: what one locustfile runs, declared as a frozen value that reads like a test plan.

``Scenario(name, server_args, gates, ...)`` states the bundled server's profile, the proxy in front of
it and the gates of the verdict. Declaring one does nothing else: no Locust import, no registration.
The run controller (``loadtests.run.controller``) finds the one a locustfile declares the way Locust
finds its users, among the names the locustfile's module defines, and runs it. Everything here is a
pure function of the declaration and the run's options: ``settings`` (what the gates may read),
``gate_list`` (the gates the run is judged by, with the run's figures filled in) and ``check``
(the gates' queries against the request table's columns).
"""

from __future__ import annotations

import dataclasses
import itertools
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtests.base.ports import LOOPBACK
from loadtests.base.safe_text import plain_name, redacted_url
from loadtests.declare.options import DEFAULT_CLIENT_IDLE_TIMEOUT, DEFAULT_STREAM_DEADLINE_S, keep_alive_interval
from loadtests.errors import UsageError
from loadtests.judge.gates import BUNDLED, GIVEN, REAL_VLLM, UNKNOWN, Gate, HarnessKeptUp, KeepAliveCovered, run_point
from loadtests.services import proxies
from loadtests.services.real_vllm import VllmProfile
from loadtests.services.stack import split_api_key

__all__ = ["REDACTED", "GateList", "RunSettings", "Scenario"]

REDACTED = "<redacted>"


def _check_server_bind(bind: str, host: str | None, proxy: str) -> None:
    """``--server-bind`` away from loopback binds the server the run starts, bundled or real vLLM (and
    the embedded proxy): a usage error with anything else that would leave it meaningless or
    unreachable."""
    if host is not None:
        raise UsageError(f"--server-bind {bind} binds the server the run starts; with --host it starts none")
    reachable = [kind.name for kind in proxies.kinds() if not kind.loopback_only]
    if proxy not in reachable:
        raise UsageError(
            f"--server-bind {bind}: --proxy {proxy} listens on loopback only, out of the workers' reach: "
            f"give --proxy {' or '.join(reachable)}"
        )


@dataclass(frozen=True)
class RunSettings:
    """The settings a run's gates may depend on, resolved from the command line."""

    proxy: str
    proxy_read_timeout: float
    keep_alive_interval: float | None
    """The keep-alive interval in force: the bundled server's last ``--sse-keep-alive-interval``
    (``--keep-alive-interval``, else the scenario's, comes last); with ``--host``, the
    ``--keep-alive-interval`` given, never a default; None when unknown."""
    server_args: tuple[str, ...]
    """The arguments of the server the run starts: the bundled server's own, or (``--server vllm``)
    the profile real vLLM runs as ``VllmProfile`` translates it; empty with ``--host``."""
    host: str | None
    open_loop: dict[str, Any] | None = None
    """``--rate``'s schedule (``rate``, ``arrival``, ``seed``, ``max_in_flight``); None in a closed loop."""
    keep_alive_interval_source: str = BUNDLED
    """Where ``keep_alive_interval`` comes from: ``bundled server``, ``real vLLM`` (``--server
    vllm``: the profile's, in whole seconds), ``given`` (``--host`` with ``--keep-alive-interval``)
    or ``unknown`` (then the judgement infers it: ``loadtests.run.judging``)."""
    server: str = "bundled"
    """The server the run starts when no host is given: ``bundled`` or ``vllm`` (real vLLM, running
    the profile as ``loadtests.services.real_vllm.VllmProfile`` translates it)."""
    ca_cert: str | None = None
    """``--ca-cert``: a CA file every client trusted besides the system's (``loadtests.client.tls``)."""
    insecure: bool = False
    """``--insecure``: no TLS certificate was verified."""

    @property
    def starts_server(self) -> str | None:
        """``bundled`` or ``vllm`` when the run starts its server; None when it targets ``--host``."""
        return None if self.host is not None else self.server

    @property
    def profile_in_force(self) -> bool:
        """The scenario's whole profile (slow prefill, token pace, faults) runs: the bundled server."""
        return self.starts_server == "bundled"

    def as_dict(self) -> dict[str, Any]:
        """The settings as recorded in summary.json and shown in report.html: the host's password and
        query values redacted (``redacted_url``), and ``server_args`` those of the server the run
        started (``recorded_server_args``)."""
        host = None if self.host is None else redacted_url(self.host)
        return {**dataclasses.asdict(self), "server_args": self.recorded_server_args(), "host": host}

    def recorded_server_args(self) -> list[str] | None:
        """Only what the server the run started ran with, never another's: the bundled server's
        arguments (a key redacted); real vLLM's ``vllm serve`` options (``VllmServer.arguments``,
        not the bundled profile's); None with ``--host``, as the run started no server."""
        if self.starts_server is None:
            return None
        if self.starts_server == "vllm":
            return VllmProfile.of(self.server_args).server().arguments()
        args, key = split_api_key(self.server_args)
        return [*args, "--api-key", REDACTED] if key else args


def _last_keep_alive_interval(server_args: Sequence[str]) -> float:
    """What ``--sse-keep-alive-interval`` the server will run with: the last one given, else 0 (off);
    0 also for any value not in (0, inf), which the server reads as off."""
    given = [value for flag, value in itertools.pairwise(server_args) if flag == "--sse-keep-alive-interval"]
    try:
        return keep_alive_interval(float(given[-1])) if given else 0.0
    except ValueError:
        return 0.0  # the server will refuse the value itself, with its own message


GateList = Sequence[Gate] | Callable[[RunSettings], Sequence[Gate]]


@dataclass(frozen=True)
class Scenario:
    """What one locustfile runs: the stack's profile and the gates of its verdict.

    ``keep_alive_interval``, when set, is the bundled server's ``--sse-keep-alive-interval`` unless
    ``--keep-alive-interval`` says otherwise; it is never assumed of a server given by ``--host``.
    ``server_args`` may be one string, split as a shell would (as ``--server-args``). A gate that
    depends on the run's settings reads them itself (``NoProxyTimeouts()``); ``gates`` may also be a
    function of the ``RunSettings``. The defaults of ``client_idle_timeout``, ``stream_deadline``,
    ``proxy`` and ``proxy_read_timeout`` are the options' own.
    """

    name: str
    server_args: str | Sequence[str] = ()
    gates: GateList = ()
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
    stream_deadline: float = DEFAULT_STREAM_DEADLINE_S
    proxy: str = "none"
    proxy_read_timeout: float = 60.0
    keep_alive_interval: float | None = None
    point: Sequence[str] | None = None
    """The names of the gates that are the scenario's point: a run where one of them could not be
    judged (no qualifying rows) is INCONCLUSIVE, not a PASS. Default: every gate it declares (or,
    declaring none, ``requests_completed``)."""
    profile: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """``server_args`` as a tuple of arguments."""

    def __post_init__(self) -> None:
        try:  # the name names the run directory: never a path out of --report-dir
            plain_name(self.name, "Scenario name")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        args = shlex.split(self.server_args) if isinstance(self.server_args, str) else tuple(self.server_args)
        object.__setattr__(self, "profile", tuple(args))

    def check(self, settings: RunSettings | None = None) -> None:
        """Raise ``UsageError`` (one line naming the scenario and the gate) when a gate's queries are
        not ones the request table can answer; a function's gates are checked once ``settings`` are known."""
        if settings is not None:
            gates: Sequence[Gate] = self.gate_list(settings)
        elif callable(self.gates):
            return
        else:
            gates = self.gates
        for gate in gates:
            try:
                gate.check()
            except ValueError as exc:
                raise UsageError(f"scenario {self.name}: {exc}") from None

    def settings(self, options: Any) -> RunSettings:
        """The run's settings from its parsed options: its stack (``_stack_settings``) and the TLS
        trust of its clients."""
        return dataclasses.replace(
            self._stack_settings(options),
            ca_cert=getattr(options, "ca_cert", None),
            insecure=bool(getattr(options, "insecure", False)),
        )

    def _stack_settings(self, options: Any) -> RunSettings:
        """The run's stack settings from its parsed options. The bundled server runs the profile, then
        ``--server-args``, then the keep-alive interval (``--keep-alive-interval``, else the
        scenario's own); its interval is the last one given. A server given by ``--host`` has the
        ``--keep-alive-interval`` given, else an unknown one, and no arguments of ours."""
        given = getattr(options, "keep_alive_interval", None)
        if given is not None:
            given = keep_alive_interval(given)
        open_loop = None
        if options.rate is not None:
            open_loop = {
                "rate": options.rate,
                "arrival": options.arrival,
                "seed": options.arrival_seed,
                "max_in_flight": options.max_in_flight,
            }
        shape = (self.proxy_of(options), options.proxy_read_timeout)
        server = getattr(options, "server", None) or "bundled"
        bind = getattr(options, "server_bind", None) or LOOPBACK
        if bind != LOOPBACK:
            _check_server_bind(bind, options.host, shape[0])
        if options.host is not None:
            if server != "bundled":
                raise UsageError(
                    f"--server {server} starts a server and --host targets one already running: give one of them"
                )
            source = UNKNOWN if given is None else GIVEN
            return RunSettings(*shape, given, (), options.host, open_loop, source)
        server_args = [*self.profile, *shlex.split(options.server_args)]
        if bind != LOOPBACK:
            server_args += ["--host", bind]
        interval = given if given is not None else self.keep_alive_interval
        if interval is not None:
            server_args += ["--sse-keep-alive-interval", repr(keep_alive_interval(interval))]
        if server == "vllm":
            whole = float(VllmProfile.of(server_args).keep_alive_interval)
            return RunSettings(*shape, whole, tuple(server_args), None, open_loop, REAL_VLLM, server)
        interval = _last_keep_alive_interval(server_args)
        return RunSettings(*shape, interval, tuple(server_args), None, open_loop, BUNDLED)

    def proxy_of(self, options: Any) -> str:
        """The proxy the run starts: ``--proxy`` when given; else the scenario's own in front of the
        bundled server, and none in front of ``--host`` (a server given may have a proxy of its own in
        front of it, which one of ours would stand before, unasked)."""
        given = getattr(options, "proxy", None)
        if given is not None:
            return str(given)
        return "none" if options.host is not None else self.proxy

    def form_values(self, options: Any) -> dict[str, Any]:
        """The values the web UI's form shows for options left empty on the command line: the ones
        this scenario runs, each such that a test started with it unchanged runs the same stack.
        The proxy is ``proxy_of`` (``none`` in front of ``--host``); the keep-alive interval is the
        scenario's own in front of the bundled server, and none otherwise (it is never assumed of
        ``--host``, and one the server arguments set is theirs to say)."""
        values: dict[str, Any] = {"proxy": self.proxy_of(options)}
        bundled = options.host is None and (getattr(options, "server", None) or "bundled") == "bundled"
        if bundled and self.keep_alive_interval is not None:
            values["keep_alive_interval"] = self.keep_alive_interval
        return values

    def proxy_notice(self, options: Any) -> str | None:
        """The line a ``--host`` run prints when it leaves the scenario's own proxy out; None otherwise."""
        if options.host is None or getattr(options, "proxy", None) is not None or self.proxy == "none":
            return None
        return (
            f"sse-soak: --host given: the scenario's own proxy ({self.proxy}) is not started in front of it; "
            f"the gates judge a proxy read timeout of {options.proxy_read_timeout:g} s (--proxy-read-timeout: your "
            f"proxy's); pass --proxy {self.proxy} to put ours in front of the host"
        )

    def point_of(self, settings: RunSettings) -> list[str]:
        """The names of the gates that are this run's point, by ``loadtests.judge.gates.run_point``:
        ``point``, or every declared gate; ``requests_completed`` always."""
        declared = self.gates(settings) if callable(self.gates) else self.gates
        return run_point(self.point, [gate.name for gate in declared])

    def gate_list(self, settings: RunSettings, harness_lag_limit_ms: float = 0.0) -> list[Gate]:
        """The scenario's gates with the run's settings filled in (so each is stored with concrete
        figures), then ``keepalive_covered`` when the run knows the server's keep-alive interval (one
        it does not know is inferred when the run is judged), then ``harness_kept_up`` with its limit
        (none when the limit is 0)."""
        declared = self.gates(settings) if callable(self.gates) else self.gates
        gates: list[Gate] = [gate.for_run(settings) for gate in declared]
        if settings.keep_alive_interval:
            gates.append(KeepAliveCovered(settings.keep_alive_interval, proxy=settings.proxy))
        if harness_lag_limit_ms > 0:
            gates.append(HarnessKeptUp(harness_lag_limit_ms))
        return gates
