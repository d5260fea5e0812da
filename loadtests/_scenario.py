"""A scenario: what one locustfile runs, declared as a frozen value that reads like a test plan.

``Scenario(name, server_args, gates, ...)`` states the bundled server's profile, the proxy in front of
it and the gates of the verdict. Declaring one does nothing else: no Locust import, no registration.
The run controller (``loadtests._run_controller``) finds the one a locustfile declares the way Locust
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

from loadtests._gates import Gate, HarnessKeptUp, KeepAliveCovered
from loadtests._options import DEFAULT_CLIENT_IDLE_TIMEOUT, keep_alive_interval
from loadtests._stack import split_api_key
from loadtests.errors import UsageError

__all__ = ["REDACTED", "GateList", "RunSettings", "Scenario"]

REDACTED = "<redacted>"


@dataclass(frozen=True)
class RunSettings:
    """The settings a run's gates may depend on, resolved from the command line."""

    proxy: str
    proxy_read_timeout: float
    keep_alive_interval: float | None
    """The keep-alive interval in force: the bundled server's last ``--sse-keep-alive-interval``
    (the option, when the scenario declares one, comes last); None when unknown."""
    server_args: tuple[str, ...]
    host: str | None
    open_loop: dict[str, Any] | None = None
    """``--rate``'s schedule (``rate``, ``arrival``, ``seed``, ``max_in_flight``); None in a closed loop."""

    def as_dict(self) -> dict[str, Any]:
        """The settings as recorded in summary.json and shown in report.html: a key in the server
        arguments is redacted."""
        args, key = split_api_key(self.server_args)
        return {**dataclasses.asdict(self), "server_args": [*args, "--api-key", REDACTED] if key else args}


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

    ``keep_alive_interval``, when set, becomes the option ``--keep-alive-interval`` and the bundled
    server's ``--sse-keep-alive-interval``. ``server_args`` may be one string, split as a shell
    would (as ``--server-args``). A gate that depends on the run's settings reads them itself
    (``NoProxyTimeouts()``); ``gates`` may also be a function of the ``RunSettings``. The defaults of
    ``client_idle_timeout``, ``proxy`` and ``proxy_read_timeout`` are the options' own.
    """

    name: str
    server_args: str | Sequence[str] = ()
    gates: GateList = ()
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
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
        """The run's settings from its parsed options."""
        interval = getattr(options, "keep_alive_interval", None)
        server_args = [*self.profile, *shlex.split(options.server_args)]
        if interval is not None:
            interval = keep_alive_interval(interval)
            server_args += ["--sse-keep-alive-interval", repr(interval)]
        if options.host is None:  # the bundled server runs these arguments: its interval is the last one
            interval = _last_keep_alive_interval(server_args)
        open_loop = None
        if options.rate is not None:
            open_loop = {
                "rate": options.rate,
                "arrival": options.arrival,
                "seed": options.arrival_seed,
                "max_in_flight": options.max_in_flight,
            }
        return RunSettings(
            options.proxy, options.proxy_read_timeout, interval, tuple(server_args), options.host, open_loop
        )

    def point_of(self, settings: RunSettings) -> list[str]:
        """The names of the gates that are this run's point (``point``, or every declared gate)."""
        if self.point is not None:
            return list(self.point)
        declared = self.gates(settings) if callable(self.gates) else self.gates
        return [gate.name for gate in declared] or ["requests_completed"]

    def gate_list(self, settings: RunSettings, harness_lag_limit_ms: float = 0.0) -> list[Gate]:
        """The scenario's gates with the run's settings filled in (so each is stored with concrete
        figures), then ``keepalive_covered`` when the run knows the server's keep-alive interval, then
        ``harness_kept_up`` with its limit (none when the limit is 0)."""
        declared = self.gates(settings) if callable(self.gates) else self.gates
        gates: list[Gate] = [gate.for_run(settings) for gate in declared]
        if settings.keep_alive_interval:
            gates.append(KeepAliveCovered(settings.keep_alive_interval))
        if harness_lag_limit_ms > 0:
            gates.append(HarnessKeptUp(harness_lag_limit_ms))
        return gates
