"""``--timing-resolution-ms``: a number of ms from 0 to 50, 0 by default, refused in one line
otherwise on every surface that takes it; recorded in the run's settings."""

from __future__ import annotations

import math
from argparse import Namespace

import pytest

from loadtests.declare.options import Surface, check_locust_options, check_value, locust_arguments, on, option
from loadtests.declare.scenario import RunSettings, Scenario
from loadtests.errors import UsageError
from loadtests.run.settings import recorded_settings, run_settings

pytestmark = pytest.mark.fast


def locust_options(**given: object) -> Namespace:
    values = {item.name: item.default_on(Surface.LOCUST) for item in on(Surface.LOCUST)}
    values["report_dir"] = None  # checked against the file system; not under test here
    return Namespace(**{**values, **given})


def test_the_default_is_0_read_from_its_own_environment_variable() -> None:
    item = option("timing_resolution_ms")
    assert (item.default, item.env_var, item.flag) == (0.0, "SSE_SOAK_TIMING_RESOLUTION_MS", "--timing-resolution-ms")
    assert item.form  # the web UI may change it for the next test


@pytest.mark.parametrize("good", [0.0, 0.5, 5.0, 50.0])
def test_a_resolution_from_0_to_50_ms_is_taken(good: float) -> None:
    assert check_value("timing_resolution_ms", good) == good
    assert check_value("timing_resolution_ms", f"{good:g}") == good
    options = locust_options(timing_resolution_ms=f"{good:g}")  # the web UI's form sends text
    check_locust_options(options)
    assert options.timing_resolution_ms == good


@pytest.mark.parametrize(("bad", "shown"), [(50.5, "50.5"), (-1.0, "-1"), (math.nan, "nan"), (math.inf, "inf")])
def test_a_resolution_outside_0_to_50_ms_is_refused_in_one_line(bad: float, shown: str) -> None:
    line = f"--timing-resolution-ms must be a number of ms from 0 to 50, got {shown}"
    with pytest.raises(ValueError) as refused:
        check_value("timing_resolution_ms", bad)
    assert str(refused.value) == line
    with pytest.raises(UsageError) as refused_on_locust:
        check_locust_options(locust_options(timing_resolution_ms=bad))
    assert str(refused_on_locust.value) == line
    with pytest.raises(UsageError, match=r"^--timing-resolution-ms: expected a number, got 'fine'$"):
        check_locust_options(locust_options(timing_resolution_ms="fine"))


def test_the_settings_record_it_and_a_launcher_hands_it_over() -> None:
    scenario = Scenario(name="resolution")
    settings = run_settings(scenario, locust_options(timing_resolution_ms=2.5, host="http://127.0.0.1:9"))
    assert settings.timing_resolution_ms == 2.5 and recorded_settings(settings)["timing_resolution_ms"] == 2.5
    assert run_settings(scenario, locust_options(host="http://127.0.0.1:9")).timing_resolution_ms == 0.0
    assert locust_arguments({"timing_resolution_ms": 2.5}) == ["--timing-resolution-ms=2.5"]


def test_the_settings_record_how_this_process_reads_raw_bodies() -> None:
    """``read_path``: "compiled" where the compiled reader is built and not refused, else "python";
    a recorded run from before it reads as "python"."""
    from loadtests.client import raw_body

    settings = run_settings(Scenario(name="read-path"), locust_options(host="http://127.0.0.1:9"))
    assert recorded_settings(settings)["read_path"] == raw_body.READ_PATH
    assert ("python" if raw_body._fastread is None else "compiled") == raw_body.READ_PATH
    assert RunSettings("none", 0.0, None, (), None).read_path == "python"
