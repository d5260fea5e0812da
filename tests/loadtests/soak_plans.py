"""The plan a ``python -m loadtests soak`` command line makes, taken instead of run: what the soak
would hand its Locust run, for tests of the soak's options."""

from __future__ import annotations

import pytest

from loadtests.cli.commands import main
from loadtests.run import soak
from loadtests.run.soak import SoakPlan


def planned_soak(monkeypatch: pytest.MonkeyPatch, *args: str) -> SoakPlan:
    """The plan ``python -m loadtests soak <args>`` would run (its run replaced by taking the plan);
    the command must be accepted (exit 0)."""
    plans: list[SoakPlan] = []

    def run(self: soak.Soak) -> int:
        plans.append(self.plan)
        return 0

    monkeypatch.setattr(soak.Soak, "run", run)
    with pytest.raises(SystemExit) as exited:
        main(["soak", *args])
    assert exited.value.code == 0
    return plans[0]
