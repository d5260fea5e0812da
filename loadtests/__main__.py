"""``python -m loadtests <command>``: the harness's command line.

Commands: ``proxy`` (the embedded reverse proxy with nginx's read-timeout semantics).
Bad input exits 2 with one line naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

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
    return root


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


if __name__ == "__main__":
    main()
