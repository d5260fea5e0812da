"""A user's own pytest, in a project of theirs that knows nothing of sse-soak but that it is
installed: the plugin loaded from the package's ``pytest11`` entry point, as a user meets it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = re.compile(r"::(?P<test>test_\w+)\[(?P<param>[^\]]+)\] (?P<outcome>PASSED|FAILED|ERROR|SKIPPED)")


def user_pytest(directory: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``directory``, a project that knows nothing of sse-soak but
    that it is installed (this checkout's, through PYTHONPATH, wherever it is installed from)."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, cwd=directory, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def outcomes(output: str) -> dict[tuple[str, str], str]:
    """``(test, parameter) -> PASSED/FAILED/...`` from ``-v`` output."""
    return {(match["test"], match["param"]): match["outcome"] for match in RESULT.finditer(output)}
