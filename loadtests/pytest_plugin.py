"""sse-soak in pytest: registered through the ``pytest11`` entry point, so installing sse-soak is enough.

It adds the ``--sse-soak-*`` options, the ``smoke`` marker and the session fixture ``sse_soak``,
whose ``run(scenario, **options)`` runs a scenario in a child process (``loadtests.launch``:
Locust and gevent stay out of pytest's process) and returns the judged run::

    def test_mixed_truncation_never_500s(sse_soak):
        run = sse_soak.run("mixed_truncate", users=16, duration=30)
        run.assert_passed()  # fails with the run directory, the failing gate lines, the worst streams

``pytest --pyargs loadtests.smoke`` runs every shipped scenario with one test per gate
(``loadtests.smoke``). Without ``--sse-soak-host`` each run starts the bundled server with its
scenario's profile.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from loadtests import _gevent_compat, launch
from loadtests.run_dir import Manifest
from loadtests.run_options import target_url

_gevent_compat.unhide_trio()  # this process never imports Locust

DEFAULT_DURATION_S = 10
"""Long enough for the slowest shipped scenario (proxy_timeout: 5 s to the first token) to finish streams."""
DEFAULT_USERS = 4
PROXIES = ("none", "embedded", "nginx")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sse-soak", "sse-soak: scenario runs against an OpenAI-compatible streaming server")
    group.addoption(
        "--sse-soak-host",
        metavar="URL",
        type=target_url,
        default=None,
        help="the server under test, e.g. http://127.0.0.1:8000 (default: each run starts the bundled server "
        "with its scenario's profile)",
    )
    group.addoption(
        "--sse-soak-api-key",
        metavar="KEY",
        default=None,
        help="bearer token for the server (default: $SSE_SOAK_API_KEY); passed to each run in its environment",
    )
    group.addoption(
        "--sse-soak-model", metavar="NAME", default=None, help="model to request (default: the first in /v1/models)"
    )
    group.addoption(
        "--sse-soak-duration",
        metavar="SECONDS",
        type=_at_least_one,
        default=DEFAULT_DURATION_S,
        help=f"how long each run sends load, whole seconds >= 1 (default {DEFAULT_DURATION_S})",
    )
    group.addoption(
        "--sse-soak-users",
        metavar="N",
        type=_at_least_one,
        default=DEFAULT_USERS,
        help=f"concurrent users of each run, >= 1 (default {DEFAULT_USERS})",
    )
    group.addoption(
        "--sse-soak-report-dir",
        metavar="DIR",
        default="reports",
        help="where run directories go, relative to where pytest was started (default reports)",
    )
    group.addoption(
        "--sse-soak-proxy",
        choices=PROXIES,
        default=None,
        help="reverse proxy the run starts in front of the server (default: each scenario's own)",
    )


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "smoke: runs a real scenario end to end for a few seconds")


@dataclasses.dataclass(frozen=True)
class SoakRunner:
    """Runs scenarios with the session's ``--sse-soak-*`` options as defaults."""

    defaults: launch.Launch
    """The options every run starts from (its scenario is a placeholder)."""

    @classmethod
    def from_config(cls, config: pytest.Config) -> SoakRunner:
        report_dir = config.invocation_params.dir / config.getoption("sse_soak_report_dir")
        defaults = launch.Launch(
            scenario="",
            users=config.getoption("sse_soak_users"),
            duration_s=config.getoption("sse_soak_duration"),
            host=config.getoption("sse_soak_host"),
            api_key=config.getoption("sse_soak_api_key") or os.environ.get("SSE_SOAK_API_KEY"),
            model=config.getoption("sse_soak_model"),
            proxy=config.getoption("sse_soak_proxy"),
            report_dir=Path(report_dir),
        )
        return cls(defaults)

    def launch(self, scenario: str | Path, **options: Any) -> launch.Launch:
        """The run of ``scenario`` (a shipped name or a locustfile) with these options over the
        session's: ``users``, ``duration`` (seconds), ``spawn_rate``, ``host``, ``api_key``,
        ``model``, ``proxy``, ``report_dir``, and any other option of the scenario or of Locust as
        a keyword (``server_args="--seed 3"``, ``processes=2``, ``keep_alive_interval=0.5``)."""
        named = {"duration_s": options.pop("duration", self.defaults.duration_s)}
        for name in ("users", "spawn_rate", "host", "api_key", "model", "proxy", "report_dir"):
            if name in options:
                named[name] = options.pop(name)
        return dataclasses.replace(self.defaults, scenario=scenario, options=options, **named)

    def run(self, scenario: str | Path, **options: Any) -> launch.ScenarioRun:
        """Run ``scenario`` to its end (see ``launch``) and return the judged run: ``summary``,
        ``gates``, ``gate(name)``, ``requests`` and ``frames`` (DataFrames), ``run_dir``,
        ``passed``, ``explain()`` and ``assert_passed()``."""
        return launch.run(self.launch(scenario, **options))

    def plan(self, scenario: str | Path, **options: Any) -> Manifest:
        """The settings and gates ``run`` would use, without running anything."""
        return launch.plan(self.launch(scenario, **options))


@pytest.fixture(scope="session")
def sse_soak(pytestconfig: pytest.Config) -> SoakRunner:
    """Runs sse-soak scenarios in child processes; ``sse_soak.run("mixed_truncate")``."""
    return SoakRunner.from_config(pytestconfig)
