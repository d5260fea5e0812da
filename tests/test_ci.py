"""CI runs the README's commands as written: ``.ci/readme-commands`` reads them from the README."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.readme import readme_commands

ROOT = Path(__file__).resolve().parents[1]


def test_ci_reads_exactly_the_readmes_two_commands() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / ".ci" / "readme-commands"), "--print"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == list(readme_commands())
