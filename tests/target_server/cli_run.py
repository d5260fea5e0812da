"""``python -m target_server ARGS`` run to its end, as a user starts it by hand."""

from __future__ import annotations

import subprocess
import sys


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "target_server", *args], capture_output=True, text=True, timeout=60)
