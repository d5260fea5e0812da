"""A scenario's hooks into one Locust run: options, the bundled server, the report and the verdict.

A locustfile declares ``Scenario(...)`` and calls ``install()``; from then on Locust's own events
drive it. ``--help`` lists our options beside Locust's. Without ``--host``, the master (or the
single process) starts the bundled target server with the scenario's profile on a free loopback
port, prints its URL, and stops it by pid at the end. At ``quitting``, the process that holds
all results writes the run directory, prints each gate's line and ``report: <path>``, and sets a
non-zero exit code when a gate failed (never zero: Locust's own failures keep their exit code).

``locust -f scenarios/x.py --help`` cannot list our options: Locust 2.x prints its help before it
loads the locustfile (locust issue #2917). ``python scenarios/x.py --help`` goes through Locust's
parser after the scenario is loaded, so it lists Locust's options and ours.
"""

from __future__ import annotations

import atexit
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from locust import FastHttpUser, events
from locust.runners import WorkerRunner

from loadtests import gates as gates_module
from loadtests.gates import Gate
from loadtests.report import new_run_dir, write_run
from loadtests.run_state import DEFAULT_CLIENT_IDLE_TIMEOUT, run_state
from loadtests.stack import ServerStartError, TargetServerProcess


@dataclass
class Scenario:
    """What one locustfile runs: the bundled server's profile and the gates of its verdict."""

    name: str
    server_args: Sequence[str] = ()
    gates: Sequence[Gate] = ()
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
    _server: TargetServerProcess | None = field(default=None, init=False, repr=False)
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
        group.add_argument("--server-args", default="",
                           help="extra options for the bundled target server, e.g. --server-args='--failure-"
                                "injection-rate 5' (ignored with --host; the scenario's profile is: "
                                f"{shlex.join(self.server_args) or 'defaults'})")  # fmt: skip

    def _on_init(self, environment: Any, **_: Any) -> None:
        options = environment.parsed_options
        state = run_state(environment)
        state.model_option = options.model
        state.api_key = options.api_key
        state.client_idle_timeout = options.client_idle_timeout
        for user_class in environment.user_classes:
            if issubclass(user_class, FastHttpUser):
                user_class.network_timeout = options.client_idle_timeout
        if isinstance(environment.runner, WorkerRunner):
            state.worker = f"worker-{environment.runner.worker_index}"
            return
        if not environment.host:
            self._start_bundled_server(environment, shlex.split(options.server_args))

    def _start_bundled_server(self, environment: Any, extra: list[str]) -> None:
        args = [*self.server_args, *extra]
        try:
            self._server = TargetServerProcess.start(args)
        except ServerStartError as exc:
            sys.exit(f"sse-soak: the bundled target server did not start: {exc}")
        environment.host = self._server.url
        atexit.register(self._stop_server)  # run_single_user never fires quitting
        print(f"target server: {self._server.url} (bundled, pid {self._server.pid}: {shlex.join(args)})", flush=True)

    def _on_quitting(self, environment: Any, **_: Any) -> None:
        if isinstance(environment.runner, WorkerRunner):
            return
        try:
            if environment.runner is not None and environment.runner.state not in ("stopped", "ready"):
                environment.runner.stop()  # e.g. Ctrl-C: end the streams so their rows are recorded
            self._write_report(environment)
        finally:
            self._stop_server()

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _write_report(self, environment: Any) -> None:
        state = run_state(environment)
        requests = state.recorder.requests_table()
        results = gates_module.evaluate(requests, self.gates)
        directory = new_run_dir(environment.parsed_options.report_dir, self.name)
        summary = write_run(directory, self.name, requests, state.recorder.frames_table(), results)
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in summary["outcomes"].items() if n)
        print(f"requests: {summary['requests']} ({outcomes or 'none'})")
        for result in results:
            print(result.line())
        print(f"verdict: {'PASS' if summary['passed'] else 'FAIL'}")
        print(f"report: {directory}", flush=True)
        if not summary["passed"]:
            environment.process_exit_code = 1
