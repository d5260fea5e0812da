"""Each default declared once: every field of ours that holds an option's value starts at the
default the options declaration (``loadtests.declare.options``) holds for its surface."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loadtests.declare.catalog import locate
from loadtests.declare.options import OPTIONS, Surface, option
from loadtests.declare.scenario import Scenario
from loadtests.judge.drift import DriftLimits
from loadtests.launch import Launch
from loadtests.load.state import RunState
from loadtests.run.child_run import HeadlessRun
from loadtests.run.soak import SoakPlan

pytestmark = pytest.mark.fast


def _defaults(instance: object) -> dict[str, object]:
    return {item.name: getattr(instance, item.name) for item in dataclasses.fields(instance)}  # type: ignore[arg-type]


def test_a_scenarios_defaults_are_its_options_own() -> None:
    declared = _defaults(Scenario(name="plain"))
    fields = [item for item in OPTIONS if item.scenario_field is not None]
    assert {item.scenario_field for item in fields} == {"client_idle_timeout", "stream_deadline", "proxy_read_timeout"}
    for item in fields:
        assert declared[str(item.scenario_field)] == item.default, item.name


def test_the_soaks_plan_defaults_to_the_soaks_options() -> None:
    plan = _defaults(SoakPlan())
    named = {"duration_s": "duration"}
    for field in ("duration_s", "users", "spawn_rate", "processes", "host", "report_dir", "baseline"):
        assert plan[field] == option(named.get(field, field)).default_on(Surface.SOAK), field
    assert plan["progress_interval"] == option("progress_interval").default_on(Surface.SOAK)
    assert plan["checkpoint_interval"] == option("checkpoint_interval").default_on(Surface.SOAK)
    assert plan["scenario"] == locate(option("scenario").default_on(Surface.SOAK))


def test_the_drift_limits_are_the_soaks_option_defaults() -> None:
    limits = DriftLimits()
    for name in ("windows", "max_memory_growth", "max_latency_drift"):
        assert getattr(limits, name) == option(name).default_on(Surface.SOAK), name


def test_launch_and_the_child_run_default_to_the_launch_surface() -> None:
    launch = Launch("mixed_truncate")
    assert launch.users == option("users").default_on(Surface.LAUNCH)
    assert launch.duration_s == option("duration").default_on(Surface.LAUNCH)
    assert launch.report_dir == Path(option("report_dir").default_on(Surface.LAUNCH))
    headless = HeadlessRun(Path("x.py"), 1, 1)
    assert headless.report_dir == option("report_dir").default


def test_the_run_states_stream_reading_values_start_at_their_options_defaults() -> None:
    state = RunState()
    for name in ("client_idle_timeout", "stream_deadline", "frame_sample_rate", "max_line_bytes"):
        assert getattr(state, name) == option(name).default, name
