"""Every import is declared: a fresh environment made from pyproject's dependencies and its ``test``
extra runs every module of the package, the scenarios, the benches and the tests.

deptry reads the imports and the declarations. The tests once imported ``cryptography``, which no
extra declared: CI passed only because its Python already had it, and a newcomer's fresh virtual
environment stopped at collection. These two checks fail on that, before any environment is made.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deptry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deptry", ".", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_every_import_of_code_and_tests_is_a_declared_dependency() -> None:
    """pyproject's ``[tool.deptry]``: imported but undeclared (DEP001), only arriving with another
    package (DEP003) or declared and never used (DEP002) fails."""
    result = deptry()
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_library_imports_nothing_from_the_test_extra() -> None:
    """``pip install sse-soak`` without ``[test]`` runs the package and the scenarios. The pytest
    plugin and ``smoke`` import pytest: pytest loads them, so pytest is there."""
    result = deptry(
        "--exclude",
        r"\.git|\.venv|venv|build|docs|reports|deploy|tests|bench|setup\.py",  # setup.py: the build's
        "--optional-dependencies-dev-groups",
        "test",
        "--ignore",
        "DEP002",
        "--per-rule-ignores",
        "DEP004=pytest",
    )
    assert result.returncode == 0, result.stdout + result.stderr
