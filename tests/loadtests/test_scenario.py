"""A scenario's settings: the keep-alive interval in force and where it comes from, per target."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from loadtests._scenario import Scenario

pytestmark = pytest.mark.fast

SCENARIO = Scenario(name="s", server_args="--max-num-seqs 2", keep_alive_interval=0.5)


def options(**given: Any) -> SimpleNamespace:
    """Parsed options as Locust leaves them when only ``given`` were on the command line."""
    defaults = {"host": None, "keep_alive_interval": None, "server_args": "--seed 3", "proxy": "none"}
    return SimpleNamespace(**{**defaults, "proxy_read_timeout": 60.0, "rate": None, **given})


def test_the_bundled_server_runs_the_scenarios_interval_unless_one_is_given() -> None:
    declared = SCENARIO.settings(options())
    assert (declared.keep_alive_interval, declared.keep_alive_interval_source) == (0.5, "bundled server")
    assert declared.server_args == ("--max-num-seqs", "2", "--seed", "3", "--sse-keep-alive-interval", "0.5")
    given = SCENARIO.settings(options(keep_alive_interval=1.0))
    assert given.keep_alive_interval == 1.0 and given.server_args[-1] == "1.0"


def test_a_host_run_never_assumes_the_scenarios_interval_nor_records_its_server_arguments() -> None:
    settings = SCENARIO.settings(options(host="http://vllm:8000"))
    assert (settings.keep_alive_interval, settings.keep_alive_interval_source) == (None, "unknown")
    recorded = settings.as_dict()
    assert recorded["server_args"] is None and recorded["keep_alive_interval_source"] == "unknown"
    assert "keepalive_covered" not in [gate.name for gate in SCENARIO.gate_list(settings)]  # inferred when judged


def test_a_host_run_takes_the_interval_given_on_its_command_line() -> None:
    settings = SCENARIO.settings(options(host="http://vllm:8000", keep_alive_interval=1.0))
    assert (settings.keep_alive_interval, settings.keep_alive_interval_source) == (1.0, "given")
    covered = next(gate for gate in SCENARIO.gate_list(settings) if gate.name == "keepalive_covered")
    assert covered.spec() == {"type": "KeepAliveCovered", "interval": 1.0, "name": "keepalive_covered"}


def test_a_scenario_without_an_interval_runs_the_one_given_last() -> None:
    plain = Scenario(name="p", server_args="--sse-keep-alive-interval 0.25")
    assert plain.settings(options()).keep_alive_interval == 0.25
    assert plain.settings(options(keep_alive_interval=0.0)).keep_alive_interval == 0.0  # the negative control
