"""A scenario's hooks into one Locust run: options, the stack under test, the report, the verdict.

A locustfile declares ``Scenario(...)``; declaring it installs it: from then on Locust's own
events drive it. Its ``Expect`` queries are checked against the request table's columns when it is
declared (a misspelt column ends the run there, in one line). A locustfile may import another
scenario's module to reuse its mixes and gates (``scenarios/soak.py`` does), which declares that
scenario too: the run's scenario is then the one declared in the file Locust loaded (``-f``) or
ran (``python scenarios/x.py``); any other ambiguity, and a locustfile whose ``SSEUser`` or
``OpenAISDKUser`` run with no scenario declared, is refused in one line at start.

Without ``--host``, the master (or the single process) starts the bundled target server with the
scenario's profile on a free loopback port; with ``--proxy embedded|nginx`` a proxy with
``--proxy-read-timeout`` goes in front of it (or of ``--host``). It prints what it started and
stops it all by pid at the end.

Each Locust test (headless: the whole run; web UI: each Start..Stop) is one run directory: made
and printed (``run directory: <path>``) at ``test_start``, judged at ``test_stop`` by the process
that holds all results: its last rows collected, ``summary.json`` written, each gate's line and
the verdict printed, then ``report.html`` and ``report: <path>``; a failed or interrupted test
sets a non-zero exit code (never zero: Locust's own failures keep theirs). Quitting while a test
runs stops and judges it; the judging runs once per test whoever asks (Locust's SIGTERM handler
and its main greenlet can both enter ``shutdown()``). Ctrl-C and SIGTERM go through a
``SignalGuard``: they end the run the way Ctrl-C does, wait while the summary is written, and
may only cut report.html.

``locust -f scenarios/x.py --help`` cannot list our options: Locust 2.x prints its help before it
loads the locustfile (locust issue #2917). ``python scenarios/x.py --help`` goes through Locust's
parser after the scenario is loaded, so it lists Locust's options and ours.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import gevent
from gevent.event import Event
from locust import FastHttpUser, events
from locust.argument_parser import parse_locustfile_option
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from loadtests import arrival_clock
from loadtests._parent_watch import end_with_launcher
from loadtests._signals import SignalGuard
from loadtests.arrivals import ARRIVAL_KINDS, START_DELAY_S, ArrivalPlan, ArrivalSchedule, not_sent_row
from loadtests.collect import Collector
from loadtests.gates import Gate, HarnessKeptUp, KeepAliveCovered
from loadtests.judge import judge, write_html_files
from loadtests.lag import DEFAULT_LAG_LIMIT_MS
from loadtests.loop_hygiene import quiet_per_request_logging, settle_after_setup
from loadtests.preflight import DEFAULT_PREFLIGHT_TIMEOUT, PreflightError, base_url, preflight
from loadtests.run_dir import PLAN_ONLY_ENV, RUN_DIR_ENV, Manifest, RunDir, RunDirError, Service, versions
from loadtests.run_options import UsageError, check_options, keep_alive_interval
from loadtests.run_state import DEFAULT_CLIENT_IDLE_TIMEOUT, run_state
from loadtests.run_writer import UNWRITABLE_ROWS, RunWriter
from loadtests.server_metrics import DEFAULT_SCRAPE_INTERVAL_S, OFF, ServerMetricsScraper
from loadtests.sse import DEFAULT_MAX_LINE_BYTES
from loadtests.stack import PROXY_KINDS, ServerStartError, Stack, split_api_key
from loadtests.summary import arrival_line
from loadtests.workload import PROBE_TIMEOUT, probe_prompt_sizing

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


def _refuse(message: str) -> NoReturn:
    """A usage error: one line on stderr, exit 2 (1 is a failed verdict)."""
    print(f"sse-soak: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


GateList = Sequence[Gate] | Callable[[RunSettings], Sequence[Gate]]

_declared: list[Scenario] = []
"""Every scenario declared in this process, in order of declaration."""
_run: Scenario | None = None
"""The run's scenario, once Locust's command line asked for it."""


def _declaring_file() -> str | None:
    """The resolved file of the code that declared a scenario: the first frame outside this module."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # this module's frames, and the dataclass's generated __init__
    file = frame.f_globals.get("__file__")
    return str(Path(file).resolve()) if file else None


def _loaded_locustfiles() -> set[str]:
    """The files this process runs as locustfiles: ``-f``'s (as Locust reads it: argument,
    environment, config file) and the script run as ``__main__``, resolved."""
    args = [arg for arg in sys.argv[1:] if arg not in ("-h", "--help", "-V", "--version")]  # those would print
    given = [path.strip() for path in str(parse_locustfile_option(args).locustfile).split(",")]
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return {str(Path(path).resolve()) for path in [*given, *([main] if main else [])]}


def run_scenario() -> Scenario:
    """The scenario of this run: the only one declared, else the one declared in a file this
    process runs as its locustfile. Refused in one line when there is no such single one."""
    global _run
    if _run is None:
        if len(_declared) == 1:
            _run = _declared[0]
        else:
            loaded = _loaded_locustfiles()
            chosen = [scenario for scenario in _declared if scenario._declared_in in loaded]
            if len(chosen) != 1:
                declared = ", ".join(f"{scenario.name} ({scenario._declared_in})" for scenario in _declared)
                _refuse(
                    f"{len(chosen) or 'none'} of the scenarios declared in this process ({declared}) are "
                    "declared in the locustfile: a locustfile declares exactly one Scenario"
                )
            _run = chosen[0]
    return _run


def _add_run_options(parser: Any) -> None:
    run_scenario()._add_options(parser)


def _init_run(environment: Any, **kwargs: Any) -> None:
    run_scenario()._on_init(environment, **kwargs)


def require_a_scenario(environment: Any, user_classes: Sequence[type]) -> None:
    """Refuse, in one line, a run whose sse-soak users run with no scenario declared."""
    if user_classes and not _declared:
        names = ", ".join(sorted(user.__name__ for user in user_classes))
        _refuse(
            f"{names} run in no scenario: declare one in the locustfile, e.g. "
            'scenario = Scenario(name="my_scenario") (declaring it installs it)'
        )


def _add_arrival_options(group: Any) -> None:
    group.add_argument(
        "--rate",
        type=float,
        default=None,
        help="open loop: requests a second, all users and processes together, started when the schedule says "
        "whatever the server does; a request that finds every sender busy starts late and says by how much "
        "(default: closed loop, each user sends its next request when its last one ends)",
    )
    group.add_argument(
        "--arrival",
        choices=ARRIVAL_KINDS,
        default="poisson",
        help="open loop: the schedule's spacing, poisson (random gaps, seeded) or constant (default: poisson)",
    )
    group.add_argument(
        "--arrival-seed", type=int, default=0, help="open loop: the seed of a poisson schedule (default: 0)"
    )
    group.add_argument(
        "--max-in-flight",
        type=int,
        default=None,
        help="open loop: requests open at once, all processes together; a scheduled request still waiting for "
        "a free one when the run ends is a not_sent row (default: as many as users, -u)",
    )


ARRIVAL_PROCESSES = "sse_soak_arrival_processes"
ARRIVAL_START = "sse_soak_arrival_start"
"""Set on the master's parsed options at test start; Locust sends them to the workers with the spawn."""


def _start_arrivals(environment: Any) -> None:
    """Open loop: this process's schedule for the test starting. The master (or the single process)
    fixes the shared start and the number of processes; each worker takes its part by its index."""
    options = environment.parsed_options
    state = run_state(environment)
    state.arrivals = None
    if options.rate is None:
        return
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        setattr(options, ARRIVAL_PROCESSES, max(1, runner.worker_count))
        setattr(options, ARRIVAL_START, time.time() + START_DELAY_S)
        return  # the master sends no request
    if isinstance(runner, WorkerRunner):
        processes, start = getattr(options, ARRIVAL_PROCESSES), getattr(options, ARRIVAL_START)
        index = runner.worker_index
    else:
        processes, start, index = 1, time.time(), 0
    plan = ArrivalPlan(options.rate, options.arrival, options.arrival_seed, options.max_in_flight, processes, index)
    state.arrivals = ArrivalSchedule(plan, start)


def _close_arrivals(environment: Any) -> None:
    """Open loop, as the test stops: the scheduled requests no user took are recorded as ``not_sent``."""
    state = run_state(environment)
    schedule = state.arrivals
    if schedule is None or schedule.closed:
        return
    for ticket in schedule.unsent():
        state.recorder.add(not_sent_row(ticket, state.worker), None)


EARLY_S = 1.0
"""A test stopped this long before its planned duration, by no signal, says so in ``ended`` (say,
every worker gone); it is no interruption: only a signal is known to be one."""
STOP_WAIT_S = 120.0
"""How long quitting waits for a stop already under way elsewhere to judge the test itself."""


@dataclass
class _Test:
    """One Locust test (headless: the run; web UI: one Start..Stop) and its run directory."""

    writer: RunWriter
    started: float
    """``time.monotonic()`` at test_start."""
    planned_s: float | None
    """The planned duration (``-t``, or the web UI's run time), if any."""
    stopping_at: float | None = None
    judging: bool = False
    judged: Event = field(default_factory=Event)
    scraper: ServerMetricsScraper | None = None
    """Scraping the server's ``/metrics`` while the test runs; None when turned off."""

    @property
    def server_metrics_unavailable(self) -> str | None:
        """Why the test has no server metrics; None when it has some."""
        return OFF if self.scraper is None else self.scraper.unavailable

    def how_it_ended(self, signals: Sequence[tuple[str, float]]) -> tuple[str, str | None]:
        """``(ended, interrupted)``: how the test ended (the first signal received while it ran, else
        the stop), and, when a signal ended a test that had a planned duration, the same words."""
        end = self.stopping_at or time.monotonic()
        of = f" of {self.planned_s:g} s" if self.planned_s else ""
        during = [(name, at) for name, at in signals if self.started <= at <= end]
        if during:
            name, at = during[0]
            ended = f"{name} at {at - self.started:.1f} s{of}"
            return ended, ended if self.planned_s else None
        elapsed = end - self.started
        if self.planned_s and elapsed >= self.planned_s - EARLY_S:
            return f"run time of {self.planned_s:g} s reached", None
        return f"stopped at {elapsed:.1f} s{of}", None  # the web UI's Stop, or every worker gone


@dataclass
class Scenario:
    """What one locustfile runs: the stack's profile and the gates of its verdict.

    ``keep_alive_interval``, when set, becomes the option ``--keep-alive-interval`` and the bundled
    server's ``--sse-keep-alive-interval``. ``server_args`` may be one string, split as a shell
    would (as ``--server-args``). A gate that depends on the run's settings reads them
    itself (``NoProxyTimeouts()``); ``gates`` may also be a function of the ``RunSettings``.
    Declaring a scenario installs it (module docstring).
    """

    name: str
    server_args: str | Sequence[str] = ()
    gates: GateList = ()
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
    proxy: str = "none"
    proxy_read_timeout: float = 60.0
    keep_alive_interval: float | None = None
    _stack: Stack | None = field(default=None, init=False, repr=False)
    _settings: RunSettings | None = field(default=None, init=False, repr=False)
    _collector: Collector | None = field(default=None, init=False, repr=False)
    _test: _Test | None = field(default=None, init=False, repr=False)
    _sizing_probe: gevent.Greenlet | None = field(default=None, init=False, repr=False)
    _target_host: str | None = field(default=None, init=False, repr=False)
    """The URL the preflight accepted; a test the web UI starts with no host targets it."""
    _guard: SignalGuard = field(default_factory=SignalGuard, init=False, repr=False)
    _quitting: bool = field(default=False, init=False, repr=False)
    _quit_done: Event = field(default_factory=Event, init=False, repr=False)
    _declared_in: str | None = field(default=None, init=False, repr=False)
    """The file that declared it, resolved; None when it has none (``python -c``)."""

    def __post_init__(self) -> None:
        """Check the gates' queries, then install: the process's first declaration registers the
        listeners that hand Locust's command line and init to the run's scenario; the lifecycle
        ones are added at init, after the runner's own, so that ours run first at quitting (Locust
        fires quitting in reverse order, and the master's listener tells the workers to quit)."""
        if isinstance(self.server_args, str):
            self.server_args = shlex.split(self.server_args)
        if not callable(self.gates):
            self._check_gates(self.gates)
        self._declared_in = _declaring_file()
        if not _declared:
            events.init_command_line_parser.add_listener(_add_run_options)
            events.init.add_listener(_init_run)
        _declared.append(self)

    def install(self) -> Scenario:
        """Nothing left to do: declaring installed it. Kept so locustfiles that call it still run."""
        return self

    def _check_gates(self, gates: Sequence[Gate]) -> None:
        """Refuse, in one line, a gate whose queries the request table cannot answer."""
        for gate in gates:
            check = getattr(gate, "check", None)
            if check is not None:
                try:
                    check()
                except ValueError as exc:
                    _refuse(f"scenario {self.name}: {exc}")

    def _add_options(self, parser: Any) -> None:
        # Loopback unless told otherwise: Locust's master and web UI bind every interface by default.
        parser.set_defaults(master_bind_host="127.0.0.1", web_host="127.0.0.1")
        group = parser.add_argument_group("sse-soak", f"Options of the sse-soak scenario '{self.name}'.")
        self._add_target_options(group)
        self._add_stream_options(group)
        self._add_recording_options(group)
        _add_arrival_options(group)

    def _add_target_options(self, group: Any) -> None:
        """What is run against: the model, its key, the bundled server, the proxy."""
        group.add_argument(
            "--model", default=None, help="model to request (default: the first one the server lists in /v1/models)"
        )
        group.add_argument(
            "--api-key",
            default=None,
            env_var="SSE_SOAK_API_KEY",
            help="bearer token sent to the target server (default: the --api-key in --server-args, when the run "
            "starts the bundled server); never written to the run directory",
        )
        group.add_argument(
            "--server-args",
            default="",
            help="extra options for the bundled target server, e.g. --server-args='--failure-"
            "injection-rate 5' (ignored with --host; the scenario's profile is: "
            f"{shlex.join(self.server_args) or 'defaults'})",
        )
        if self.keep_alive_interval is not None:
            group.add_argument(
                "--keep-alive-interval",
                type=float,
                default=self.keep_alive_interval,
                help="the bundled server's --sse-keep-alive-interval in seconds; 0 turns keep-alive "
                f"off (the negative control) (default: {self.keep_alive_interval:g})",
            )
        group.add_argument(
            "--preflight-timeout",
            type=float,
            default=DEFAULT_PREFLIGHT_TIMEOUT,
            help="seconds the target may take to answer GET /v1/models before the run starts; a "
            "target that does not is refused in one line "
            f"(default: {DEFAULT_PREFLIGHT_TIMEOUT:g})",
        )
        group.add_argument(
            "--proxy",
            choices=PROXY_KINDS,
            default=self.proxy,
            help="reverse proxy in front of the server: none, embedded (asyncio, nginx's "
            f"read-timeout semantics) or nginx (started by the run) (default: {self.proxy})",
        )
        group.add_argument(
            "--proxy-read-timeout",
            type=float,
            default=self.proxy_read_timeout,
            help="the proxy's read timeout in seconds, as nginx's proxy_read_timeout "
            f"(default: {self.proxy_read_timeout:g})",
        )

    def _add_stream_options(self, group: Any) -> None:
        """How the client reads a stream."""
        group.add_argument(
            "--client-idle-timeout",
            type=float,
            default=self.client_idle_timeout,
            help="seconds of silence after which the client gives up on a stream; keep it above "
            f"any proxy read timeout (default: {self.client_idle_timeout:g})",
        )
        group.add_argument(
            "--max-line-bytes",
            type=int,
            default=DEFAULT_MAX_LINE_BYTES,
            help="longest SSE line the harness reads; a longer one is a protocol_error and the "
            f"stream is closed, so a hostile server cannot grow its memory "
            f"(default: {DEFAULT_MAX_LINE_BYTES}, 1 MiB)",
        )

    def _add_recording_options(self, group: Any) -> None:
        """What the run writes and how it measures itself and the server."""
        group.add_argument(
            "--report-dir",
            default="reports",
            help="directory under which the run writes <scenario>-<UTC time>/ (default: reports)",
        )
        group.add_argument(
            "--frame-sample-rate",
            type=float,
            default=1.0,
            help="share of ok streams whose frame records are kept (0-1); request rows and the "
            "frames of every other outcome are always kept (default: 1)",
        )
        group.add_argument(
            "--flush-interval",
            type=float,
            default=2.0,
            help="seconds between writes of recorded rows to the run directory (and between "
            "worker -> master batches) (default: 2)",
        )
        group.add_argument(
            "--harness-lag-limit-ms",
            type=float,
            default=DEFAULT_LAG_LIMIT_MS,
            env_var="SSE_SOAK_HARNESS_LAG_LIMIT_MS",
            help="the harness_kept_up gate: the p99 of each Locust process's event-loop lag (sampled every 10 ms, "
            "written to lag.parquet) must be at most this many ms, or the run's finer timings are the load "
            f"generator's, not the server's; 0 turns the gate off (default: {DEFAULT_LAG_LIMIT_MS:g})",
        )
        group.add_argument(
            "--server-metrics-interval",
            type=float,
            default=DEFAULT_SCRAPE_INTERVAL_S,
            help="seconds between scrapes of the server's GET /metrics (the bundled server's, or --host's, never a "
            "proxy's) into server_metrics.parquet: running and waiting requests, KV-cache usage, token counters "
            f"(default: {DEFAULT_SCRAPE_INTERVAL_S:g})",
        )
        group.add_argument(
            "--no-server-metrics", action="store_true", help="do not scrape the server's /metrics during the run"
        )

    def settings(self, options: Any) -> RunSettings:
        """The run's settings from its parsed options."""
        interval = getattr(options, "keep_alive_interval", None)
        server_args = [*self.server_args, *shlex.split(options.server_args)]
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

    def gate_list(self, settings: RunSettings, harness_lag_limit_ms: float = 0.0) -> Sequence[Gate]:
        """The scenario's gates with the run's settings filled in (so each is stored with concrete
        figures), then ``keepalive_covered`` when the run knows the server's keep-alive interval, then
        ``harness_kept_up`` with its limit (none when the limit is 0)."""
        declared = self.gates(settings) if callable(self.gates) else self.gates
        gates = [gate.for_run(settings) for gate in declared]
        if settings.keep_alive_interval:
            gates.append(KeepAliveCovered(settings.keep_alive_interval))
        return [*gates, HarnessKeptUp(harness_lag_limit_ms)] if harness_lag_limit_ms > 0 else gates

    def _on_init(self, environment: Any, **_: Any) -> None:
        quiet_per_request_logging()
        end_with_launcher()  # a soak or launch() that dies, even by SIGKILL, leaves no run behind
        options = environment.parsed_options
        try:
            check_options(options)
        except UsageError as exc:
            _refuse(str(exc))
        state = run_state(environment)
        state.model_option = options.model
        state.api_key = options.api_key
        if state.api_key is None and options.host is None:  # the bundled server's own key, if it was given one
            state.api_key = split_api_key(self.settings(options).server_args)[1]
        state.client_idle_timeout = options.client_idle_timeout
        state.frame_sample_rate = options.frame_sample_rate
        state.max_line_bytes = options.max_line_bytes
        state.runner = environment.runner
        for user_class in environment.user_classes:
            if issubclass(user_class, FastHttpUser):
                user_class.network_timeout = options.client_idle_timeout
        if not isinstance(environment.runner, WorkerRunner):
            self._settings = self.settings(options)
            self._check_gates(self.gate_list(self._settings))  # a function's gates: checked once known
            plan_only = os.environ.get(PLAN_ONLY_ENV)
            if plan_only:
                RunDir(plan_only).write_manifest(self._manifest(environment))
                sys.exit(0)
            self._start_stack(environment, self._settings)
            self._preflight(environment, state)
        arrival_clock.keep_kernel_stamping_on()  # before the first stream, so its first frames are stamped
        if environment.runner is None:
            return  # run_single_user (debugging): Locust prints each request; no run directory
        state.lag.start()  # for the whole run, in every process: its samples travel with the rows
        self._collector = Collector(environment, options.flush_interval)
        self._collector.start()
        lifecycle = environment.events
        lifecycle.test_start.add_listener(self._on_test_start)
        lifecycle.test_stopping.add_listener(self._on_test_stopping)
        lifecycle.test_stop.add_listener(self._on_test_stop)
        lifecycle.quitting.add_listener(self._on_quitting)
        lifecycle.quit.add_listener(lambda **_: self._guard.restore())
        # libev times a timer from its cached clock, stale by however long startup blocked (imports,
        # discovery): without this, Locust's -t timer, armed next, fires that much early.
        gevent.get_hub().loop.update_now()

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

    def _preflight(self, environment: Any, state: Any) -> None:
        """Refuse, in one line and before any user starts, a target the run cannot use."""
        host = environment.host
        if host is None:
            _refuse("no target: pass --host http://HOST:PORT (or leave it out to start the bundled server)")
        try:
            target = preflight(host, state.api_key, state.model_option, environment.parsed_options.preflight_timeout)
        except PreflightError as exc:
            self._stop_stack()
            _refuse(str(exc))
        for notice in target.notices:
            print(notice, flush=True)
        environment.host = self._target_host = target.base_url
        state.model_option = target.model

    def _stop_stack(self) -> None:
        if self._stack is not None:
            self._stack.stop()
            self._stack = None

    # -- one test: run directory at test_start, judged at test_stop ------------------------------
    def _on_test_start(self, environment: Any, **_: Any) -> None:
        self._guard.install()  # here, not at init: Locust installs its SIGTERM handler after init
        settle_after_setup()  # before any user spawns: one-time costs paid while no stream is open
        run_state(environment).lag.excuse_current_wait()
        _start_arrivals(environment)
        if isinstance(environment.runner, WorkerRunner):
            return
        assert self._collector is not None
        options = environment.parsed_options
        self._use_host_of_this_test(environment)
        try:
            run = self._next_run_dir(options.report_dir)
        except RunDirError as exc:  # checked at start; something changed the directory since
            print(f"sse-soak: {exc}: the test is not run", file=sys.stderr, flush=True)
            environment.process_exit_code = 2
            gevent.spawn(environment.runner.quit)
            return
        writer = RunWriter(run)
        run.write_manifest(self._manifest(environment))
        self._test = _Test(writer, time.monotonic(), getattr(options, "run_time", None) or None)
        self._collector.begin(writer)
        print(f"run directory: {run}", flush=True)
        if not options.no_server_metrics:
            self._test.scraper = self._scrape_server_metrics(environment, run)
        if environment.host and isinstance(environment.runner, MasterRunner):  # a master sizes no prompt itself
            state = run_state(environment)
            self._sizing_probe = gevent.spawn(
                probe_prompt_sizing, environment.host, state.api_key, state.model_option, state.probe_timeout
            )

    def _use_host_of_this_test(self, environment: Any) -> None:
        """The web UI's form sets the host for each test (before the users, or the workers' spawn
        messages, read it): left empty, the test targets the run's own target (the bundled stack,
        or ``--host``); another URL is checked as ``--host`` is and, if the check fails, still
        used after one line that says why: its requests fail and are recorded, none is lost."""
        host = environment.host
        if host == self._target_host or self._target_host is None:
            return
        if not host:
            environment.host = self._target_host
            print(f"sse-soak: no host given for this test: it targets {self._target_host}", flush=True)
            return
        state = run_state(environment)
        options = environment.parsed_options
        try:
            target = preflight(host, state.api_key, options.model, options.preflight_timeout)
        except PreflightError as exc:
            print(f"sse-soak: {exc}: this test's requests will fail", file=sys.stderr, flush=True)
            return
        for notice in target.notices:
            print(notice, flush=True)
        environment.host = self._target_host = target.base_url
        state.model_option = target.model

    def _scrape_server_metrics(self, environment: Any, run: RunDir) -> ServerMetricsScraper:
        """Start scraping the server itself for this test: the bundled one, else ``--host`` (never a proxy)."""
        options = environment.parsed_options
        services = self._stack.services if self._stack is not None else []
        bundled = next((service.url for service in services if service.name == "target server"), None)
        key = run_state(environment).api_key
        scraper = ServerMetricsScraper(
            bundled or base_url(options.host)[0],
            run.server_metrics,
            options.server_metrics_interval,
            options.flush_interval,
            {"Authorization": f"Bearer {key}"} if key else None,
        )
        scraper.start()
        return scraper

    def _next_run_dir(self, report_dir: str) -> RunDir:
        """The directory the soak job made for this run (``SSE_SOAK_RUN_DIR``, its first test only),
        else a new one under ``report_dir``."""
        given = os.environ.pop(RUN_DIR_ENV, None)
        return RunDir(given) if given else RunDir.create(report_dir, self.name)

    def _manifest(self, environment: Any) -> Manifest:
        settings = self._settings or self.settings(environment.parsed_options)
        gates = self.gate_list(settings, environment.parsed_options.harness_lag_limit_ms)
        services = [] if self._stack is None else [Service(s.name, s.url, s.pid) for s in self._stack.services]
        workers = environment.runner.worker_count if isinstance(environment.runner, MasterRunner) else 0
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        recorded = settings.as_dict()
        return Manifest(self.name, started, recorded, [g.spec() for g in gates], services, workers, versions())

    def _prompt_sizing(self, environment: Any) -> str | None:
        """What this process's users found about prompt sizing, else (on a master, which prepares
        no mix) what its probe at test start found, else None."""
        facts = run_state(environment).facts
        if facts is not None:
            return facts.prompt_sizing
        probe, self._sizing_probe = self._sizing_probe, None
        if probe is None:
            return None
        probe.join(timeout=PROBE_TIMEOUT + 5)
        probe.kill(block=False)
        return probe.value if probe.successful() else None

    def _on_test_stopping(self, environment: Any, **_: Any) -> None:
        if self._test is not None and self._test.stopping_at is None:
            self._test.stopping_at = time.monotonic()
        _close_arrivals(environment)

    def _on_test_stop(self, environment: Any, **_: Any) -> None:
        if not isinstance(environment.runner, WorkerRunner):
            self._judge_test(environment)

    def _judge_test(self, environment: Any) -> None:
        """Collect the test's last rows and judge it, once; a second caller waits for the first."""
        test = self._test
        if test is None:
            return
        if test.judging:
            test.judged.wait()
            return
        test.judging = True
        assert self._collector is not None
        try:
            self._collector.finish()
            if test.scraper is not None:
                test.scraper.stop()  # its last rows written before the judging reads them
            self._write_report(environment, test)
        finally:
            self._collector.end()
            test.judged.set()
            self._guard.release()

    def _on_quitting(self, environment: Any, **_: Any) -> None:
        """Locust is quitting: end the test under way (its rows, its verdict) and the stack, once."""
        if self._quitting:
            self._quit_done.wait()
            return
        self._quitting = self._guard.quitting = True
        try:
            if isinstance(environment.runner, WorkerRunner):
                assert self._collector is not None
                self._collector.stop_and_ship()
            else:
                self._end_test(environment)
            if self._collector is not None:
                self._collector.stop()
            run_state(environment).lag.stop()
        finally:
            self._stop_stack()
            self._quit_done.set()

    def _end_test(self, environment: Any) -> None:
        test = self._test
        if test is None or test.judged.is_set():
            return  # no test ever started (web UI), or it is judged already
        if environment.runner.state in (STATE_SPAWNING, STATE_RUNNING):
            environment.runner.stop()  # fires test_stop, which judges the test
        elif not test.judging:
            test.judged.wait(STOP_WAIT_S)  # a stop under way elsewhere fires test_stop when done
        self._judge_test(environment)  # waits for the judging under way, or judges if none came

    def _write_report(self, environment: Any, test: _Test) -> None:
        settings = self._settings or self.settings(environment.parsed_options)
        run = test.writer.run
        ended, interrupted = test.how_it_ended(self._guard.received)
        options = environment.parsed_options
        recorded = {
            **settings.as_dict(),
            "prompt_sizing": self._prompt_sizing(environment),
            "max_line_bytes": options.max_line_bytes,
        }
        with self._guard.deferred():  # the summary and the verdict line are never cut
            gates = self.gate_list(settings, options.harness_lag_limit_ms)
            summary = judge(
                run,
                gates,
                scenario=self.name,
                settings=recorded,
                frame_sample_rate=options.frame_sample_rate,
                ended=ended,
                interrupted=interrupted,
                server_metrics_unavailable=test.server_metrics_unavailable,
                html=False,
            )
            outcomes = ", ".join(f"{n} {outcome}" for outcome, n in summary.outcomes.items() if n)
            print(f"requests: {summary.requests} ({outcomes or 'none'})")
            if summary.arrival is not None:
                print(arrival_line(summary.arrival))
            causes = summary.causes
            print(
                f"causes: {causes['proxy_timeouts_before_headers']} proxy 504s before headers, "
                f"{causes['cut_after_headers']} streams cut after headers, "
                f"statuses {causes['status'] or '{}'}"
            )
            for gate in summary.gates:
                print(gate.line())
            if test.writer.rows_unwritable or test.writer.rows_pending:
                print(
                    f"sse-soak: {test.writer.rows_unwritable} rows kept as text in {UNWRITABLE_ROWS} and "
                    f"{test.writer.rows_pending} rows not written (the disk refused them): not judged"
                )
            print(f"ended: {ended}")
            print(summary.verdict_line(), flush=True)
            if not summary.passed:
                environment.process_exit_code = 1
        try:
            with self._guard.interruptible():  # a second Ctrl-C may cut the HTML, nothing else
                write_html_files(run, summary)
        except KeyboardInterrupt:
            print(f"sse-soak: report.html was not written (interrupted); python -m loadtests report {run} writes it")
        print(f"report: {run}", flush=True)
