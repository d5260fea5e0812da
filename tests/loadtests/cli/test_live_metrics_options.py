"""``--live-metrics-port``, ``--live-metrics-bind`` and ``--live-metrics-linger`` are declared once and
reach every surface: the soak hands them to its Locust run, ``launch()`` and the pytest fixture take
them as keywords; a bad value is refused as the soak parses it."""

from __future__ import annotations

import pytest

from loadtests.cli.commands import main
from loadtests.launch import Launch
from tests.loadtests.soak_plans import planned_soak

pytestmark = pytest.mark.fast

GIVEN = ["--live-metrics-port", "9646", "--live-metrics-bind", "0.0.0.0", "--live-metrics-linger", "60"]
HANDED = ["--live-metrics-port=9646", "--live-metrics-bind=0.0.0.0", "--live-metrics-linger=60"]


def test_the_soak_hands_the_live_metrics_options_to_its_locust_run(monkeypatch: pytest.MonkeyPatch) -> None:
    command = planned_soak(monkeypatch, "--duration", "10s", *GIVEN).command()
    assert [argument for argument in command if argument.startswith("--live-metrics")] == HANDED


def test_without_the_option_the_soak_hands_no_port(monkeypatch: pytest.MonkeyPatch) -> None:
    command = planned_soak(monkeypatch, "--duration", "10s").command()
    assert not [argument for argument in command if argument.startswith("--live-metrics-port")]


def test_the_soak_refuses_a_port_that_is_no_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["soak", "--live-metrics-port", "65536"])
    assert exited.value.code == 2
    assert "--live-metrics-port: expected a port number from 0 to 65535 (0: a free one), got '65536'" in (
        capsys.readouterr().err
    )


def test_launch_takes_them_as_keywords() -> None:
    options = {"live_metrics_port": 0, "live_metrics_bind": "127.0.0.1", "live_metrics_linger": 30.0}
    command = Launch("mixed_truncate", options=options).command()
    assert [argument for argument in command if argument.startswith("--live-metrics")] == [
        "--live-metrics-port=0",
        "--live-metrics-bind=127.0.0.1",
        "--live-metrics-linger=30",
    ]
    with pytest.raises(ValueError, match=r"^--live-metrics-bind must be an IP address"):
        Launch("mixed_truncate", options={"live_metrics_bind": "somewhere"}).command()
