"""``python -m loadtests <command>``: the harness's command line.

Commands: ``soak`` (the nightly soak job), ``proxy`` (the embedded reverse proxy with nginx's
read-timeout semantics), ``report`` (rebuild a run's summary and HTML report from its parquet
files; exit 1 unless the verdict is PASS), ``compare`` (base run against new run; exit 1 on
regression). Also installed as the ``sse-soak`` command. Bad input exits 2 with one line naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests import compare as compare_module
from loadtests.proxy import ProxySettings, serve

_THRESHOLDS = [field.name for field in dataclasses.fields(compare_module.Thresholds)]


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m loadtests", description="sse-soak harness commands.")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    proxy = commands.add_parser(
        "proxy",
        help="run the embedded reverse proxy (nginx proxy_read_timeout semantics)",
        description="Reverse proxy that cuts streams silent for longer than --read-timeout: 504 before the "
        "response headers, a connection closed without the final chunk after them. No buffering.",
    )
    proxy.add_argument("--listen", type=_host_port, default=("127.0.0.1", 0),
                       help="HOST:PORT to listen on; port 0 picks a free one (default 127.0.0.1:0)")  # fmt: skip
    proxy.add_argument("--upstream", required=True, help="base URL of the server to proxy, e.g. http://127.0.0.1:8000")
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
        help="compare two runs side by side; exit 1 when the new one regressed",
        description=compare_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("base", help="the base run: a run directory or its summary.json")
    compare.add_argument("new", help="the new run: a run directory or its summary.json")
    defaults = compare_module.Thresholds()
    for name in _THRESHOLDS:
        compare.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name),
                             help=f"(default {getattr(defaults, name):g})")  # fmt: skip
    _add_soak_parser(commands)
    return root


def _duration(text: str) -> float:
    from loadtests.soak import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_soak_parser(commands: Any) -> None:
    from loadtests.drift import DriftLimits
    from loadtests.soak import DEFAULT_SCENARIO

    soak = commands.add_parser(
        "soak",
        help="run the nightly soak job: a long run with progress, checkpoints, drift gates and a baseline verdict",
        description="Runs a scenario headless for --duration, shows progress, checkpoints summary.json, judges "
        "drift between windows and, with --baseline, regression against a previous run. The verdict is the last "
        "line and the exit code. Arguments after -- go to locust unchanged.",
    )
    limits = DriftLimits()
    soak.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="locustfile (default scenarios/soak.py)")
    soak.add_argument("--duration", type=_duration, default=300.0, help="e.g. 90s, 20m, 8h, 1h30m (default 5m)")
    soak.add_argument("--users", type=int, default=12, help="concurrent users (default 12)")
    soak.add_argument("--spawn-rate", type=float, default=12.0, help="users started per second (default 12)")
    soak.add_argument("--processes", type=int, default=None, help="Locust worker processes (default: one process)")
    soak.add_argument("--host", default=None, help="target server (default: the scenario's bundled stack)")
    soak.add_argument("--report-dir", default="reports", help="where the run directory goes (default reports)")
    soak.add_argument("--baseline", default=None, help="a previous run directory or summary.json to compare with")
    soak.add_argument(
        "--frame-sample-rate",
        type=float,
        default=0.1,
        help="share of ok streams whose frames are kept; failures always keep theirs (default 0.1)",
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
    soak.add_argument("--windows", type=int, default=limits.windows, help=f"drift windows (default {limits.windows})")
    soak.add_argument(
        "--max-memory-growth",
        type=float,
        default=limits.max_memory_growth,
        help=f"steady memory growth allowed, second to last window (default {limits.max_memory_growth:g})",
    )
    soak.add_argument(
        "--max-latency-drift",
        type=float,
        default=limits.max_latency_drift,
        help=f"TTFT p50 growth allowed, first to last window (default {limits.max_latency_drift:g})",
    )
    soak.add_argument("locust_args", nargs="*", help="after --: extra locust options, e.g. -- --proxy nginx")


def _run_soak(options: argparse.Namespace) -> int:
    from dataclasses import replace

    from loadtests.drift import DriftLimits
    from loadtests.soak import Soak, SoakPlan

    if not options.scenario.is_file():
        sys.exit(f"python -m loadtests soak: no scenario file {options.scenario}")
    if options.users < 1 or options.windows < 3 or not 0 <= options.frame_sample_rate <= 1:
        sys.exit("python -m loadtests soak: --users must be >= 1, --windows >= 3, --frame-sample-rate in 0..1")
    limits = replace(DriftLimits(), windows=options.windows, max_memory_growth=options.max_memory_growth,
                     max_latency_drift=options.max_latency_drift)  # fmt: skip
    plan = SoakPlan(
        scenario=options.scenario, duration_s=options.duration, users=options.users, spawn_rate=options.spawn_rate,
        processes=options.processes, host=options.host, report_dir=options.report_dir, baseline=options.baseline,
        progress_interval=options.progress_interval, checkpoint_interval=options.checkpoint_interval, limits=limits,
        locust_args=["--frame-sample-rate", f"{options.frame_sample_rate:g}", *options.locust_args],
    )  # fmt: skip
    return Soak(plan).run()


def _run_compare(options: argparse.Namespace) -> int:
    try:
        base, new = compare_module.load_summary(options.base), compare_module.load_summary(options.new)
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"python -m loadtests compare: {exc}")
    limits = compare_module.Thresholds(**{name: getattr(options, name) for name in _THRESHOLDS})
    rows = compare_module.compare(base, new, limits)
    print(compare_module.render(rows, options.base, options.new))
    regressions = [row.metric for row in rows if row.regressed]
    print(f"compare: {'REGRESSION: ' + ', '.join(regressions) if regressions else 'OK, no regression'}")
    return 1 if regressions else 0


def _run_report(options: argparse.Namespace) -> int:
    """Re-judge a run directory: exit 0 only on a PASS; a run that never wrote its summary (killed,
    or still going) is judged as interrupted, so FAIL; not a run directory (or unreadable): 2."""
    from loadtests.rebuild import previous_summary, rebuild_report, unfinished  # pandas, matplotlib: only here
    from loadtests.report import verdict_line

    try:
        summary = rebuild_report(options.run_dir, interrupted=unfinished(previous_summary(options.run_dir)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"python -m loadtests report: {exc}", file=sys.stderr)
        return 2
    print(verdict_line(summary))
    print(f"report: {options.run_dir}")
    return 0 if summary["passed"] else 1


def _run_proxy(options: argparse.Namespace) -> None:
    host, port = options.listen
    settings = ProxySettings(host, port, options.upstream, options.read_timeout)
    try:
        settings.upstream_address  # noqa: B018 - validates the URL before we listen
    except ValueError as exc:
        sys.exit(f"python -m loadtests proxy: {exc}")

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
        except OSError as exc:
            sys.exit(f"python -m loadtests proxy: cannot listen on {host}:{port}: {exc.strerror}")

    asyncio.run(main())


def main(argv: Sequence[str] | None = None) -> None:
    options = parser().parse_args(argv)
    if options.command == "proxy":
        _run_proxy(options)
    elif options.command == "report":
        sys.exit(_run_report(options))
    elif options.command == "compare":
        sys.exit(_run_compare(options))
    elif options.command == "soak":
        sys.exit(_run_soak(options))


if __name__ == "__main__":
    main()
