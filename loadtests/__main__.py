"""``python -m loadtests <command>``: the harness's command line.

Commands: ``proxy`` (the embedded reverse proxy with nginx's read-timeout semantics), ``report``
(rebuild a run's summary and HTML report from its parquet files), ``compare`` (base run against
new run; exit 1 on regression). Bad input exits 2 with one line naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from loadtests import compare as compare_module
from loadtests.proxy import ProxySettings, serve


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
    for name in ("max_500_rate_increase", "max_failure_rate_increase", "max_latency_increase", "max_keepalive_drop"):
        compare.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name),
                             help=f"(default {getattr(defaults, name):g})")  # fmt: skip
    return root


def _run_compare(options: argparse.Namespace) -> int:
    try:
        base, new = compare_module.load_summary(options.base), compare_module.load_summary(options.new)
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"python -m loadtests compare: {exc}")
    names = ("max_500_rate_increase", "max_failure_rate_increase", "max_latency_increase", "max_keepalive_drop")
    limits = compare_module.Thresholds(**{name: getattr(options, name) for name in names})
    rows = compare_module.compare(base, new, limits)
    print(compare_module.render(rows, options.base, options.new))
    regressions = [row.metric for row in rows if row.regressed]
    print(f"compare: {'REGRESSION: ' + ', '.join(regressions) if regressions else 'OK, no regression'}")
    return 1 if regressions else 0


def _run_report(options: argparse.Namespace) -> None:
    from loadtests.rebuild import rebuild_report  # pandas and matplotlib only for this command

    try:
        summary = rebuild_report(options.run_dir)
    except (OSError, ValueError, KeyError) as exc:
        sys.exit(f"python -m loadtests report: {exc}")
    print(f"verdict: {'PASS' if summary['passed'] else 'FAIL'}")
    print(f"report: {options.run_dir}")


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
        _run_report(options)
    elif options.command == "compare":
        sys.exit(_run_compare(options))


if __name__ == "__main__":
    main()
