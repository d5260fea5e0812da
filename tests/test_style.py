"""The code base stays ruff-clean and type-checked, and the packages export what they document."""

from __future__ import annotations

import ast
import builtins
import re
import subprocess
import sys
from pathlib import Path

import pytest

import loadtests
import target_server
from loadtests import errors

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


def _reexported_errors(path: Path) -> set[str]:
    """Names a module imports from ``loadtests.errors`` (a public module may re-export one it documents)."""
    return {
        alias.asname or alias.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ImportFrom) and node.module == "loadtests.errors"
        for alias in node.names
    }


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
        declared = set(_declared_all(path))
        assert sorted(declared) == sorted(_top_level_names(path) | (declared & _reexported_errors(path))), path.name


@pytest.mark.fast
def test_loadtests_package_exports_every_name_of_its_all() -> None:
    declared = _declared_all(ROOT / "loadtests" / "__init__.py")
    assert sorted(declared) == sorted(loadtests.__all__) and len(set(declared)) == len(declared)


def _exception_classes(tree: ast.Module, known: set[str]) -> dict[str, list[str]]:
    """The classes ``tree`` defines at any depth whose bases name an exception (a builtin one or
    one of ``known``), by name, with the names of their bases."""
    classes: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            named = [base.id for base in node.bases if isinstance(base, ast.Name)]
            if any(name in known or name in _BUILTIN_EXCEPTIONS for name in named):
                classes[node.name] = named
    return classes


_BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}

_BUILTINS_ALLOWED = {
    "NotImplementedError": "the body of a method a subclass must define",
    "AttributeError": "a module's __getattr__ must raise it for a name it does not have",
    "KeyboardInterrupt": "Ctrl-C, passed on",
    "BlockingIOError": "what a non-blocking read raises: a TLS read that needs more bytes says so the same way",
    "ConnectionResetError": "what a socket read raises when the peer goes: a body read that ends early says so too",
}
"""Builtins the harness may raise itself: each stands for Python's or the system's own signal, in
the place where it would have raised it; any other error of the harness is a class of the tree."""


@pytest.mark.fast
def test_every_exception_class_of_the_harness_is_defined_in_errors_and_derives_from_its_tree() -> None:
    """One module, one tree: every exception class of ``loadtests`` is defined in ``errors.py`` and
    derives from ``SseSoakError`` (an error with an exit code) or ``InternalSignal`` (no exit code),
    keeping the builtin base its callers catch. Read from the source: importing the users would
    patch this process for gevent."""
    trees = {path: ast.parse(path.read_text()) for path in sorted((ROOT / "loadtests").rglob("*.py"))}
    known: set[str] = set()
    while True:  # a class deriving from another of the harness's is one too
        found = {name for tree in trees.values() for name in _exception_classes(tree, known)}
        if found <= known:
            break
        known |= found
    elsewhere = {
        f"{path.relative_to(ROOT)}: {name}"
        for path, tree in trees.items()
        if path.name != "errors.py" or path.parent != ROOT / "loadtests"
        for name in _exception_classes(tree, known)
    }
    assert sorted(elsewhere) == []
    defined = [value for value in vars(errors).values() if isinstance(value, type) and issubclass(value, Exception)]
    ours = [cls for cls in defined if cls.__module__ == "loadtests.errors"]
    assert len(ours) >= 30 and known == {cls.__name__ for cls in ours}
    for cls in ours:
        assert issubclass(cls, errors.SseSoakError) != issubclass(cls, errors.InternalSignal), cls
        assert hasattr(cls, "exit_code") == issubclass(cls, errors.SseSoakError), cls


@pytest.mark.fast
def test_no_bare_builtin_error_is_raised_by_the_harness() -> None:
    """``raise ValueError(...)``, ``RuntimeError``, ``TypeError``... are classes of the tree
    (``InvalidValue`` is a ``ValueError``, so callers that catch those keep working); only the
    builtins of ``_BUILTINS_ALLOWED`` are raised as they are."""
    bare = []
    for path in sorted((ROOT / "loadtests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(raised, ast.Name) and raised.id in _BUILTIN_EXCEPTIONS - set(_BUILTINS_ALLOWED):
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: raise {raised.id}")
    assert bare == []


_DRAWN = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)(?: \((?P<builtin>\w+)\))? \.*\s*(?P<code>\d+|-)?")


@pytest.mark.fast
def test_the_errors_docstring_draws_the_tree_as_it_is() -> None:
    """The drawing in ``errors``' docstring names every class once, under its parent, with the
    builtin base it keeps and its exit code: it cannot go stale."""
    drawn: dict[str, tuple[str, str | None, str | None]] = {}
    parents: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = _DRAWN.match(line.removeprefix("    "))
        if match is None:
            if line.strip() == "Exception":
                parents = ["Exception"]
            continue
        depth = len(match["indent"]) // 4 + 1
        del parents[depth:]
        assert match["name"] not in drawn, f"{match['name']} is drawn twice"
        drawn[match["name"]] = (parents[-1], match["builtin"], match["code"])
        parents.append(match["name"])
    ours = {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "loadtests.errors"
    }
    assert sorted(drawn) == sorted(ours)
    for name, (parent, builtin, code) in drawn.items():
        cls = ours[name]
        assert cls.__bases__[0].__name__ == parent, name
        assert [base.__name__ for base in cls.__bases__[1:]] == ([builtin] if builtin else []), name
        if cls is errors.SseSoakError:
            assert code is None  # the root's line says "exit exit_code": each class below shows its own
        elif cls is errors.InternalSignal:
            assert code == "-"
        else:
            assert code == (str(cls.exit_code) if issubclass(cls, errors.SseSoakError) else None), name
