"""The run controller's shape, read from its source (importing it would patch this process for
gevent): its role is picked in one place, its settings computed in two (init and each test's
start), no runner type is asked outside ``loadtests.run.roles``, and no run state lives in a module
global. The runs themselves are checked in ``test_controller_once``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.loadtests.locust_run import ROOT

pytestmark = pytest.mark.fast

CONTROLLER = ROOT / "loadtests" / "run" / "controller.py"
RUNNERS = {"LocalRunner", "MasterRunner", "WorkerRunner", "Runner", "DistributedRunner"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _callers(tree: ast.Module, name: str) -> list[str]:
    """The functions (``Class.method``) of ``tree`` that call ``name``, once per call."""
    found = []
    for top in tree.body:
        members = top.body if isinstance(top, ast.ClassDef) else [top]
        for member in members:
            if not isinstance(member, ast.FunctionDef):
                continue
            where = f"{top.name}.{member.name}" if isinstance(top, ast.ClassDef) else member.name
            for node in ast.walk(member):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                    found.append(where)
    return found


def _runner_types_asked(tree: ast.Module) -> list[str]:
    return [
        node.args[1].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("isinstance", "issubclass")
        and isinstance(node.args[1], ast.Name)
        and node.args[1].id in RUNNERS
    ]


def test_the_role_is_picked_once_at_init_and_no_runner_type_is_asked_in_the_controller() -> None:
    tree = _tree(CONTROLLER)
    assert _callers(tree, "role_of") == ["RunController.on_init"]
    assert _runner_types_asked(tree) == []


def test_only_role_of_asks_a_runners_type_in_the_whole_harness() -> None:
    """The collector, the admission and the run state take the ``Part`` the role hands them."""
    asking = {
        str(path.relative_to(ROOT)): asked
        for path in sorted((ROOT / "loadtests").rglob("*.py"))
        if (asked := _runner_types_asked(_tree(path)))
    }
    assert asking == {"loadtests/run/roles.py": ["MasterRunner", "WorkerRunner"]}


def test_the_settings_are_computed_at_init_and_at_each_tests_start_only() -> None:
    tree = _tree(CONTROLLER)
    assert sorted(_callers(tree, "run_settings")) == ["RunController._take_form_options", "RunController.on_init"]
    turned = [node for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "settings"]
    assert not [ast.unparse(node) for node in turned if ast.unparse(node.value).endswith("scenario")]  # a declaration


def test_the_controller_keeps_no_state_in_module_globals() -> None:
    tree = _tree(CONTROLLER)
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Global)]
    mutable = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    assigned = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and isinstance(node.value, mutable)
        and ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target) != "__all__"
    ]
    assert not assigned, [ast.unparse(node) for node in assigned]


def test_no_module_registers_a_locust_listener_at_import() -> None:
    """A listener is added inside a function (the controller's ``install`` and its init hooks),
    never at a module's top level."""
    for path in sorted((ROOT / "loadtests").rglob("*.py")):
        for node in _tree(path).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                called = ast.unparse(node.value.func)
                assert not called.endswith(("add_listener", "register")), f"{path.name}: {called}"
