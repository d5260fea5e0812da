"""``python -m loadtests <command>``: the harness's command line.

Commands: ``scenarios`` (list the shipped scenarios), ``run`` (run one with Locust), ``soak`` (the
nightly soak job), ``proxy`` (the embedded reverse proxy with nginx's
read-timeout semantics), ``report`` (rebuild a run's summary and HTML report from its parquet
files; exit 1 unless the verdict is PASS), ``compare`` (base run against new run; exit 1 on
regression). Also installed as the ``sse-soak`` command. Bad input exits 2 with one line naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import re
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from loadtests import compare as compare_module
from loadtests.proxy import ProxySettings, serve
from loadtests.run_options import http_url, target_url

_THRESHOLDS = [field.name for field in dataclasses.fields(compare_module.Thresholds)]
_THRESHOLD_KIND = {"max_keepalive_drop": "a share from 0 to 1 (0.5 = half)"}
USAGE_ERROR = 2  # 1 is a failed verdict or a regression


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (``PROG: --option: what is wrong``), exit 2, no usage block.
    Options are never abbreviated: ``--max-latency`` must not silently mean ``--max-latency-increase``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: {message.removeprefix('argument ')}\n")


def _refuse(command: str, message: str) -> NoReturn:
    """Bad input found after parsing (files, directories): the same one line and exit 2."""
    print(f"python -m loadtests {command}: {message}", file=sys.stderr, flush=True)
    sys.exit(USAGE_ERROR)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, e.g. 127.0.0.1:8080, got {text!r}")
    if not re.fullmatch(r"\d{1,5}", port, re.ASCII) or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"the port of {text!r} must be a number from 0 to 65535 (0 picks a free one)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with an IPv6 host in brackets, e.g. [::1]:8080, got {text!r}"
        )
    return host, int(port)


def _positive_seconds(text: str) -> float:
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds, got {text!r}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number, got {text!r}")
    return value


def _share(text: str) -> float:
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


def _limit(text: str) -> float:
    value = _number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _at_least(minimum: int) -> Callable[[str], int]:
    def whole(text: str) -> int:
        if not re.fullmatch(r"\s*\+?\d+\s*", text, re.ASCII) or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return int(text)

    return whole


def _threshold(name: str) -> Callable[[str], float]:
    def threshold(text: str) -> float:
        value = _number(text)
        problem = compare_module.threshold_problem(name, value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    return threshold


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="python -m loadtests", description="sse-soak harness commands.")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "scenarios",
        help="list the scenarios that ship with sse-soak: name, locustfile and what it runs",
        description="Lists each shipped scenario's name, its locustfile (in the installed package, or scenarios/ in "
        "a clone) and the first line of its docstring. Run one with: run NAME [locust options].",
    )
    run = commands.add_parser(
        "run",
        help="run a shipped scenario (by name) or a locustfile with Locust, e.g. run mixed_truncate --headless -t 20s",
        description="Runs Locust on the scenario: python -m locust -f <its locustfile> [locust options], with Locust's "
        "exit code. Every option after the name goes to Locust unchanged (the web UI without --headless).",
    )
    run.add_argument("scenario", type=_scenario, help="a shipped scenario's name (see: scenarios) or a locustfile path")
    run.add_argument("locust_args", nargs=argparse.REMAINDER, help="Locust's options and the scenario's")
    proxy = commands.add_parser(
        "proxy",
        help="run the embedded reverse proxy (nginx proxy_read_timeout semantics)",
        description="Reverse proxy that cuts streams silent for longer than --read-timeout: 504 before the "
        "response headers, a connection closed without the final chunk after them. No buffering.",
    )
    proxy.add_argument(
        "--listen",
        type=_host_port,
        default=("127.0.0.1", 0),
        help="HOST:PORT to listen on; port 0 picks a free one (default 127.0.0.1:0)",
    )
    proxy.add_argument(
        "--upstream", required=True, type=http_url, help="base URL of the server to proxy, e.g. http://127.0.0.1:8000"
    )
    proxy.add_argument(
        "--read-timeout",
        type=_positive_seconds,
        default=60.0,
        help="longest silence from upstream in seconds, like nginx's proxy_read_timeout (default 60)",
    )
    report = commands.add_parser("report", help="rebuild summary.json and report.html of a run from its parquet files")
    report.add_argument("run_dir", help="a run directory (it holds requests.parquet and summary.json)")
    compare = commands.add_parser(
        "compare",
        help="compare two runs side by side; exit 1 when the new one regressed, 2 on bad input",
        description=compare_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("base", help="the base run: a run directory or its summary.json")
    compare.add_argument("new", help="the new run: a run directory or its summary.json")
    defaults = compare_module.Thresholds()
    for name in _THRESHOLDS:
        compare.add_argument(
            "--" + name.replace("_", "-"),
            type=_threshold(name),
            default=getattr(defaults, name),
            help=f"{_THRESHOLD_KIND.get(name, 'a number >= 0')}, inf never flags (default {getattr(defaults, name):g})",
        )
    _add_soak_parser(commands)
    return root


def _scenario(text: str) -> Path:
    from loadtests.catalog import CatalogError, locate

    try:
        return locate(text)
    except CatalogError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> int:
    from loadtests.soak import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_soak_parser(commands: Any) -> None:
    soak = commands.add_parser(
        "soak",
        help="run the nightly soak job: a long run with progress, checkpoints, drift gates and a baseline verdict",
        description="Runs a scenario headless for --duration, shows progress, checkpoints summary.json, judges "
        "drift between windows and, with --baseline, regression against a previous run. The verdict is the last "
        "line and the exit code (0 pass, 1 fail); a bad option is one line and exit 2, before anything runs. "
        "Arguments after -- go to locust unchanged.",
    )
    _add_soak_load_options(soak)
    _add_soak_judging_options(soak)
    soak.add_argument("locust_args", nargs="*", help="after --: extra locust options, e.g. -- --proxy nginx")


def _add_soak_load_options(soak: Any) -> None:
    """What the soak runs, against what, and how hard."""
    from loadtests.soak import DEFAULT_SCENARIO

    soak.add_argument(
        "--scenario",
        type=_scenario,
        default=DEFAULT_SCENARIO,
        help="a shipped scenario's name or a locustfile path (default: soak)",
    )
    soak.add_argument(
        "--duration",
        type=_duration,
        default=300,
        help="e.g. 90s, 20m, 8h, 1h30m, 1.5h or plain seconds (default 5m). Whole seconds, at least "
        "1 s (Locust's -t resolution; it reads 0s as no limit): 0.4s or 1.5s is refused, never "
        "rounded, and so is an ambiguous string such as 1h2, 1h1h or 30m1h",
    )
    soak.add_argument("--users", type=_at_least(1), default=12, help="concurrent users, >= 1 (default 12)")
    soak.add_argument("--spawn-rate", type=_positive, default=12.0, help="users started per second, > 0 (default 12)")
    soak.add_argument(
        "--processes", type=_at_least(1), default=None, help="Locust worker processes, >= 1 (default: one process)"
    )
    soak.add_argument(
        "--host",
        type=target_url,
        default=None,
        help="target server, an http(s) URL (default: the scenario's bundled stack)",
    )
    soak.add_argument(
        "--rate",
        type=_positive,
        default=None,
        help="open loop: requests a second started on schedule whatever the server does (default: closed loop)",
    )
    soak.add_argument(
        "--arrival", choices=("poisson", "constant"), default="poisson", help="open loop: the schedule's spacing"
    )
    soak.add_argument(
        "--max-in-flight", type=_at_least(1), default=None, help="open loop: requests open at once (default: --users)"
    )


def _add_soak_judging_options(soak: Any) -> None:
    """What the soak writes, how often, and what its verdict compares."""
    from loadtests.drift import DriftLimits

    limits = DriftLimits()
    soak.add_argument(
        "--report-dir",
        default="reports",
        help="where the run directory goes: a writable directory, or one that can be created (default reports)",
    )
    soak.add_argument(
        "--baseline",
        default=None,
        help="a previous run directory or summary.json to compare with (checked before the run starts)",
    )
    soak.add_argument(
        "--frame-sample-rate",
        type=_share,
        default=0.1,
        help="share of ok streams whose frames are kept, 0 to 1; failures always keep theirs (default 0.1)",
    )
    soak.add_argument(
        "--progress-interval",
        type=_positive_seconds,
        default=None,
        help="seconds between progress lines (default 1 on a terminal, 10 otherwise)",
    )
    soak.add_argument(
        "--checkpoint-interval",
        type=_positive_seconds,
        default=60.0,
        help="seconds between rewrites of summary.json while running (default 60)",
    )
    soak.add_argument(
        "--windows", type=_at_least(3), default=limits.windows, help=f"drift windows, >= 3 (default {limits.windows})"
    )
    soak.add_argument(
        "--max-memory-growth",
        type=_limit,
        default=limits.max_memory_growth,
        help="steady memory growth allowed, second to last window, a finite number >= 0 "
        f"(default {limits.max_memory_growth:g})",
    )
    soak.add_argument(
        "--max-latency-drift",
        type=_limit,
        default=limits.max_latency_drift,
        help="TTFT p50 growth allowed, first to last window, a finite number >= 0 "
        f"(default {limits.max_latency_drift:g})",
    )


def _check_soak_files(options: argparse.Namespace) -> None:
    """What the parser cannot see: the report directory, the baseline. Checked before anything
    starts, and without writing anything."""
    from loadtests.run_dir import report_root_problem

    problem = report_root_problem(options.report_dir)
    if problem is not None:
        _refuse("soak", f"--report-dir {options.report_dir}: {problem}")
    if options.baseline is not None:
        from loadtests.summary import Summary, SummaryError

        try:
            Summary.load(options.baseline)
        except SummaryError as exc:
            _refuse("soak", f"--baseline {exc}")


def _run_soak(options: argparse.Namespace) -> int:
    from dataclasses import replace

    from loadtests.drift import DriftLimits
    from loadtests.soak import Soak, SoakPlan

    _check_soak_files(options)
    limits = replace(
        DriftLimits(),
        windows=options.windows,
        max_memory_growth=options.max_memory_growth,
        max_latency_drift=options.max_latency_drift,
    )
    plan = SoakPlan(
        scenario=options.scenario,
        duration_s=options.duration,
        users=options.users,
        spawn_rate=options.spawn_rate,
        processes=options.processes,
        host=options.host,
        report_dir=options.report_dir,
        baseline=options.baseline,
        progress_interval=options.progress_interval,
        checkpoint_interval=options.checkpoint_interval,
        limits=limits,
        locust_args=[
            "--frame-sample-rate",
            f"{options.frame_sample_rate:g}",
            *_open_loop_args(options),
            *options.locust_args,
        ],
    )
    return Soak(plan).run()


def _open_loop_args(options: argparse.Namespace) -> list[str]:
    """The soak's open-loop options, as the scenario takes them; ``--max-in-flight`` only with ``--rate``."""
    if options.rate is None:
        if options.max_in_flight is not None:
            _refuse("soak", "--max-in-flight limits an open-loop run: give --rate too")
        return []
    limit = [] if options.max_in_flight is None else [f"--max-in-flight={options.max_in_flight}"]
    return [f"--rate={options.rate:g}", f"--arrival={options.arrival}", *limit]


def _run_compare(options: argparse.Namespace) -> int:
    from loadtests.summary import Summary, SummaryError

    try:
        base, new = Summary.load(options.base), Summary.load(options.new)
    except SummaryError as exc:
        _refuse("compare", str(exc))
    limits = compare_module.Thresholds(**{name: getattr(options, name) for name in _THRESHOLDS})
    rows = compare_module.compare(base, new, limits)
    print(compare_module.render(rows, options.base, options.new))
    regressions = [row.metric for row in rows if row.regressed]
    print(f"compare: {'REGRESSION: ' + ', '.join(regressions) if regressions else 'OK, no regression'}")
    return 1 if regressions else 0


def _run_report(options: argparse.Namespace) -> int:
    """Re-judge a run directory: exit 0 only on a PASS; a run that never wrote its summary (killed,
    or still going) is judged as interrupted, so FAIL; not a run directory (or unreadable): 2."""
    from loadtests.judge import judge, previous_summary, unfinished  # pandas, matplotlib: only here
    from loadtests.run_dir import RunDir

    run = RunDir(options.run_dir)
    try:
        summary = judge(run, interrupted=unfinished(previous_summary(run)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"python -m loadtests report: {exc}", file=sys.stderr)
        return 2
    print(summary.verdict_line())
    print(f"report: {options.run_dir}")
    return 0 if summary.passed else 1


def _os_reason(exc: OSError) -> str:
    """``Address already in use``, not asyncio's sentence around it; a resolver's own words."""
    if isinstance(exc, socket.gaierror) or not exc.errno:
        return str(exc.strerror or exc)
    return os.strerror(exc.errno)


def _run_proxy(options: argparse.Namespace) -> None:
    host, port = options.listen
    settings = ProxySettings(host, port, options.upstream, options.read_timeout)
    refused: list[str] = []

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve(settings)
        except asyncio.CancelledError:
            pass
        except OSError as exc:  # address in use, not ours, a privileged port, a host that does not resolve
            refused.append(f"--listen {host}:{port}: cannot listen there ({_os_reason(exc)})")

    asyncio.run(main())
    if refused:
        _refuse("proxy", refused[0])


def _list_scenarios() -> None:
    from loadtests.catalog import shipped

    scenarios = shipped()
    width = max((len(scenario.name) for scenario in scenarios), default=0)
    for scenario in scenarios:
        print(f"{scenario.name:<{width}}  {scenario.path}\n{'':<{width}}  {scenario.summary}")


def _run_locust(options: argparse.Namespace) -> NoReturn:
    """Become Locust on the scenario: its signals, output and exit code are the command's own."""
    command = [sys.executable, "-m", "locust", "-f", str(options.scenario), *options.locust_args]
    sys.stdout.flush()
    os.execv(sys.executable, command)


def main(argv: Sequence[str] | None = None) -> None:
    options = parser().parse_args(argv)
    if options.command == "scenarios":
        _list_scenarios()
    elif options.command == "run":
        _run_locust(options)
    elif options.command == "proxy":
        _run_proxy(options)
    elif options.command == "report":
        sys.exit(_run_report(options))
    elif options.command == "compare":
        sys.exit(_run_compare(options))
    elif options.command == "soak":
        sys.exit(_run_soak(options))


if __name__ == "__main__":
    main()
