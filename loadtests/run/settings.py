"""A run's settings from its options: the one place a ``Scenario`` (a frozen declaration) and the
parsed options become the ``RunSettings`` a test runs with, and the form they are recorded in.

The run controller computes them once per test (at init, and again as each test starts, when the
web UI's form may have changed the options) and keeps them on the run's state
(``loadtests.load.state.RunState.settings``); everything else reads them there. They depend on the
server the run starts, so this module may read ``services`` (``VllmProfile``, ``split_api_key``);
``loadtests.declare.scenario`` never does.
"""

from __future__ import annotations

import dataclasses
import itertools
import shlex
from argparse import Namespace
from collections.abc import Sequence
from typing import Any

from loadtests.base.ports import LOOPBACK
from loadtests.base.safe_text import redacted_url
from loadtests.client.raw_body import READ_PATH
from loadtests.declare.options import keep_alive_interval
from loadtests.declare.scenario import REDACTED, RunSettings, Scenario
from loadtests.errors import UsageError
from loadtests.judge.gates import BUNDLED, GIVEN, REAL_VLLM, UNKNOWN
from loadtests.load.slot_holders import Found
from loadtests.services import proxies
from loadtests.services.real_vllm import DEFAULT_RELEASE, VllmProfile
from loadtests.services.stack import split_api_key

__all__ = ["api_key_in_server_args", "recorded_server_args", "recorded_settings", "run_settings"]


def run_settings(scenario: Scenario, options: Namespace) -> RunSettings:
    """The run's settings from its parsed options: its stack (``_stack_settings``), the TLS trust
    of its clients, the timing resolution they read at and how this process reads raw bodies."""
    return dataclasses.replace(
        _stack_settings(scenario, options),
        ca_cert=getattr(options, "ca_cert", None),
        insecure=bool(getattr(options, "insecure", False)),
        timing_resolution_ms=float(getattr(options, "timing_resolution_ms", None) or 0.0),
        read_path=READ_PATH,
    )


def _check_server_bind(bind: str, host: str | None, proxy: str) -> None:
    """``--server-bind`` away from loopback binds the server the run starts, bundled or real vLLM (and
    the embedded proxy): a usage error with anything else that would leave it meaningless or
    unreachable."""
    if host is not None:
        raise UsageError(f"--server-bind {bind} binds the server the run starts; with --host it starts none")
    reachable = [kind.name for kind in proxies.kinds() if not kind.loopback_only]
    if proxy not in reachable:
        raise UsageError(
            f"--server-bind {bind}: --proxy {proxy} listens on loopback only, out of the workers' reach: "
            f"give --proxy {' or '.join(reachable)}"
        )


def _last_keep_alive_interval(server_args: Sequence[str]) -> float:
    """What ``--sse-keep-alive-interval`` the server will run with: the last one given, else 0 (off);
    0 also for any value not in (0, inf), which the server reads as off."""
    given = [value for flag, value in itertools.pairwise(server_args) if flag == "--sse-keep-alive-interval"]
    try:
        return keep_alive_interval(float(given[-1])) if given else 0.0
    except ValueError:
        return 0.0  # the server will refuse the value itself, with its own message


def _stack_settings(scenario: Scenario, options: Namespace) -> RunSettings:
    """The run's stack settings from its parsed options. The bundled server runs the profile, then
    ``--server-args``, then the keep-alive interval (``--keep-alive-interval``, else the
    scenario's own); its interval is the last one given. A server given by ``--host`` has the
    ``--keep-alive-interval`` given, else an unknown one, and no arguments of ours."""
    given = getattr(options, "keep_alive_interval", None)
    if given is not None:
        given = keep_alive_interval(given)
    open_loop = None
    if options.rate is not None:
        open_loop = {
            "rate": options.rate,
            "arrival": options.arrival,
            "seed": options.arrival_seed,
            "max_in_flight": options.max_in_flight,
        }
    shape = (scenario.proxy_of(options), options.proxy_read_timeout)
    server = getattr(options, "server", None) or "bundled"
    release = getattr(options, "vllm_release", None)
    if release is not None and server != "vllm":
        raise UsageError(
            f"--vllm-release {release} names the release that --server vllm starts: give --server vllm, or leave it out"
        )
    bind = getattr(options, "server_bind", None) or LOOPBACK
    if bind != LOOPBACK:
        _check_server_bind(bind, options.host, shape[0])
    if options.host is not None:
        if server != "bundled":
            raise UsageError(
                f"--server {server} starts a server and --host targets one already running: give one of them"
            )
        source = UNKNOWN if given is None else GIVEN
        return RunSettings(*shape, given, (), options.host, open_loop, source)
    server_args = [*scenario.profile, *shlex.split(options.server_args)]
    if bind != LOOPBACK:
        server_args += ["--host", bind]
    interval = given if given is not None else scenario.keep_alive_interval
    if interval is not None:
        server_args += ["--sse-keep-alive-interval", repr(keep_alive_interval(interval))]
    if server == "vllm":
        whole = float(VllmProfile.of(server_args).keep_alive_interval)
        return RunSettings(
            *shape,
            whole,
            tuple(server_args),
            None,
            open_loop,
            REAL_VLLM,
            server,
            vllm_release=release or DEFAULT_RELEASE,
        )
    interval = _last_keep_alive_interval(server_args)
    return RunSettings(*shape, interval, tuple(server_args), None, open_loop, BUNDLED)


def recorded_settings(settings: RunSettings) -> dict[str, Any]:
    """The settings as recorded in summary.json and shown in report.html: the host's password and
    query values redacted (``redacted_url``), and ``server_args`` those of the server the run
    started (``recorded_server_args``)."""
    host = None if settings.host is None else redacted_url(settings.host)
    return {**dataclasses.asdict(settings), "server_args": recorded_server_args(settings), "host": host}


def recorded_server_args(settings: RunSettings) -> list[str] | None:
    """Only what the server the run started ran with, never another's: the bundled server's
    arguments (a key redacted); real vLLM's ``vllm serve`` options (``VllmServer.arguments``,
    not the bundled profile's); None with ``--host``, as the run started no server."""
    if settings.starts_server is None:
        return None
    if settings.starts_server == "vllm":
        return VllmProfile.of(settings.server_args).server().arguments()
    args, key = split_api_key(settings.server_args)
    return [*args, "--api-key", REDACTED] if key else args


def known_concurrency(settings: RunSettings) -> Found | None:
    """How many requests the server runs at once, when the run started real vLLM with a
    ``--max-num-seqs`` (the slot holders need no search); None otherwise (the bundled server makes
    silence by its profile, and a ``--host`` server's concurrency is its own)."""
    if settings.starts_server != "vllm":
        return None
    max_num_seqs = VllmProfile.of(settings.server_args).settings.get("max_num_seqs")
    if not isinstance(max_num_seqs, int):
        return None
    return Found(max_num_seqs, f"--max-num-seqs {max_num_seqs}, which the run started real vLLM with")


def api_key_in_server_args(settings: RunSettings) -> str | None:
    """The key the bundled server was given in its arguments (``--api-key``), if any."""
    return split_api_key(settings.server_args)[1]
