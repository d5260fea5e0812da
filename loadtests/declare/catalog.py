"""The scenarios that ship with sse-soak, found by name, in a clone or in an installed package.

In a clone they are the locustfiles in ``scenarios/`` at the repository root (where the README's
``locust -f scenarios/<name>.py`` expects them); the package build maps that directory into the
package as ``loadtests/scenarios``, so an installed wheel has them in the package's folder. A scenario's
name is its file name without ``.py``; its summary is the first line of its docstring, read
without importing it (importing a locustfile imports Locust, which patches the process).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from loadtests.errors import CatalogError

_INSTALLED = Path(__file__).resolve().parent.parent / "scenarios"
_CLONE = Path(__file__).resolve().parent.parent.parent / "scenarios"


@dataclass(frozen=True)
class ShippedScenario:
    name: str
    path: Path
    summary: str


def scenario_dir() -> Path:
    """The directory of the shipped scenarios: the package's own once installed, else the clone's."""
    return _INSTALLED if _INSTALLED.is_dir() else _CLONE


def shipped() -> list[ShippedScenario]:
    """Every shipped scenario, by name."""
    found = []
    for path in sorted(scenario_dir().glob("*.py")):
        if not path.name.startswith("_"):
            docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            found.append(ShippedScenario(path.stem, path, docstring.strip().split("\n", 1)[0]))
    return found


def locate(name_or_path: str | Path) -> Path:
    """The locustfile a name or path stands for: a shipped scenario's name (``mixed_truncate``), or
    the path of an existing ``.py`` file. Anything else raises ``CatalogError``."""
    text = str(name_or_path)
    by_name = {scenario.name: scenario.path for scenario in shipped()}
    if text in by_name:
        return by_name[text]
    path = Path(text)
    if path.suffix == ".py" and path.is_file():
        return path
    names = ", ".join(by_name) or f"none found in {scenario_dir()}"
    if path.exists() or path.suffix == ".py" or "/" in text:
        problem = "no such file" if not path.exists() else "not a file" if not path.is_file() else "not a .py file"
        raise CatalogError(f"{text}: {problem} (a locustfile, or a shipped scenario: {names})")
    raise CatalogError(f"{text}: no such scenario (shipped: {names}; or give a locustfile's path)")
