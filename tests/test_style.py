"""The code base stays ruff-clean and type-checked, and the packages export what they document."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import loadtests
import target_server

pytestmark = pytest.mark.extended

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff_is_clean(command: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    """mypy over the files and settings of pyproject's ``[tool.mypy]``: no error."""
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr


def test_target_server_all_names_resolve_without_importing_the_app_first() -> None:
    script = (
        "import sys, target_server; loaded = 'fastapi' in sys.modules; "
        "print(loaded, sorted(n for n in target_server.__all__ if getattr(target_server, n) is not None))"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == f"False {sorted(target_server.__all__)}", result.stderr


def test_loadtests_all_names_resolve_and_plain_imports_skip_locust() -> None:
    assert "locust" not in sys.modules  # importing loadtests (as this test module did) must not patch gevent
    script = "import locust, loadtests; print(sorted(n for n in loadtests.__all__ if getattr(loadtests, n)))"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == str(sorted(loadtests.__all__)), result.stderr


PUBLIC_MODULES = ("__init__", "__main__", "launch", "pytest_plugin", "smoke", "errors")
"""The harness's public surface, the only modules at the package's top; the rest lives in the stage
packages (docs/architecture.md), which are internal."""


def _top_level_names(path: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments), public ones only."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return {name for name in names if not name.startswith("_")} - {"pytestmark"}  # pytest's, not an export


def _declared_all(path: Path) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{path.name} declares no __all__")


@pytest.mark.fast
def test_loadtests_internal_modules_are_private_and_public_ones_list_exactly_what_they_define() -> None:
    modules = sorted(path.stem for path in (ROOT / "loadtests").glob("*.py"))
    assert modules == sorted(PUBLIC_MODULES)
    public = [ROOT / "loadtests" / f"{name}.py" for name in PUBLIC_MODULES[2:]]  # __main__ runs cli.commands
    for path in [*public, ROOT / "loadtests" / "cli" / "commands.py"]:
        assert sorted(_declared_all(path)) == sorted(_top_level_names(path)), path.name


@pytest.mark.fast
def test_loadtests_package_exports_every_name_of_its_all() -> None:
    declared = _declared_all(ROOT / "loadtests" / "__init__.py")
    assert sorted(declared) == sorted(loadtests.__all__) and len(set(declared)) == len(declared)


@pytest.mark.fast
def test_every_exception_the_harness_raises_is_an_sse_soak_error() -> None:
    """One hierarchy: each exception class of ``loadtests`` derives from ``SseSoakError`` (keeping the
    builtin base its callers caught before), so an entry point turns any of them into one line. Read
    from the source: importing the users would patch this process for gevent."""
    bases: dict[str, list[str]] = {}
    for path in sorted((ROOT / "loadtests").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            named = (
                [base.id for base in node.bases if isinstance(base, ast.Name)] if isinstance(node, ast.ClassDef) else []
            )
            if isinstance(node, ast.ClassDef) and any(
                name.endswith(("Error", "Exception", "Exit")) or name == "Exception" for name in named
            ):
                bases[node.name] = named

    def ours(name: str) -> bool:
        return name == "SseSoakError" or any(ours(base) for base in bases.get(name, []))

    assert len(bases) >= 14
    assert [name for name in bases if not ours(name)] == []
