"""A gate class a user defines in their locustfile: judged by the run, stored with where it is
defined, re-judged by ``python -m loadtests report`` from another folder, and, once the locustfile
is gone, reported in one line as unjudged while the other gates are judged as ever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.errors import INCONCLUSIVE_EXIT_CODE
from tests.loadtests.locust_run import REPORT_LINE, ROOT, locust_command

pytestmark = pytest.mark.smoke

LOCUSTFILE = '''"""Short streams, judged by a gate of this file's own."""

from dataclasses import dataclass

import pandas as pd

from loadtests import Gate, GateResult, RequestMix, RequestSpec, Scenario, SSEUser


@dataclass(frozen=True)
class AtLeastRequests(Gate):
    """At least ``fewest`` requests finished."""

    fewest: int
    name: str = "at_least_requests"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        detail = f"{len(requests)} requests, at least {self.fewest} needed"
        return GateResult(self.name, len(requests) >= self.fewest, detail)


scenario = Scenario(name="own_gate", gates=[AtLeastRequests(2)])


class ShortUser(SSEUser):
    mix = RequestMix([RequestSpec("short", "chat", 20, max_tokens=4)])
'''


def report(run_dir: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadtests", "report", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=cwd, env=env)


def test_a_gate_of_the_users_locustfile_is_judged_and_rejudged_by_report(tmp_path: Path) -> None:
    locustfile = tmp_path / "own_gate_locustfile.py"
    locustfile.write_text(LOCUSTFILE)
    command = locust_command(locustfile, "--headless", "--only-summary", "-u", "2", "-r", "2", "-t", "3s")
    result = subprocess.run(
        [*command, "--report-dir", str(tmp_path / "reports")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "gate PASS at_least_requests: " in result.stdout
    match = REPORT_LINE.search(result.stdout)
    assert match is not None
    run_dir = Path(match["path"])
    written = json.loads((run_dir / "summary.json").read_text())
    where = {"module": "own_gate_locustfile", "file": str(locustfile.resolve())}
    assert written["gate_sources"] == {"AtLeastRequests": where}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["gate_sources"] == {"AtLeastRequests": where}

    elsewhere = tmp_path / "elsewhere"  # not the locustfile's folder: its module cannot be imported by name
    elsewhere.mkdir()
    again = report(run_dir, elsewhere)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout.splitlines()[-2:] == ["verdict: PASS", f"report: {run_dir}"]
    assert "\ncoverage: " in again.stdout and "requests judged (Locust counted " in again.stdout
    assert "\ngate PASS at_least_requests: " in again.stdout  # the user's gate, judged again and shown
    rejudged = json.loads((run_dir / "summary.json").read_text())
    assert [gate for gate in rejudged["gates"] if gate["name"] == "at_least_requests"] == [
        gate for gate in written["gates"] if gate["name"] == "at_least_requests"
    ]

    moved = locustfile.rename(tmp_path / "moved.py")
    refused = report(run_dir, elsewhere)
    lines = refused.stdout.splitlines()
    assert lines[0] == (
        "report: gate at_least_requests (AtLeastRequests) cannot be rebuilt: its module 'own_gate_locustfile' "
        f"cannot be imported here and its file {locustfile.resolve()} is gone; the other gates are judged, "
        "at_least_requests is unjudged"
    )
    assert lines[1].startswith("requests: ") and lines[2].startswith("coverage: ")
    (verdict,) = [line for line in lines if line.startswith("verdict: ")]
    assert verdict.startswith("verdict: INCONCLUSIVE (its point could not be judged: at_least_requests; ")
    assert "gate UNJUDGED at_least_requests: cannot be rebuilt in this process: " in "\n".join(lines)
    assert (refused.returncode, refused.stderr) == (INCONCLUSIVE_EXIT_CODE, "")

    moved.rename(locustfile)  # its spec and source were kept: back in place, it is judged again
    restored = report(run_dir, elsewhere)
    assert restored.returncode == 0 and restored.stdout.splitlines()[-2:] == ["verdict: PASS", f"report: {run_dir}"]
