"""A scenario's hooks into one Locust run: options, the stack under test, the report, the verdict.

A locustfile declares ``Scenario(...)`` and calls ``install()``; from then on Locust's own events
drive it. Without ``--host``, the master (or the single process) starts the bundled target server
with the scenario's profile on a free loopback port; with ``--proxy embedded|nginx`` a proxy
with ``--proxy-read-timeout`` goes in front of it (or of ``--host``). It prints what it started
and stops it all by pid at the end. At ``quitting``, the process that holds all results writes
the run directory, prints each gate's line and ``report: <path>``, and sets a non-zero exit code
when a gate failed (never zero: Locust's own failures keep their exit code).

``locust -f scenarios/x.py --help`` cannot list our options: Locust 2.x prints its help before it
loads the locustfile (locust issue #2917). ``python scenarios/x.py --help`` goes through Locust's
parser after the scenario is loaded, so it lists Locust's options and ours.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from locust import FastHttpUser, events
from locust.runners import MasterRunner, WorkerRunner

from loadtests.collect import Collector
from loadtests.gates import Gate, GateResult
from loadtests.report import judge_run, new_run_dir
from loadtests.run_state import DEFAULT_CLIENT_IDLE_TIMEOUT, run_state
from loadtests.run_writer import RunWriter
from loadtests.stack import PROXY_KINDS, ServerStartError, Stack


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

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "server_args": list(self.server_args)}


def _last_keep_alive_interval(server_args: Sequence[str]) -> float:
    """What ``--sse-keep-alive-interval`` the server will run with: the last one given, else 0 (off)."""
    given = [value for flag, value in itertools.pairwise(server_args) if flag == "--sse-keep-alive-interval"]
    try:
        return float(given[-1]) if given else 0.0
    except ValueError:
        return 0.0  # the server will refuse the value itself, with its own message


GateList = Sequence[Gate] | Callable[[RunSettings], Sequence[Gate]]


@dataclass
class Scenario:
    """What one locustfile runs: the stack's profile and the gates of its verdict.

    ``keep_alive_interval``, when set, becomes the option ``--keep-alive-interval`` and the bundled
    server's ``--sse-keep-alive-interval``; ``gates`` may be a function of the ``RunSettings``.
    """

    name: str
    server_args: Sequence[str] = ()
    gates: GateList = ()
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
    proxy: str = "none"
    proxy_read_timeout: float = 60.0
    keep_alive_interval: float | None = None
    _stack: Stack | None = field(default=None, init=False, repr=False)
    _settings: RunSettings | None = field(default=None, init=False, repr=False)
    _writer: RunWriter | None = field(default=None, init=False, repr=False)
    _collector: Collector | None = field(default=None, init=False, repr=False)
    _installed: bool = field(default=False, init=False, repr=False)

    def install(self) -> Scenario:
        """Register this scenario's listeners on Locust's events (once)."""
        if not self._installed:
            events.init_command_line_parser.add_listener(self._add_options)
            events.init.add_listener(self._on_init)
            events.quitting.add_listener(self._on_quitting)
            self._installed = True
        return self

    def _add_options(self, parser: Any) -> None:
        # Loopback unless told otherwise: Locust's master and web UI bind every interface by default.
        parser.set_defaults(master_bind_host="127.0.0.1", web_host="127.0.0.1")
        group = parser.add_argument_group("sse-soak", f"Options of the sse-soak scenario '{self.name}'.")
        group.add_argument(
            "--report-dir",
            default="reports",
            help="directory under which the run writes <scenario>-<UTC time>/ (default: reports)",
        )
        group.add_argument(
            "--model", default=None, help="model to request (default: the first one the server lists in /v1/models)"
        )
        group.add_argument(
            "--api-key", default=None, env_var="SSE_SOAK_API_KEY", help="bearer token sent to the target server"
        )
        group.add_argument(
            "--client-idle-timeout",
            type=float,
            default=self.client_idle_timeout,
            help="seconds of silence after which the client gives up on a stream; keep it above "
            f"any proxy read timeout (default: {self.client_idle_timeout:g})",
        )
        group.add_argument(
            "--server-args",
            default="",
            help="extra options for the bundled target server, e.g. --server-args='--failure-"
            "injection-rate 5' (ignored with --host; the scenario's profile is: "
            f"{shlex.join(self.server_args) or 'defaults'})",
        )
        group.add_argument(
            "--proxy",
            choices=PROXY_KINDS,
            default=self.proxy,
            help="reverse proxy in front of the server: none, embedded (asyncio, nginx's "
            f"read-timeout semantics) or nginx (started by the run) (default: {self.proxy})",
        )
        group.add_argument("--proxy-read-timeout", type=float, default=self.proxy_read_timeout,
                           help="the proxy's read timeout in seconds, as nginx's proxy_read_timeout "
                                f"(default: {self.proxy_read_timeout:g})")  # fmt: skip
        group.add_argument(
            "--frame-sample-rate",
            type=float,
            default=1.0,
            help="share of ok streams whose frame records are kept (0-1); request rows and the "
            "frames of every other outcome are always kept (default: 1)",
        )
        group.add_argument("--flush-interval", type=float, default=2.0,
                           help="seconds between writes of recorded rows to the run directory (and between "
                                "worker -> master batches) (default: 2)")  # fmt: skip
        if self.keep_alive_interval is not None:
            group.add_argument("--keep-alive-interval", type=float, default=self.keep_alive_interval,
                               help="the bundled server's --sse-keep-alive-interval in seconds; 0 turns keep-alive "
                                    f"off (the negative control) (default: {self.keep_alive_interval:g})")  # fmt: skip

    def settings(self, options: Any) -> RunSettings:
        interval = getattr(options, "keep_alive_interval", None)
        server_args = [*self.server_args, *shlex.split(options.server_args)]
        if interval is not None:
            server_args += ["--sse-keep-alive-interval", repr(interval)]
        if options.host is None:  # the bundled server runs these arguments: its interval is the last one
            interval = _last_keep_alive_interval(server_args)
        return RunSettings(options.proxy, options.proxy_read_timeout, interval, tuple(server_args), options.host)

    def gate_list(self, settings: RunSettings) -> Sequence[Gate]:
        return self.gates(settings) if callable(self.gates) else self.gates

    def _on_init(self, environment: Any, **_: Any) -> None:
        options = environment.parsed_options
        if not 0 <= options.frame_sample_rate <= 1 or options.flush_interval <= 0:
            sys.exit("sse-soak: --frame-sample-rate must be in 0..1 and --flush-interval above 0")
        state = run_state(environment)
        state.model_option = options.model
        state.api_key = options.api_key
        state.client_idle_timeout = options.client_idle_timeout
        state.frame_sample_rate = options.frame_sample_rate
        state.runner = environment.runner
        for user_class in environment.user_classes:
            if issubclass(user_class, FastHttpUser):
                user_class.network_timeout = options.client_idle_timeout
        if not isinstance(environment.runner, WorkerRunner):
            self._settings = self.settings(options)
            self._start_stack(environment, self._settings)
        if environment.runner is None:
            return  # run_single_user (debugging): Locust prints each request; no run directory
        if not isinstance(environment.runner, WorkerRunner):
            self._writer = RunWriter(new_run_dir(options.report_dir, self.name))
            print(f"run directory: {self._writer.directory}", flush=True)
        self._collector = Collector(environment, self._writer, options.flush_interval)
        self._collector.start()

    def _start_stack(self, environment: Any, settings: RunSettings) -> None:
        if settings.host is not None and settings.proxy == "none":
            return  # the server is given and nothing stands in front of it
        try:
            self._stack = Stack.start(settings.host, settings.server_args, settings.proxy, settings.proxy_read_timeout)
        except (ServerStartError, ValueError) as exc:
            sys.exit(f"sse-soak: the stack did not start: {exc}")
        atexit.register(self._stop_stack)  # run_single_user never fires quitting
        environment.host = self._stack.url
        for line in self._stack.describe():
            print(line, flush=True)

    def _stop_stack(self) -> None:
        if self._stack is not None:
            self._stack.stop()
            self._stack = None

    def _on_quitting(self, environment: Any, **_: Any) -> None:
        if isinstance(environment.runner, WorkerRunner):
            return
        try:
            if environment.runner is not None and environment.runner.state not in ("stopped", "ready"):
                environment.runner.stop()  # e.g. Ctrl-C: end the streams so their rows are recorded
            if self._collector is not None:
                self._collector.stop()
                if not isinstance(environment.runner, MasterRunner):
                    self._collector.write_local()
            self._write_report(environment)
        finally:
            self._stop_stack()

    def _write_report(self, environment: Any) -> None:
        if self._writer is None:
            return
        settings = self._settings or self.settings(environment.parsed_options)
        directory = self._writer.directory
        summary = judge_run(directory, self.name, self._writer.requests_table(), self.gate_list(settings),
                            settings.as_dict(), environment.parsed_options.frame_sample_rate)  # fmt: skip
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in summary["outcomes"].items() if n)
        print(f"requests: {summary['requests']} ({outcomes or 'none'})")
        causes = summary["causes"]
        print(f"causes: {causes['proxy_timeouts_before_headers']} proxy 504s before headers, "
              f"{causes['cut_after_headers']} streams cut after headers, "
              f"statuses {causes['status'] or '{}'}")  # fmt: skip
        for gate in summary["gates"]:
            print(GateResult(**gate).line())
        print(f"verdict: {'PASS' if summary['passed'] else 'FAIL'}")
        print(f"report: {directory}", flush=True)
        if not summary["passed"]:
            environment.process_exit_code = 1
