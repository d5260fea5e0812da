"""Free ports and bind addresses for what a run starts (servers, proxies, a master's workers). Standard
library only: ``loadtests.services.real_vllm`` may use it without the harness's dependencies."""

from __future__ import annotations

import argparse
import ipaddress
import socket
from collections.abc import Sequence

LOOPBACK = "127.0.0.1"
"""Where every service a run starts listens unless ``--server-bind`` says otherwise."""


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago (the kernel's pick); whoever binds it next wins."""
    return free_port(LOOPBACK)


def free_port(address: str) -> int:
    """A TCP port free on ``address`` (an IP address of this host) a moment ago, as above."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


def bind_address_problem(value: str) -> str | None:
    """Why ``value`` cannot be where a server the run starts listens (None: it can): an IP address
    of this host is needed, and not the wildcard, which would say nothing of where workers reach it."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return f"must be an IP address of this host, got {value!r}"
    if address.is_unspecified:
        return f"must be the address the workers reach this host at, not the wildcard {value}"
    return None


def listen_address_problem(value: str) -> str | None:
    """Why ``value`` cannot be where a harness's own port listens (None: it can): an IP address,
    the wildcard included (a cluster's master in Kubernetes serves on 0.0.0.0)."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return f"must be an IP address (127.0.0.1, 0.0.0.0, ::1...), got {value!r}"
    return None


def http_url(address: str, port: int) -> str:
    """``http://address:port``, an IPv6 address in brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


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
