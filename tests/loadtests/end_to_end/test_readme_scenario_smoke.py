"""The README's "Writing a scenario" example, exactly as printed, run with real Locust."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun
from tests.readme import readme_python_block

pytestmark = pytest.mark.smoke


def test_the_readme_scenario_runs_and_passes_its_gates(tmp_path: Path) -> None:
    locustfile = tmp_path / "short_streams.py"
    locustfile.write_text(readme_python_block("Writing a scenario"))
    locust = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--only-summary"]
    command = [*locust, "-u", "4", "-r", "4", "-t", "6s", "--report-dir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's loadtests, wherever it is installed from
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, stdin=subprocess.DEVNULL
    )
    match = REPORT_LINE.search(result.stdout)
    run = LocustRun(result.returncode, result.stdout + result.stderr, Path(match["path"]) if match else None)
    assert run.returncode == 0, run.output[-3000:]
    assert "verdict: PASS" in result.stdout
    summary = run.summary
    assert summary["scenario"] == "short_streams" and summary["passed"]
    assert run.gate("all_ok")["passed"] and run.gate("no_proxy_timeouts")["passed"]
    assert re.search(r"^gate PASS all_ok: [1-9]\d*/[1-9]\d* rows have outcome == 'ok'$", result.stdout, re.M)
    stored = next(spec for spec in summary["gate_specs"] if spec["type"] == "NoProxyTimeouts")
    assert (stored["read_timeout"], stored["keep_alive_interval"]) == (1.0, 0.25)  # the run's settings, concrete
