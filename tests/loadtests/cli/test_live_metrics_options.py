"""``--live-metrics-port``, ``--live-metrics-bind`` and ``--live-metrics-linger`` are declared once and
reach every surface: the soak hands them to its Locust run, ``launch()`` and the pytest fixture take
them as keywords; a bad value is refused as the soak parses it."""

from __future__ import annotations

import pytest

from loadtests.cli.commands import main
from loadtests.launch import Launch
from loadtests.run import soak
from loadtests.run.soak import SoakPlan

pytestmark = pytest.mark.fast

GIVEN = ["--live-metrics-port", "9646", "--live-metrics-bind", "0.0.0.0", "--live-metrics-linger", "60"]
HANDED = ["--live-metrics-port=9646", "--live-metrics-bind=0.0.0.0", "--live-metrics-linger=60"]


def planned_soak(monkeypatch: pytest.MonkeyPatch, *args: str) -> SoakPlan:
    """The plan ``python -m loadtests soak <args>`` would run (its run replaced by taking the plan)."""
    plans: list[SoakPlan] = []

    def run(self: soak.Soak) -> int:
        plans.append(self.plan)
        return 0

    monkeypatch.setattr(soak.Soak, "run", run)
    with pytest.raises(SystemExit) as exited:
        main(["soak", *args])
    assert exited.value.code == 0
    return plans[0]


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
