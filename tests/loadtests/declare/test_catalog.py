"""The shipped scenarios are found by name, listed with their paths, and a wrong name is one line."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.declare.catalog import locate, scenario_dir, shipped
from loadtests.errors import CatalogError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.fast
def test_in_a_clone_the_shipped_scenarios_are_the_root_scenarios_directory() -> None:
    assert scenario_dir() == ROOT / "scenarios"
    on_disk = sorted(path.stem for path in (ROOT / "scenarios").glob("*.py"))
    assert [scenario.name for scenario in shipped()] == on_disk
    for scenario in shipped():
        docstring = ast.get_docstring(ast.parse(scenario.path.read_text()))
        assert docstring and scenario.summary == docstring.splitlines()[0]


@pytest.mark.fast
def test_a_name_or_a_path_locates_a_locustfile(tmp_path: Path) -> None:
    assert locate("mixed_truncate") == ROOT / "scenarios" / "mixed_truncate.py"
    own = tmp_path / "mine.py"
    own.write_text('"""Mine."""\n')
    assert locate(own) == own and locate(str(own)) == own


@pytest.mark.fast
@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("mixed", "no such scenario (shipped: "),
        ("nowhere/mixed_truncate.py", "no such file (a locustfile, or a shipped scenario: "),
        (".", "not a file (a locustfile, or a shipped scenario: "),
    ],
)
def test_anything_else_is_refused_with_the_names_there_are(given: str, problem: str) -> None:
    with pytest.raises(CatalogError) as refused:
        locate(given)
    message = str(refused.value)
    assert message.startswith(f"{given}: {problem}") and "mixed_truncate, proxy_timeout, slow_prefill, soak" in message


def test_the_scenarios_command_lists_name_path_and_summary() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "loadtests", "scenarios"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    expected = [line for scenario in shipped() for line in (f"{scenario.name} {scenario.path}", scenario.summary)]
    assert [" ".join(line.split()) for line in listed] == expected  # columns aligned with spaces
