"""The suite's own layout: a test module imports no test module. What tests share lives in support
modules (no ``test_`` prefix) beside them, so running, moving or deleting one test file never
changes what another collects or imports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

TESTS = Path(__file__).resolve().parent


def imported_modules(text: str, path: Path) -> Iterator[tuple[int, str]]:
    """Every module the source ``text`` of the module at ``path`` imports, dotted and absolute (a
    relative import resolved against its package under ``tests``), with the line; ``from X import
    name`` yields ``X.name`` too, since the name may be a module."""
    package = ["tests", *path.relative_to(TESTS).parent.parts]
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def is_test_module(dotted: str) -> bool:
    """A module of the suite that pytest collects: ``tests.…test_*``."""
    return dotted.split(".")[0] == "tests" and dotted.split(".")[-1].startswith("test_")


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    offending = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in imported_modules(path.read_text(), path)
        if is_test_module(module)
    ]
    assert not offending, "move what they share into a support module beside them:\n" + "\n".join(offending)


def test_the_check_sees_absolute_relative_and_from_imports() -> None:
    """The negative control: each form of importing a test module is found."""
    module = TESTS / "loadtests" / "judge" / "example.py"
    sources = {
        "import tests.loadtests.judge.test_gates": "tests.loadtests.judge.test_gates",
        "from tests.loadtests.judge.test_gates import table": "tests.loadtests.judge.test_gates",
        "from tests.loadtests.judge import test_gates": "tests.loadtests.judge.test_gates",
        "from .test_gates import table": "tests.loadtests.judge.test_gates",
        "from ..run import test_soak_smoke": "tests.loadtests.run.test_soak_smoke",
    }
    for source, expected in sources.items():
        found = {name for _, name in imported_modules(source, module)}
        assert expected in found and any(is_test_module(name) for name in found), source
    support = "from tests.loadtests.tables import table\nfrom tests.conftest import StartServer\nimport pytest"
    assert not any(is_test_module(name) for _, name in imported_modules(support, module))
