"""Run a scenario the way a user does (``locust -f ... --headless``) and read what it wrote."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
REPORT_LINE = re.compile(r"^report: (?P<path>.+)$", re.MULTILINE)


@dataclass
class LocustRun:
    returncode: int
    output: str
    run_dir: Path | None

    @property
    def summary(self) -> dict[str, Any]:
        assert self.run_dir is not None, self.output[-3000:]
        return json.loads((self.run_dir / "summary.json").read_text())

    @property
    def requests(self) -> pd.DataFrame:
        assert self.run_dir is not None, self.output[-3000:]
        return pd.read_parquet(self.run_dir / "requests.parquet")

    @property
    def frames(self) -> pd.DataFrame:
        assert self.run_dir is not None, self.output[-3000:]
        return pd.read_parquet(self.run_dir / "frames.parquet")

    def gate(self, name: str) -> dict[str, Any]:
        return next(gate for gate in self.summary["gates"] if gate["name"] == name)


def run_locust(scenario: str, report_dir: Path, *args: str, users: int = 4, seconds: int = 4) -> LocustRun:
    """Headless run of ``scenarios/<scenario>.py`` for ``seconds``; never longer than 3 minutes."""
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / f"{scenario}.py"), "--headless",
        "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--report-dir", str(report_dir),
        "--only-summary", *args,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL)
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    return LocustRun(result.returncode, output, Path(match["path"]) if match else None)
