"""Every shipped scenario, briefly, with one test per gate: ``pytest --pyargs loadtests.smoke``.

Add ``--sse-soak-host URL`` to judge a server of your own (else each scenario starts the bundled
server with its profile), and the other ``--sse-soak-*`` options as needed (``pytest --help``).
Each scenario runs once, when its first test needs it; its gates are known before it runs (the
scenario is asked for its plan at collection, which starts nothing). A failing test prints its
gate line, the run directory and the worst streams; ``test_verdict`` fails when the run as a
whole does (an interrupted run, Locust's own exit code, a run that wrote no summary).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from loadtests.declare import catalog
from loadtests.errors import INCONCLUSIVE_EXIT_CODE
from loadtests.launch import ScenarioRun, gate_names
from loadtests.pytest_plugin import SoakRunner

pytestmark = pytest.mark.smoke


__all__ = ["pytest_generate_tests", "smoke_runs", "test_gate", "test_verdict"]


class _NoPlan(str):
    """In place of a gate name: the scenario refused to plan with these options; the message is why."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One ``test_gate`` per gate of each shipped scenario, as its plan lists them."""
    if "gate" not in metafunc.fixturenames:
        return
    runner = SoakRunner.from_config(metafunc.config)
    names = [scenario.name for scenario in catalog.shipped()]

    def gates_of(name: str) -> list[str]:
        try:
            return gate_names(runner.plan(name))
        except ValueError as exc:
            return [_NoPlan(str(exc))]

    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        planned = list(pool.map(gates_of, names))
    cases = [
        pytest.param(name, gate, id=f"{name}-{'plan' if isinstance(gate, _NoPlan) else gate}")
        for name, gates in zip(names, planned, strict=True)
        for gate in gates
    ]
    metafunc.parametrize(("scenario", "gate"), cases)


@pytest.fixture(scope="session")
def smoke_runs() -> dict[str, ScenarioRun]:
    """Each scenario's run, made by the first test that needs it."""
    return {}


def _run_of(scenario: str, sse_soak: SoakRunner, smoke_runs: dict[str, ScenarioRun]) -> ScenarioRun:
    if scenario not in smoke_runs:
        smoke_runs[scenario] = sse_soak.run(scenario)
    run = smoke_runs[scenario]
    if run.summary is None:
        pytest.fail(run.explain(), pytrace=False)
    return run


def test_gate(scenario: str, gate: str, sse_soak: SoakRunner, smoke_runs: dict[str, ScenarioRun]) -> None:
    if isinstance(gate, _NoPlan):
        pytest.fail(gate, pytrace=False)
    run = _run_of(scenario, sse_soak, smoke_runs)
    try:
        result = run.gate(gate)
    except KeyError as exc:
        pytest.fail(f"{exc.args[0]}: its plan listed it\n{run.explain()}", pytrace=False)
    if result.unjudged:
        pytest.skip(f"unjudged: {result.line()}")
    if not result.passed:
        pytest.fail(run.explain(gate), pytrace=False)


@pytest.mark.parametrize("scenario", [scenario.name for scenario in catalog.shipped()])
def test_verdict(scenario: str, sse_soak: SoakRunner, smoke_runs: dict[str, ScenarioRun]) -> None:
    run = _run_of(scenario, sse_soak, smoke_runs)
    if run.inconclusive and run.returncode in (0, INCONCLUSIVE_EXIT_CODE):
        pytest.skip(f"inconclusive: {run.explain()}")
    if not run.passed:
        pytest.fail(run.explain(), pytrace=False)
