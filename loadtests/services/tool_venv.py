"""Tools the harness runs from virtual environments of their own (real vLLM, LiteLLM's gateway),
installed step by step with every step's output in one log, and stamped when complete.

An install is complete once its stamp file, written last, names the recipe that made it: a
different recipe (another version, another mending) is redone, a complete one reused as it is.
Only the standard library is imported here (and ``loadtests.errors``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.errors import ToolInstallError


@dataclass(frozen=True)
class ToolVenv:
    """Where a tool's venv keeps its parts; ``home`` is the venv itself."""

    home: Path

    @property
    def python(self) -> Path:
        return self.home / "bin" / "python"

    @property
    def log(self) -> Path:
        return self.home / "install.log"

    def begin(self, stamp: str, home_env: str, error: type[ToolInstallError]) -> None:
        """Make ``home`` ready for an install: created if missing, its ``stamp`` removed (the install
        is incomplete until the stamp is written again, last); an ``error`` if ``home`` holds
        something that is no venv (``home_env`` names the variable that moves it)."""
        if self.home.exists() and any(self.home.iterdir()) and not (self.home / "pyvenv.cfg").exists():
            raise error(f"{self.home} exists and is no virtual environment: remove it, or set {home_env} elsewhere")
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / stamp).unlink(missing_ok=True)


def dump(value: Any) -> str:
    """JSON as the stamps and generated files hold it: indented, keys sorted, one trailing newline."""
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def stamp_matches(path: Path, recipe: str) -> bool:
    """True when ``path`` is a stamp naming ``recipe``; False when it is missing, unreadable or other."""
    try:
        return bool(json.loads(path.read_text()).get("recipe") == recipe)
    except (OSError, ValueError, AttributeError):
        return False


def run_step(
    tool: str,
    step: str,
    command: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    error: type[ToolInstallError] = ToolInstallError,
) -> str:
    """Run one install step of ``tool``, its output appended to ``log`` as it comes; the last line it
    printed. A failure is an ``error`` naming the step, its exit status, the log, and the step's last
    ``ERROR`` line (pip's reason) or else its last line."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        began = out.tell()
        result = subprocess.run(list(command), stdout=out, stderr=subprocess.STDOUT, env=env)
    with log.open(errors="replace") as written:
        written.seek(began)
        lines = [line.strip() for line in written if line.strip()] or ["(no output)"]
    if result.returncode != 0:
        reason = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1])
        raise error(f"{tool} setup failed at '{step}' (exit {result.returncode}; log {log}): {reason}")
    return lines[-1]
