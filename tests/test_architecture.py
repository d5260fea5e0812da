"""docs/architecture.md against the code: every module placed, the layers as import-linter checks
them, the request's path through names that exist; and the import contracts kept."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "loadtests"


def _page() -> str:
    return PAGE.read_text()


def _contracts() -> list[str]:
    """The contracts' ids, in pyproject's order (read as text: tomllib is Python 3.11's)."""
    return re.findall(r'^id = "([a-z-]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)


def _layers() -> list[str]:
    found = re.search(r'^type = "layers"\n.*?^layers = \[(.*?)\]', (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    assert found, "pyproject declares no layers contract"
    return re.findall(r'"([a-z_]+)"', found[1])


def _stages() -> list[str]:
    return sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))


def _placed(stage: str) -> list[str]:
    """The modules the page lists under the stage's heading, as paths below the stage package."""
    section = re.search(rf"^### `{stage}`\n(.*?)(?=^#|\Z)", _page(), re.MULTILINE | re.DOTALL)
    assert section, f"docs/architecture.md has no section for {stage}"
    items = re.findall(r"^- ((?:`[a-z_/]+`(?:, | and )?)+):", section[1], re.MULTILINE)
    return [name for item in items for name in re.findall(r"`([a-z_/]+)`", item)]


def _modules(stage: str) -> list[str]:
    """The stage's modules as paths below it; a package inside it is named by its folder."""
    folder = PACKAGE / stage
    modules = {path.relative_to(folder).with_suffix("") for path in folder.rglob("*.py")}
    return sorted(
        str(module.parent if module.name == "__init__" else module)
        for module in modules
        if module.parent.name or module.name != "__init__"
    )


@pytest.mark.fast
@pytest.mark.parametrize("stage", _stages())
def test_the_page_places_every_module_of_each_stage_and_no_other(stage: str) -> None:
    assert sorted(_placed(stage)) == _modules(stage)


@pytest.mark.fast
def test_the_pages_layers_are_the_contracts_layers_in_the_same_order() -> None:
    table = re.findall(r"^\| `([a-z_]+)` \|", _page(), re.MULTILINE)
    assert table == _layers()
    assert sorted(table) == _stages()


def _top_level_names(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


@pytest.mark.fast
def test_the_request_path_names_modules_and_classes_that_exist() -> None:
    section = _page().split("## One request", 1)[1].split("\n## ", 1)[0]
    stages = "|".join(_stages())
    named = re.findall(rf"`((?:{stages})\.[a-z_]+(?:\.[A-Za-z_]+)?)", section)
    assert len(named) >= 10
    for name in (name for name in named if not re.search(r"\.(html|json|csv|parquet)$", name)):  # files
        stage, module, *attribute = name.split(".")
        path = PACKAGE / stage / f"{module}.py"
        assert path.exists(), name
        assert not attribute or attribute[0] in _top_level_names(path), name


@pytest.mark.fast
def test_the_stage_packages_say_what_they_own_and_may_import() -> None:
    for stage in _stages():
        docstring = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text())) or ""
        assert "May import:" in docstring, stage


def test_every_import_contract_is_kept() -> None:
    """``lint-imports`` over the contracts of pyproject: the layers, the server and the harness
    apart, no cycle anywhere."""
    command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]
    result = subprocess.run([*command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in output
