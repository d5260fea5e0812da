"""``bench/timing_fidelity.py --timing-resolution-ms R`` hands R to every Locust run it makes."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.bench_scripts import load_bench_script

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def fidelity() -> ModuleType:
    return load_bench_script("timing_fidelity")


def test_the_resolution_asked_goes_to_every_load(fidelity: ModuleType) -> None:
    args = fidelity.parse_args(["--users", "50,200", "--timing-resolution-ms", "5"])
    loads = fidelity.loads_of(args.users, args.processes_at_largest, args.timing_resolution_ms)
    assert [(load.users, load.processes) for load in loads] == [(50, 1), (200, 1), (200, 2)]
    for load in loads:
        command = fidelity.locust_command(load, "http://127.0.0.1:1", 30, Path("/tmp/r"))
        at = command.index("--timing-resolution-ms")
        assert command[at + 1] == "5"


def test_by_default_locust_is_told_nothing_new(fidelity: ModuleType) -> None:
    args = fidelity.parse_args(["--users", "50"])
    (load,) = fidelity.loads_of(args.users, 1, args.timing_resolution_ms)
    assert "--timing-resolution-ms" not in fidelity.locust_command(load, "http://127.0.0.1:1", 30, Path("/tmp/r"))


def test_a_resolution_outside_0_to_50_ms_is_refused(fidelity: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        fidelity.parse_args(["--timing-resolution-ms", "60"])
    assert refused.value.code == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith("error: --timing-resolution-ms must be a number of ms from 0 to 50")
    )
