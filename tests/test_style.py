"""The code base stays ruff-clean and type-checked, and the packages export what they document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import loadtests
import target_server

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff_is_clean(command: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    """mypy over the files and settings of pyproject's ``[tool.mypy]``: no error."""
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.fast
def test_target_server_all_lists_exactly_its_public_names() -> None:
    public = {name for name in vars(target_server) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(target_server, name)).__name__ == "module"}
    assert set(target_server.__all__) == public - modules


def test_loadtests_all_names_resolve_and_plain_imports_skip_locust() -> None:
    assert "locust" not in sys.modules  # importing loadtests (as this test module did) must not patch gevent
    script = "import locust, loadtests; print(sorted(n for n in loadtests.__all__ if getattr(loadtests, n)))"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == str(sorted(loadtests.__all__)), result.stderr
