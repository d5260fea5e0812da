"""Free loopback ports for what a run starts (servers, proxies, a master's workers). Standard
library only: ``loadtests._real_vllm`` may use it without the harness's dependencies."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago (the kernel's pick); whoever binds it next wins."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def own_master_port(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """With ``--processes``, the master binds, and its forked workers reach, one port of this run's
    own: a free one, or the one given by either ``--master-port`` or ``--master-bind-port`` (Locust's
    fixed 5557 made a second run on the box die, or its workers join the first). Locust forks its
    workers after parsing, so they inherit the port."""
    if not has_flag(argv, "--processes"):
        return
    given = flag_value(argv, "--master-port") or flag_value(argv, "--master-bind-port")
    port = int(given) if given is not None and given.isdigit() else free_loopback_port()
    parser.set_defaults(master_port=port, master_bind_port=port)


def has_flag(argv: Sequence[str], flag: str) -> bool:
    """``flag`` is on a command line (``--flag V`` or ``--flag=V``)."""
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` on a command line (``--flag V`` or ``--flag=V``; the last one given)."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value
