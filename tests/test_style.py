"""The code base stays ruff-clean and the packages export what they document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import target_server

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_ruff_is_clean(command: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_target_server_all_lists_exactly_its_public_names() -> None:
    public = {name for name in vars(target_server) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(target_server, name)).__name__ == "module"}
    assert set(target_server.__all__) == public - modules
