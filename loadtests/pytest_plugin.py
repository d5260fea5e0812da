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

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from loadtests.declare.options import Surface, add_pytest_options, on
from loadtests.launch import Launch, ScenarioRun, plan, run
from loadtests.load import gevent_compat as _gevent_compat
from loadtests.record.run_dir import Manifest

__all__ = ["SoakRunner", "pytest_addoption", "pytest_configure", "sse_soak"]

_gevent_compat.unhide()  # this process never imports Locust


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sse-soak", "sse-soak: scenario runs against an OpenAI-compatible streaming server")
    add_pytest_options(group)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "smoke: runs a real scenario end to end for a few seconds")


@dataclasses.dataclass(frozen=True)
class SoakRunner:
    """Runs scenarios with the session's ``--sse-soak-*`` options as defaults."""

    defaults: Launch
    """The options every run starts from (its scenario is a placeholder)."""

    @classmethod
    def from_config(cls, config: pytest.Config) -> SoakRunner:
        given = {item.name: config.getoption(f"sse_soak_{item.name}") for item in on(Surface.PYTEST)}
        given["report_dir"] = Path(config.invocation_params.dir / given["report_dir"])
        given["api_key"] = given["api_key"] or os.environ.get("SSE_SOAK_API_KEY")
        return cls(Launch(scenario="", duration_s=given.pop("duration"), **given))

    def launch(self, scenario: str | Path, **options: Any) -> Launch:
        """The run of ``scenario`` (a shipped name or a locustfile) with these options over the
        session's: ``users``, ``duration`` (seconds), ``spawn_rate``, ``host``, ``api_key``,
        ``model``, ``proxy``, ``report_dir``, and any other option of the scenario or of Locust as
        a keyword (``server_args="--seed 3"``, ``processes=2``, ``keep_alive_interval=0.5``)."""
        named = {"duration_s": options.pop("duration", self.defaults.duration_s)}
        for item in on(Surface.LAUNCH):  # Launch's own fields; the rest are its options
            if item.name in options:
                named[item.name] = options.pop(item.name)
        return dataclasses.replace(self.defaults, scenario=scenario, options=options, **named)

    def run(self, scenario: str | Path, **options: Any) -> ScenarioRun:
        """Run ``scenario`` to its end (see ``launch``) and return the judged run: ``summary``,
        ``gates``, ``gate(name)``, ``requests`` and ``frames`` (DataFrames), ``run_dir``,
        ``passed``, ``explain()`` and ``assert_passed()``."""
        return run(self.launch(scenario, **options))

    def plan(self, scenario: str | Path, **options: Any) -> Manifest:
        """The settings and gates ``run`` would use, without running anything."""
        return plan(self.launch(scenario, **options))


@pytest.fixture(scope="session")
def sse_soak(pytestconfig: pytest.Config) -> SoakRunner:
    """Runs sse-soak scenarios in child processes; ``sse_soak.run("mixed_truncate")``."""
    return SoakRunner.from_config(pytestconfig)
