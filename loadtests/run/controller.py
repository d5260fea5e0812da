"""The run controller: one Locust run of a scenario, from its options to its exit code.

A locustfile declares a ``Scenario`` (``loadtests.declare.scenario``: a frozen declaration).
Declaring it, or a user class of ours, where Locust runs calls ``install`` (``loadtests.base.locust_entry``:
importing registers nothing), which hands Locust two hooks of one ``LocustEntry``, once per process:
at ``init_command_line_parser`` it finds the locustfile's scenario (as Locust finds its users, among
the names the locustfile's module defines: exactly one ``Scenario`` there, or the run is refused in
one line), makes the ``RunController`` and declares its options (``loadtests.declare.options``); at
``init`` the controller checks them, picks this process's role once (``loadtests.run.roles``: local,
master or worker) and takes over the run's lifecycle on the environment's own events. The run's
settings (``loadtests.run.settings``) are computed at init and again as each test starts, and kept
on the run's state (``RunState.settings``). Nothing of a run is kept in this module's globals.

Without ``--host``, the master (or the single process) starts the bundled target server with the
scenario's profile on a free loopback port; with ``--proxy`` (embedded, or a real one: nginx,
haproxy, caddy, apache, squid) a proxy with ``--proxy-read-timeout`` goes in front of it (or of
``--host``). It prints what it started and stops it all by pid at the end.

Each Locust test (headless: the whole run; web UI: each Start..Stop) is one run directory: made
and printed (``run directory: <path>``) at ``test_start``, judged at ``test_stop`` by the process
that holds all results: its last rows collected, ``summary.json`` written, a failed or
interrupted test's non-zero exit code set (never zero: Locust's own failures keep theirs), then
``report.html``. Its closing block (each gate's line, ``timing:``, ``ended:``, the verdict and
``report: <path>``) is printed then, unless Locust quits after the test (headless, or the web UI's
``--autoquit``): Locust prints its final tables on the way out, so the block waits for its ``quit``
event, after them, and a run's last lines are its verdict and report. Quitting while a test
runs stops and judges it; the judging runs once per test whoever asks (Locust's SIGTERM handler
and its main greenlet can both enter ``shutdown()``). Ctrl-C, SIGTERM and SIGHUP go through a
``SignalGuard``: they end the run the way Ctrl-C does, wait while the summary is written, and
may only cut report.html. In the web UI, each test re-reads the options its form may have changed.

The controller's Locust hooks are an entry point: an ``SseSoakError`` raised below them becomes one
line on stderr and exit 2 here (``_refusing``), and nowhere else.

``locust -f scenarios/x.py --help`` cannot list our options: Locust 2.x prints its help before it
loads the locustfile (locust issue #2917). ``python scenarios/x.py --help`` goes through Locust's
parser after the scenario is loaded, so it lists Locust's options and ours.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import functools
import os
import ssl
import sys
import time
from argparse import Namespace
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ParamSpec

import gevent
from gevent.event import Event
from locust import FastHttpUser, events
from locust.argument_parser import LocustArgumentParser, parse_locustfile_option
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING
from locust.util.timespan import parse_timespan

from loadtests.base.lines import lines_to_stderr, say
from loadtests.base.ports import own_master_port
from loadtests.base.safe_text import printable, redacted_url, url_origin
from loadtests.client import kernel_stamps as arrival_clock
from loadtests.client import tls
from loadtests.client.body_mux import body_mux
from loadtests.client.preflight import base_url, preflight
from loadtests.declare.options import add_locust_options, check_locust_options, check_run_time, given_run_time
from loadtests.declare.scenario import RunSettings, Scenario
from loadtests.declare.workload import PROBE_TIMEOUT, probe_prompt_sizing
from loadtests.errors import (
    INCONCLUSIVE_EXIT_CODE,
    UNWRITTEN_EXIT_CODE,
    InternalSignal,
    PreflightError,
    RunDirError,
    RunFailed,
    RunInProgress,
    ServerStartError,
    SseSoakError,
    UsageError,
    VllmError,
    reported,
)
from loadtests.judge.gates import ALWAYS_ON, INFERRED, UNKNOWN, NoProxyTimeouts, gate_sources
from loadtests.judge.summary import LiveCounts
from loadtests.load.loop_hygiene import freeze_users_as_they_start, quiet_per_request_logging, settle_after_setup
from loadtests.load.open_loop import not_sent_row
from loadtests.load.pacing import paced_answers, pacing_line
from loadtests.load.state import RunState, run_state
from loadtests.load.users import REQUEST_TYPE, StreamingUser
from loadtests.record.live_metrics import NOT_JUDGED, GateWatch, LiveMetricsServer, RunLabels, serving_line
from loadtests.record.membership import Admission, RunIdentity, own_run_id
from loadtests.record.parts_writer import UNWRITABLE_ROWS, RunWriter
from loadtests.record.run_dir import (
    PLAN_ONLY_ENV,
    RUN_DIR_ENV,
    Manifest,
    RunDir,
    RunRecord,
    Service,
    WriterLock,
    versions,
)
from loadtests.record.server_metrics import OFF, ServerMetricsScraper
from loadtests.run.collect import Collector
from loadtests.run.ending import ended_by_a_death, how_it_ended
from loadtests.run.judging import (
    JudgeOptions,
    gate_states,
    inferred_interval,
    judge,
    keep_elsewhere,
    write_html_files,
)
from loadtests.run.live_gates import ChildJudge
from loadtests.run.roles import Local, Role, role_of
from loadtests.run.settings import api_key_in_server_args, known_concurrency, recorded_settings, run_settings
from loadtests.run.signals import AT_INIT, SignalGuard
from loadtests.run.stack_watch import StackWatch
from loadtests.run.web_tab import WebTab
from loadtests.services import proxies
from loadtests.services.parent_watch import end_with_launcher
from loadtests.services.real_vllm import DEFAULT_RELEASE, vllm_available
from loadtests.services.stack import Stack

__all__ = ["LocustEntry", "RunController", "find_scenario", "install"]

_Params = ParamSpec("_Params")


def _refusing(hook: Callable[_Params, None]) -> Callable[_Params, None]:
    """A Locust hook as an entry point: an ``SseSoakError`` is one line on stderr and its exit code;
    an ``InternalSignal`` that escaped its handler is a defect, said so, exit 70 (``errors.reported``)."""

    @functools.wraps(hook)
    def refusing(*args: _Params.args, **kwargs: _Params.kwargs) -> None:
        try:
            hook(*args, **kwargs)
        except (SseSoakError, InternalSignal) as exc:
            line, exit_code = reported(exc)
            print(printable(f"sse-soak: {line}"), file=sys.stderr, flush=True)
            sys.exit(exit_code)

    return refusing


def _locustfile_modules() -> list[ModuleType]:
    """The modules this process loaded as locustfiles: those of ``-f`` (as Locust reads it: argument,
    environment, config file; Locust names each module after its file) and the script run as
    ``__main__`` (``python scenarios/x.py``)."""
    args = [arg for arg in sys.argv[1:] if arg not in ("-h", "--help", "-V", "--version")]  # those would print
    given: Any = parse_locustfile_option(args)  # a Namespace: Locust's annotation (a tuple) is wrong
    paths = {str(Path(path.strip()).resolve()) for path in str(given.locustfile).split(",")}

    def loaded(modules: Iterable[ModuleType | None]) -> list[ModuleType]:
        found = []
        for module in modules:
            file = getattr(module, "__file__", None)
            if module is not None and file and (module.__name__ == "__main__" or str(Path(file).resolve()) in paths):
                found.append(module)
        return found

    # by the names Locust gives (a realpath for each of some 1,400 modules costs 0.06 s), else all
    named = {Path(path).stem for path in paths} | {"locustfile", "__main__"}
    return loaded(sys.modules.get(name) for name in sorted(named)) or loaded(list(sys.modules.values()))


def find_scenario(modules: Iterable[ModuleType]) -> Scenario | None:
    """The one ``Scenario`` the locustfile modules define (a module imported by a locustfile, for its
    mixes or gates, is not one of them); None when they define none; ``UsageError`` for several."""
    found = {id(value): (value, module) for module in modules for value in vars(module).values()}
    declared = [(value, module) for value, module in found.values() if isinstance(value, Scenario)]
    if len(declared) > 1:
        names = ", ".join(f"{scenario.name} ({module.__file__})" for scenario, module in declared)
        raise UsageError(
            f"{len(declared)} scenarios in the locustfile(s) given: {names}; a run runs exactly one Scenario: "
            "give one locustfile that declares one"
        )
    return declared[0][0] if declared else None


PROCESS_DEFAULTS = ("master_port", "master_bind_port", "run_id")

CREDENTIALS_OPTION = "sse_soak_credentials"
"""The parsed options' entry (no command-line option) holding the run state's Basic auth by origin:
Locust's spawn messages carry the master's options to its workers, so they send what the master
took out of ``--host`` or the web UI form's host."""
"""Option defaults made once per process (``own_master_port``, ``own_run_id``), the same in every parser."""


class LocustEntry:
    """sse-soak's two hooks in Locust for this process: its options at ``init_command_line_parser``,
    the run at ``init``. It holds the run's controller once Locust's command line asked for it."""

    def __init__(self) -> None:
        self.asked = False
        """Whether Locust built its first parser (the locustfile's scenario was looked for)."""
        self.controller: RunController | None = None
        """The run's controller; None while not asked, or when the locustfile declares no scenario."""

    @_refusing
    def add_run_options(self, parser: LocustArgumentParser) -> None:
        """The first parser of the process makes the controller, and with it the master port and run id
        the forked workers inherit. Locust builds its parser again after that (its web UI does, for the
        form, before ``init`` and on every page it serves): each later one gets the same controller's
        options and the same defaults, never a run id of its own, or the master refuses its workers."""
        if not self.asked:
            self.asked = True
            scenario = find_scenario(_locustfile_modules())
            if scenario is None:
                return
            controller = self.controller = RunController(scenario)
            _refuse_a_run_time_of_zero(sys.argv[1:])
            controller.add_options(parser)
            own_master_port(parser, sys.argv[1:])
            controller.run_id = own_run_id(parser, sys.argv[1:])
            controller.process_defaults = {name: parser.get_default(name) for name in PROCESS_DEFAULTS}
            return
        if self.controller is not None:
            self.controller.add_options(parser)
            parser.set_defaults(**self.controller.process_defaults)

    @_refusing
    def init_run(self, environment: Environment, **kwargs: Any) -> None:
        if self.controller is None:
            ours = sorted(user.__name__ for user in environment.user_classes if issubclass(user, StreamingUser))
            if ours:
                raise UsageError(
                    f"{', '.join(ours)} run in no scenario: declare one in the locustfile, e.g. "
                    'scenario = Scenario(name="my_scenario") (declaring it installs it)'
                )
            return
        self.controller.on_init(environment, **kwargs)


@functools.cache
def install() -> LocustEntry:
    """Hand this process's ``LocustEntry`` to Locust's events, once (cached: a later call returns the
    same entry and adds nothing). Called by declaring a scenario or user class where Locust runs
    (``loadtests.base.locust_entry``), never by an import."""
    entry = LocustEntry()
    events.init_command_line_parser.add_listener(entry.add_run_options)
    events.init.add_listener(entry.init_run)
    return entry


def _refuse_a_run_time_of_zero(argv: Sequence[str]) -> None:
    """``-t 0s`` on the command line, refused before Locust forks the workers of ``--processes`` (its
    ``init`` comes after): read as Locust reads it. ``init`` checks the value Locust parsed, whatever
    gave it (``LOCUST_RUN_TIME``, a config file)."""
    given = given_run_time(argv)
    if given is None:
        return
    try:
        seconds = parse_timespan(given)
    except ValueError:
        return  # Locust refuses it in its own words
    check_run_time(seconds, argv)


def _close_arrivals(state: RunState) -> None:
    """Open loop, as the test stops: the scheduled requests no user took are recorded as ``not_sent``."""
    schedule = state.arrivals
    if schedule is None or schedule.closed:
        return
    for ticket in schedule.unsent():
        state.recorder.add(not_sent_row(ticket, state.worker), None)


def _options(environment: Environment) -> Namespace:
    """The run's parsed options (Locust sets them before ``init``)."""
    assert environment.parsed_options is not None
    return environment.parsed_options


def _with_interval_inferred(settings: RunSettings, record: RunRecord) -> RunSettings:
    """The settings a finished test's gates are formed with: a server's keep-alive interval the run
    was not told (``unknown``) inferred once from the comments it recorded, so every gate, the
    scenario's own written in the interval included, and every line judge one interval; the settings
    as they were when told, or when no comment showed it."""
    if settings.keep_alive_interval_source != UNKNOWN:
        return settings
    found = inferred_interval(record)
    if found is None:
        return settings
    return dataclasses.replace(
        settings,
        keep_alive_interval=found.interval,
        keep_alive_interval_source=INFERRED,
        keep_alive_inferred=found.as_settings(),
    )


def _stack_of(settings: RunSettings) -> tuple[Any, ...]:
    """What the stack a run starts depends on."""
    return settings.proxy, settings.proxy_read_timeout, settings.keep_alive_interval, settings.server_args


STOP_WAIT_S = 120.0
"""How long quitting waits for a stop already under way elsewhere to judge the test itself."""


@dataclass
class _Test:
    """One Locust test (headless: the run; web UI: one Start..Stop) and its run directory."""

    writer: RunWriter
    started: float
    """``time.monotonic()`` as test_start fired: when Locust armed its ``-t`` timer (it arms it as it
    spawns the greenlet that fires test_start), so the run time is counted from here."""
    duration_s: float | None
    """The run time Locust was given (``-t``, the option ``duration``, or the web UI's run time), if any."""
    stopping_at: float | None = None
    judging: bool = False
    judged: Event = field(default_factory=Event)
    scraper: ServerMetricsScraper | None = None
    """Scraping the server's ``/metrics`` while the test runs; None when turned off."""
    load_started: float | None = None
    """``time.monotonic()`` once the test's start-up (the test_start hooks) was over and users spawned."""
    lock: WriterLock | None = None
    """The run directory's writer lock, held from test_start until the test is judged (``record.run_dir``)."""

    @property
    def server_metrics_unavailable(self) -> str | None:
        """Why the test has no server metrics; None when it has some."""
        return OFF if self.scraper is None else self.scraper.unavailable

    def how_it_ended(self, signals: Sequence[tuple[str, float]]) -> tuple[str, str | None]:
        """``(ended, interrupted)`` (``_ending.how_it_ended``) as of its stop, or now."""
        end = self.stopping_at or time.monotonic()
        return how_it_ended(self.started, self.load_started, end, self.duration_s, signals)


def _server_url(host: str | None) -> str | None:
    """The given ``--host`` as a base URL, where a proxy the run started in front of it forwards."""
    if host is None:
        return None
    try:
        return base_url(host)[0]
    except PreflightError:
        return None  # the preflight refuses it in its own words


class RunController:
    """One Locust run of ``scenario`` in this process: its options, the stack, the tests, the verdict."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._role: Role = Local(None)
        """This process's part in the run (``loadtests.run.roles``), chosen once at init."""
        self._stack: Stack | None = None
        self._stack_watch: StackWatch | None = None
        self._death: tuple[str, float] | None = None
        """The first service of the stack that died by itself, in words, and when (``time.monotonic()``)."""
        self._collector: Collector | None = None
        self._test: _Test | None = None
        self._sizing_probe: gevent.Greenlet | None = None
        self._freezer: gevent.Greenlet | None = None
        """This test's ``freeze_users_as_they_start`` (``loadtests.load.loop_hygiene``), killed at its stop."""
        self._given_host: str | None = None
        """``--host`` as the command line gave it (None: the bundled stack)."""
        self._target_host: str | None = None
        """The URL the preflight accepted; a test the web UI starts with no host targets it."""
        self._guard = SignalGuard()
        self._quitting = False
        self._quit_done = Event()
        self._closing: list[list[str]] = []
        """Judged tests' closing blocks (gate lines, verdict, ``report:``) not said yet (``_close``)."""
        self.run_id: str | None = None
        """``--run-id`` as this process was started with (``own_run_id``): never the master's copy."""
        self.process_defaults: dict[str, Any] = {}
        """``PROCESS_DEFAULTS`` as the process's first parser had them."""
        self._web_tab: WebTab | None = None
        """sse-soak's tab in Locust's web UI (``loadtests.run.web_tab``), when this process serves one."""
        self._live: LiveMetricsServer | None = None
        """The run's live metrics (``--live-metrics-port``), served by the process that leads the run."""
        self._gate_watch: GateWatch | None = None
        """Judging the gates of the test under way for the live metrics, until it is judged."""
        self._linger_s = 0.0
        """``--live-metrics-linger``: how long quitting waits for a last scrape of the final figures."""

    @property
    def name(self) -> str:
        return self.scenario.name

    def add_options(self, parser: LocustArgumentParser) -> None:
        """The scenario's options (``loadtests.declare.options``), checked first: its gates' queries."""
        self.scenario.check()
        # Loopback unless told otherwise: Locust's master and web UI bind every interface by default.
        parser.set_defaults(master_bind_host="127.0.0.1", web_host="127.0.0.1")
        add_locust_options(parser, f"Options of the sse-soak scenario '{self.name}'.", self.scenario)

    def on_init(self, environment: Environment, **_: Any) -> None:
        quiet_per_request_logging()
        end_with_launcher()  # a soak or launch() that dies, even by SIGKILL, leaves no run behind
        options = _options(environment)
        self._role = role = role_of(environment.runner)
        lines_to_stderr(bool(getattr(options, "json", False)))  # stdout is --json's
        check_locust_options(options)
        if role.leads:  # Locust ignores a worker's -t
            check_run_time(options.run_time, sys.argv[1:])
        _trust_as_told(environment, role)
        self._given_host = options.host
        state = run_state(environment)
        state.settings = settings = run_settings(self.scenario, options)
        state.read_timeout_judged = self._read_timeout_judged(settings)
        state.model_option = options.model
        state.api_key = options.api_key
        if state.api_key is None and options.host is None:  # the bundled server's own key, if it was given one
            state.api_key = api_key_in_server_args(settings)
        self._take_credentials(environment)
        _read_streams_as_told(environment)
        # the server is not the bundled one running the profile: silence must come from queueing
        state.hold_slots = options.host is not None or getattr(options, "server", "bundled") != "bundled"
        state.known_concurrency = known_concurrency(settings)
        state.runner = environment.runner
        state.part = role.part
        for user_class in environment.user_classes:
            if issubclass(user_class, FastHttpUser):
                user_class.insecure = options.insecure
        # first: a master answers the hellos of workers that connect while its stack starts
        state.admission = Admission(environment, RunIdentity(self.name, self.run_id), role.part)
        state.admission.start()
        if role.leads:
            self.scenario.check(settings)  # a function's gates: checked once known
            notice = self.scenario.proxy_notice(options)
            if notice is not None:
                say(notice)
            plan_only = os.environ.get(PLAN_ONLY_ENV)
            if plan_only:
                RunDir(plan_only).write_manifest(self._manifest(environment))
                sys.exit(0)
            if environment.runner is not None:
                self._open_live_metrics(options)  # before any service starts: a taken port stops the run at once
            self._start_stack(environment, settings)
            self._preflight(environment, state)
            self._watch_stack(environment)
        arrival_clock.keep_kernel_stamping_on()  # before the first stream, so its first frames are stamped
        if environment.runner is None:
            return  # run_single_user (debugging): Locust prints each request; no run directory
        state.lag.start()  # for the whole run, in every process: its samples travel with the rows
        self._collector = Collector(environment, options.flush_interval, state.admission.refused, role.part)
        self._collector.start()
        role.watch(self._collector, options)
        self._guard.speaks = role.leads
        self._guard.install(AT_INIT)  # an idle web UI's Ctrl-C (or hang-up) quits, every time
        self._open_web_tab(environment)
        lifecycle = environment.events
        lifecycle.test_start.add_listener(self._on_test_start)
        lifecycle.test_stopping.add_listener(self._on_test_stopping)
        lifecycle.test_stop.add_listener(self._on_test_stop)
        lifecycle.quitting.add_listener(self._on_quitting)
        lifecycle.quit.add_listener(self._on_quit)
        atexit.register(self._say_closing)  # should Locust exit without firing quit
        # libev times a timer from its cached clock, stale by however long startup blocked (imports,
        # discovery): without this, Locust's -t timer, armed next, fires that much early.
        gevent.get_hub().loop.update_now()

    def _open_live_metrics(self, options: Namespace) -> None:
        """Serve the run's live metrics (``loadtests.record.live_metrics``) when ``--live-metrics-port``
        says so: bound here or refused in one line (exit 2), said in one line. Only the process that
        leads the run calls this: a worker never opens a port (Locust forked them before ``init``)."""
        if options.live_metrics_port is None:
            return
        self._live = LiveMetricsServer.open(options.live_metrics_bind, options.live_metrics_port)
        self._linger_s = options.live_metrics_linger or 0.0
        say(serving_line(self._live))

    def _watch_live(self, environment: Environment, run: RunDir) -> None:
        """The live metrics follow the test starting: its figures from zero, its labels, its gates
        judged so far in their own thread (``GateWatch``)."""
        if self._live is None:
            return
        settings = self._settings(environment)
        options = _options(environment)
        known = settings.keep_alive_interval if settings.keep_alive_interval_source != UNKNOWN else None
        server = settings.host or (self._stack.server_url if self._stack is not None else None) or settings.server
        labels = RunLabels(self.name, printable(redacted_url(server)), settings.proxy, str(run.path), known)
        gates = self.scenario.gate_list(settings, options.harness_lag_limit_ms)
        figures = self._live.figures
        figures.begin(labels)
        figures.set_gates(dict.fromkeys((gate.name for gate in (*ALWAYS_ON, *gates)), NOT_JUDGED))
        self._gate_watch = GateWatch(figures, ChildJudge(run.path, options.max_unjudged_share))

    def _stop_gate_watch(self) -> None:
        if self._gate_watch is not None:
            self._gate_watch.stop()
            self._gate_watch = None

    def _linger_for_last_scrape(self, final: int) -> None:
        """``--live-metrics-linger``: wait, at most that long, for a scrape answered after the
        ``final``-th (the figures were final by then: every test is judged), then stop serving."""
        live = self._live
        if live is None:
            return
        deadline = time.monotonic() + self._linger_s
        while live.sent_generation <= final and time.monotonic() < deadline:
            gevent.sleep(0.05)
        live.close()

    def _start_stack(self, environment: Environment, settings: RunSettings) -> None:
        if settings.host is not None and settings.proxy == "none":
            return  # the server is given and nothing stands in front of it
        if settings.starts_server == "vllm":
            available, reason = vllm_available(release=settings.vllm_release or DEFAULT_RELEASE)
            if not available:
                raise UsageError(f"--server vllm: {reason}")
        proxy = proxies.find(settings.proxy)
        if proxy is not None:
            available, reason = proxy.available()
            if not available:
                raise UsageError(f"--proxy {proxy.name}: {reason}")
        try:
            self._stack = Stack.start(
                settings.host,
                settings.server_args,
                settings.proxy,
                settings.proxy_read_timeout,
                settings.server,
                run_state(environment).api_key,
                settings.vllm_release or DEFAULT_RELEASE,
            )
        except (ServerStartError, VllmError, ValueError) as exc:
            raise RunFailed(f"the stack did not start: {exc}") from None
        atexit.register(self._stop_stack)  # run_single_user never fires quitting
        environment.host = self._stack.url
        state = run_state(environment)
        state.sizing_host = self._stack.server_url or _server_url(state.take_credentials(settings.host))
        for line in self._stack.describe():
            say(line)

    def _watch_stack(self, environment: Environment) -> None:
        """Watch the stack's services (``loadtests.run.stack_watch``) once the preflight accepted it:
        one that dies before then fails the preflight in its own words."""
        if self._stack is not None:
            watch = StackWatch(self._stack, functools.partial(self._on_service_death, environment))
            self._stack_watch = watch.start()

    def _on_service_death(self, environment: Environment, what: str) -> None:
        """A service of the stack died by itself: said once, and the run ends as interrupted (as a
        first Ctrl-C ends it: judged, its verdict FAIL, ``interrupted`` naming the service). Its exit
        code is 1 even when no test was under way (an idle web UI) to fail."""
        self._death = (what, time.monotonic())
        say(f"sse-soak: {what} while the run went: ending the run (interrupted)")
        if environment.process_exit_code in (None, 0):
            environment.process_exit_code = 1
        self._guard.end_run()

    def _preflight(self, environment: Environment, state: RunState) -> None:
        """Refuse, in one line and before any user starts, a target the run cannot use."""
        host = environment.host = state.take_credentials(environment.host)
        if host is None:
            raise UsageError("no target: pass --host http://HOST:PORT (or leave it out to start the bundled server)")
        try:
            timeout = _options(environment).preflight_timeout
            basic = state.credentials.get(url_origin(host))
            target = preflight(host, state.api_key, state.model_option, timeout, basic)
        except PreflightError as exc:
            self._stop_stack()
            raise UsageError(str(exc)) from None
        for notice in target.notices:
            say(printable(notice))
        environment.host = self._target_host = target.base_url
        state.model_option = target.model

    def _stop_stack(self) -> None:
        if self._stack_watch is not None:
            self._stack_watch.stop()  # first: our stop is no death
            self._stack_watch = None
        if self._stack is not None:
            self._stack.stop()
            self._stack = None

    # -- one test: run directory at test_start, judged at test_stop ------------------------------
    def _on_test_start(self, environment: Environment, **_: Any) -> None:
        entered = time.monotonic()  # Locust's -t timer was armed as this hook's greenlet was spawned
        self._guard.test_started = True
        self._guard.install()  # SIGTERM here, not at init: Locust installs its own after init
        settle_after_setup()  # before any user spawns: one-time costs paid while no stream is open
        self._freeze_users_as_they_start(environment)
        state = run_state(environment)
        state.lag.excuse_current_wait()
        state.reset_slot_holders()  # this test's first mix that needs silence starts them anew
        if self._role.leads and not self._take_form_options(environment):
            return
        _read_streams_as_told(environment)  # the form's values (a worker has them from its spawn message)
        state.credentials.update(getattr(_options(environment), CREDENTIALS_OPTION, None) or {})
        options = _options(environment)
        state.arrivals = None if options.rate is None else self._role.arrivals(options)
        if not self._role.leads:
            return
        assert self._collector is not None and environment.runner is not None
        self._use_host_of_this_test(environment)
        try:
            run = self._next_run_dir(options.report_dir)
            lock = run.writer_lock()  # this run's own until judged: before anything is written in it
        except (RunDirError, RunInProgress) as exc:  # checked at start; something changed the directory since
            print(printable(f"sse-soak: {exc}: the test is not run"), file=sys.stderr, flush=True)
            environment.process_exit_code = 2
            gevent.spawn(environment.runner.quit)
            return
        writer = RunWriter(run, self._live.figures.observe_batch if self._live is not None else None)
        run.write_manifest(self._manifest(environment))
        self._test = _Test(writer, entered, getattr(options, "run_time", None) or None, lock=lock)
        self._collector.begin(writer)
        say(f"run directory: {run}")
        self._show_in_web_tab(environment, run)
        self._watch_live(environment, run)
        if not options.no_server_metrics:
            self._test.scraper = self._scrape_server_metrics(environment, run)
        if environment.host and self._role.probes_prompt_sizing:  # a master sizes no prompt itself
            self._sizing_probe = gevent.spawn(
                probe_prompt_sizing,
                state.sizing_host or environment.host,
                None,
                state.model_option,
                state.probe_timeout,
                state.authorization_for(state.sizing_host or environment.host),
            )
        self._test.load_started = time.monotonic()

    def _read_timeout_judged(self, settings: RunSettings) -> float | None:
        """The proxy read timeout a gate of this run judges silence against (``no_proxy_timeouts``),
        None when none does: the slot holders make streams wait past it."""
        gates = self.scenario.gates(settings) if callable(self.scenario.gates) else self.scenario.gates
        judged = [gate.for_run(settings) for gate in gates if isinstance(gate, NoProxyTimeouts)]
        return max((gate.read_timeout for gate in judged if gate.read_timeout is not None), default=None)

    def _take_form_options(self, environment: Environment) -> bool:
        """The web UI's form may change any option for each test (as text): check them as the command
        line's are, compute the test's settings once (kept on the run's state), and when the stack's
        settings changed (the proxy, its read timeout, the keep-alive interval, the server's
        arguments) restart the stack with them. A bad value stops this test in one line and leaves
        the run waiting for the next; False then."""
        options = _options(environment)
        state = run_state(environment)
        try:
            check_locust_options(options)
            as_given = copy.copy(options)
            as_given.host = self._given_host  # the form's host field is the test's target, not --host
            settings = run_settings(self.scenario, as_given)
            self.scenario.check(settings)  # the form's timing resolution against the gates' tolerances
            if state.settings is not None and _stack_of(settings) != _stack_of(state.settings):
                self._restart_stack(environment, settings)
            state.settings = settings
            state.read_timeout_judged = self._read_timeout_judged(settings)
        except SseSoakError as exc:
            print(printable(f"sse-soak: {exc}: the test is not run"), file=sys.stderr, flush=True)
            assert environment.runner is not None
            gevent.spawn(environment.runner.stop)
            return False
        return True

    def _restart_stack(self, environment: Environment, settings: RunSettings) -> None:
        say("sse-soak: the form changed the stack's settings: restarting it")
        self._stop_stack()
        environment.host = settings.host
        self._target_host = None
        self._start_stack(environment, settings)
        self._preflight(environment, run_state(environment))
        self._watch_stack(environment)

    def _use_host_of_this_test(self, environment: Environment) -> None:
        """The web UI's form sets the host for each test (before the users, or the workers' spawn
        messages, read it): left empty, the test targets the run's own target (the bundled stack,
        or ``--host``); another URL is checked as ``--host`` is and, if the check fails, still
        used after one line that says why: its requests fail and are recorded, none is lost."""
        host = environment.host
        if host == self._target_host or self._target_host is None:
            return
        if not host:
            environment.host = self._target_host
            say(f"sse-soak: no host given for this test: it targets {redacted_url(self._target_host)}")
            return
        state = run_state(environment)
        options = _options(environment)
        try:
            basic = state.credentials.get(url_origin(host))
            target = preflight(host, state.api_key, options.model, options.preflight_timeout, basic)
        except PreflightError as exc:
            print(printable(f"sse-soak: {exc}: this test's requests will fail"), file=sys.stderr, flush=True)
            return
        for notice in target.notices:
            say(printable(notice))
        environment.host = self._target_host = target.base_url
        state.model_option = target.model

    def _open_web_tab(self, environment: Environment) -> None:
        """sse-soak's tab in Locust's web UI, when this process serves one (never a worker's)."""
        if environment.web_ui is not None and self._role.leads:
            self._web_tab = WebTab.install(
                environment, lambda: self._form_values(environment), lambda host: self._form_host(environment, host)
            )

    def _take_credentials(self, environment: Environment) -> None:
        """Take the userinfo out of the host Locust holds (its ``--host``, its environment's): the
        run state keeps it as Basic auth for that origin, and the options carry it to the workers in
        each spawn message (Locust's report, web UI and spawn messages show the host without it).
        ``--host`` as given stays ``_given_host``, which the run records redacted."""
        options = _options(environment)
        state = run_state(environment)
        options.host = state.take_credentials(options.host)
        environment.host = state.take_credentials(environment.host)
        vars(options)[CREDENTIALS_OPTION] = dict(state.credentials)

    def _form_host(self, environment: Environment, host: str) -> str:
        """The web UI form's host for a test, without the credentials it carries (kept as
        ``_take_credentials`` keeps ``--host``'s), before Locust holds or answers it."""
        bare = run_state(environment).take_credentials(host) or ""
        vars(_options(environment))[CREDENTIALS_OPTION] = dict(run_state(environment).credentials)
        return bare

    def _form_values(self, environment: Environment) -> dict[str, Any]:
        """What the web UI's form shows for an option left empty: the value the scenario runs."""
        as_given = copy.copy(_options(environment))
        as_given.host = self._given_host  # the form's host field is a test's target, not --host
        return self.scenario.form_values(as_given)

    def _settings(self, environment: Environment) -> RunSettings:
        """The settings of the test under way, as computed at its start (at init before any test)."""
        settings = run_state(environment).settings
        assert settings is not None, "the run's settings are computed at init"
        return settings

    def _show_in_web_tab(self, environment: Environment, run: RunDir) -> None:
        """The web UI's tab follows the test starting, judged by this run's gates."""
        if self._web_tab is None:
            return
        options = _options(environment)
        settings = self._settings(environment)
        gates = self.scenario.gate_list(settings, options.harness_lag_limit_ms)
        shown = {**recorded_settings(settings), "max_unjudged_share": options.max_unjudged_share}
        self._web_tab.show(run, gates, shown, self.scenario.point_of(settings))

    def _scrape_server_metrics(self, environment: Environment, run: RunDir) -> ServerMetricsScraper:
        """Start scraping the server itself for this test: the bundled one, else ``--host`` (never a proxy)."""
        options = _options(environment)
        bundled = self._stack.server_url if self._stack is not None else None
        url = bundled or base_url(options.host)[0]
        scraper = ServerMetricsScraper(
            url,
            run.server_metrics,
            options.server_metrics_interval,
            options.flush_interval,
            run_state(environment).headers_for(url) or None,
        )
        scraper.start()
        return scraper

    def _next_run_dir(self, report_dir: str) -> RunDir:
        """The directory the soak job made for this run (``SSE_SOAK_RUN_DIR``, its first test only),
        else a new one under ``report_dir``."""
        given = os.environ.pop(RUN_DIR_ENV, None)
        return RunDir(given) if given else RunDir.create(report_dir, self.name)

    def _manifest(self, environment: Environment) -> Manifest:
        settings = self._settings(environment)
        gates = self.scenario.gate_list(settings, _options(environment).harness_lag_limit_ms)
        services = [] if self._stack is None else [Service(s.name, s.url, s.pid) for s in self._stack.services]
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        specs = [gate.spec() for gate in gates]
        return Manifest(
            self.name,
            started,
            recorded_settings(settings),
            specs,
            services,
            self._role.workers(),
            versions(),
            self.scenario.point_of(settings),
            gate_sources(gates),
        )

    def _prompt_sizing(self, environment: Environment) -> str | None:
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

    def _on_test_stopping(self, environment: Environment, **_: Any) -> None:
        if self._test is not None and self._test.stopping_at is None:
            self._test.stopping_at = time.monotonic()
        run_state(environment).stop_slot_holders()  # its closing line, before the gates'
        _close_arrivals(run_state(environment))

    def _freeze_users_as_they_start(self, environment: Environment) -> None:
        if self._freezer is not None:
            self._freezer.kill(block=False)
        runner = environment.runner
        if runner is not None:
            self._freezer = gevent.spawn(freeze_users_as_they_start, lambda: runner.user_count)

    def _on_test_stop(self, environment: Environment, **_: Any) -> None:
        if self._freezer is not None:
            self._freezer.kill(block=False)
            self._freezer = None
        if self._role.leads:
            self._judge_test(environment)

    def _judge_test(self, environment: Environment) -> None:
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
            self._stop_gate_watch()  # the verdict's states replace it
            if test.scraper is not None:
                test.scraper.stop()  # its last rows written before the judging reads them
            self._write_report(environment, test)
        finally:
            self._stop_gate_watch()
            self._collector.end()
            if test.lock is not None:
                test.lock.release()  # judged: a reader (``report``) may take the directory now
            test.judged.set()
            if self._web_tab is not None:
                self._web_tab.judged()
            self._guard.release()

    def _on_quitting(self, environment: Environment, **_: Any) -> None:
        """Locust is quitting: end the test under way (its rows, its verdict) and the stack, once."""
        if self._quitting:
            self._quit_done.wait()
            return
        self._quitting = self._guard.quitting = True
        try:
            if self._role.leads:
                self._end_test(environment)
            else:
                assert self._collector is not None
                self._collector.stop_and_ship()
            if self._collector is not None:
                self._collector.stop()
            run_state(environment).lag.stop()
        finally:
            self._stop_stack()
            self._quit_done.set()

    def _on_quit(self, **_: Any) -> None:
        """Locust printed its final tables and is about to exit: the held closing blocks, then the
        signal handlers as they were, then (``--live-metrics-linger``) a last scrape of the live metrics."""
        final = self._live.generated if self._live is not None else 0  # a scrape once the verdict is said reads it
        try:
            self._say_closing()
        finally:
            self._guard.restore()
        self._linger_for_last_scrape(final)

    def _end_test(self, environment: Environment) -> None:
        test = self._test
        if test is None or test.judged.is_set():
            return  # no test ever started (web UI), or it is judged already
        runner = environment.runner
        assert runner is not None
        if runner.state in (STATE_SPAWNING, STATE_RUNNING):
            runner.stop()  # fires test_stop, which judges the test
        elif not test.judging:
            test.judged.wait(STOP_WAIT_S)  # a stop under way elsewhere fires test_stop when done
        self._judge_test(environment)  # waits for the judging under way, or judges if none came

    def _write_report(self, environment: Environment, test: _Test) -> None:
        run = test.writer.run
        record = RunRecord(run)
        ended, interrupted = test.how_it_ended(self._guard.received)
        if self._death is not None and test.started <= self._death[1] <= (test.stopping_at or self._death[1]):
            ended = interrupted = ended_by_a_death(test.started, self._death, test.duration_s)
        options = _options(environment)
        prompt_sizing = self._prompt_sizing(environment)
        closing: list[str] = []  # the test's closing block: said once all is recorded (``_close``)
        with self._guard.deferred():  # the summary and the exit code are never cut
            record.read_every_frame()  # the report shows every frame: one read of the file, not three
            settings = _with_interval_inferred(self._settings(environment), record)
            settings_recorded = {
                **recorded_settings(settings),
                "prompt_sizing": prompt_sizing,
                "max_line_bytes": options.max_line_bytes,
                "max_unjudged_share": options.max_unjudged_share,
            }
            gates = self.scenario.gate_list(settings, options.harness_lag_limit_ms)
            told = JudgeOptions(
                gates,
                scenario=self.name,
                settings=settings_recorded,
                frame_sample_rate=options.frame_sample_rate,
                ended=ended,
                interrupted=interrupted,
                server_metrics_unavailable=test.server_metrics_unavailable,
                point=self.scenario.point_of(settings),
                lost_rows=self._collector.lost if self._collector is not None else None,
                live=LiveCounts(locust_counted(environment), test.writer.rows_unwritable + test.writer.rows_pending),
            )
            summary = judge(record, told, html=False)
            if self._live is not None:
                self._live.figures.set_gates(gate_states(summary.gates))
            closing += summary.console_lines()
            paced = pacing_line(paced_answers(record.requests))
            if paced is not None:
                closing.append(paced)
            if test.writer.rows_unwritable or test.writer.rows_pending:
                closing.append(
                    f"sse-soak: {test.writer.rows_unwritable} rows kept as text in {UNWRITABLE_ROWS} and "
                    f"{test.writer.rows_pending} rows not written (the disk refused them): not judged"
                )
            closing += [f"ended: {ended}", summary.verdict_line()]
            if summary.unwritten is not None:
                closing.append(keep_elsewhere(run, summary))
                environment.process_exit_code = summary.exit_code  # the record is incomplete, whatever the verdict
            elif not summary.passed and environment.process_exit_code in (None, 0, INCONCLUSIVE_EXIT_CODE):
                environment.process_exit_code = summary.exit_code  # a FAIL outweighs an inconclusive test
        if summary.unwritten is None:
            try:
                with self._guard.interruptible():  # a second Ctrl-C may cut the HTML, nothing else
                    write_html_files(record, summary)
            except KeyboardInterrupt:
                again = f"python -m loadtests report {run}"
                closing.append(f"sse-soak: report.html was not written (interrupted); {again} writes it")
            except OSError as exc:  # the disk filled up after the summary
                closing.append(f"sse-soak: report.html was not written in {run}: {exc.strerror or exc}")
                environment.process_exit_code = UNWRITTEN_EXIT_CODE
        closing.append(f"report: {run}")
        self._close(environment, closing)

    def _close(self, environment: Environment, closing: list[str]) -> None:
        """Say a judged test's closing block: now, unless Locust quits after this test and prints
        its final tables on the way (headless; the web UI with ``--autoquit`` after ``-t``; any test
        judged while quitting): then at ``quit``, after the tables, so the verdict is the last thing
        a terminal or a CI log shows."""
        self._closing.append(closing)
        options = _options(environment)
        autoquits = getattr(options, "autostart", False) and getattr(options, "autoquit", -1) != -1 and options.run_time
        if not (self._quitting or getattr(options, "headless", False) or autoquits):
            self._say_closing()

    def _say_closing(self) -> None:
        """Say every closing block not said yet, once each. Everything in them is recorded already:
        an output that is gone (a closed pipe) loses only these lines."""
        while self._closing:
            lines = self._closing.pop(0)
            try:
                for line in lines:
                    say(line)
            except OSError:
                self._closing.clear()


def locust_counted(environment: Environment) -> int:
    """The run's requests Locust's statistics counted in this test (its users' requests, never
    another request type a locustfile may add); on a master, as its workers last reported them."""
    return sum(entry.num_requests for (_, method), entry in environment.stats.entries.items() if method == REQUEST_TYPE)


def _read_streams_as_told(environment: Environment) -> None:
    """The options by which this process's users read and record a stream, as they stand: at init,
    and again as each test starts, where the web UI's form may have changed them (``Option.form``).
    Every process applies them: one alone, the master, and each worker, whose options come from
    its spawn message (the timing resolution its raw bodies are read at, ``BodyMux.set_resolution``)."""
    options = _options(environment)
    state = run_state(environment)
    state.client_idle_timeout = options.client_idle_timeout
    state.stream_deadline = options.stream_deadline
    state.frame_sample_rate = options.frame_sample_rate
    state.max_line_bytes = options.max_line_bytes
    state.max_slot_holders = options.max_slot_holders
    state.read_server_gauges = not options.no_server_metrics
    body_mux().set_resolution((getattr(options, "timing_resolution_ms", None) or 0.0) / 1000.0)
    for user_class in environment.user_classes:
        if issubclass(user_class, FastHttpUser):
            user_class.network_timeout = options.client_idle_timeout


def _trust_as_told(environment: Environment, role: Role) -> None:
    """Every client of this process trusts what ``--ca-cert`` and ``--insecure`` say (``loadtests.client.tls``);
    ``--insecure`` is said loudly, once, by the process that leads the run."""
    options = _options(environment)
    try:
        tls.configure(options.ca_cert, options.insecure)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"--ca-cert {options.ca_cert}: not a PEM file of certificates ({exc})") from None
    if options.insecure and role.leads:
        print(tls.INSECURE_WARNING, file=sys.stderr, flush=True)
