"""``--timing-resolution-ms`` in real Locust runs against the bundled server: every process that runs
users reads at the resolution asked (one alone, or each worker of ``--processes``), the run records
it in its settings and says it in ``timing: good to N ms``; the default says nothing new; a value
outside 0-50 ms stops the run in one line, exit 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun, locust_command

pytestmark = [pytest.mark.smoke, pytest.mark.extended]
LOCUSTFILE = ROOT / "tests" / "loadtests" / "resolution_locustfile.py"
ENV = "SSE_SOAK_TIMING_RESOLUTION_MS"


def run_read_at(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, seconds: int = 3
) -> tuple[LocustRun, dict[int, float]]:
    """A headless run of ``LOCUSTFILE`` (2 users for ``seconds``), and the resolution each process
    that ran users read at, by pid."""
    seen = tmp_path / "seen"
    command = locust_command(
        LOCUSTFILE, "--headless", "-u", "2", "-r", "2", "-t", f"{seconds}s", "--report-dir", str(tmp_path / "r"),
        "--only-summary", *args,
    )  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != ENV}
    environment |= {"RESOLUTION_SEEN": str(seen), "PYTHONPATH": str(ROOT), **(env or {})}
    result = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180, cwd=ROOT,
        stdin=subprocess.DEVNULL, env=environment,
    )  # fmt: skip
    match = REPORT_LINE.search(result.stdout)
    run = LocustRun(result.returncode, result.stdout, Path(match["path"]) if match else None)
    lines = seen.read_text().split("\n") if seen.exists() else []
    read_at = {int(pid): float(value) for pid, value in (line.split() for line in lines if line)}
    return run, read_at


def timing_line(run: LocustRun) -> str:
    lines = [line for line in run.output.splitlines() if line.startswith("timing: good to ")]
    assert len(lines) == 1, run.output[-3000:]
    return lines[0]


def test_a_run_read_at_5_ms_reads_records_and_says_it(tmp_path: Path) -> None:
    run, read_at = run_read_at(tmp_path, "--timing-resolution-ms", "5")
    assert run.returncode == 0, run.output[-3000:]
    assert set(read_at.values()) == {0.005}, read_at
    assert run.summary["settings"]["timing_resolution_ms"] == 5.0  # and a re-judgement gives the same summary
    manifest = (run.checked_run_dir / "manifest.json").read_text()
    assert '"timing_resolution_ms": 5.0' in manifest
    line = timing_line(run)
    assert ", plus reads coalesced to 5 ms (--timing-resolution-ms); " in line
    p99 = run.summary["harness_lag_ms"]["p99"]
    assert line.startswith(f"timing: good to {p99 + 5.0:.1f} ms (")
    assert "timing_resolution_ms" in (run.checked_run_dir / "report.html").read_text()


def test_by_default_every_receive_is_read_and_nothing_new_is_said(tmp_path: Path) -> None:
    run, read_at = run_read_at(tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert set(read_at.values()) == {0.0}, read_at
    assert run.summary["settings"]["timing_resolution_ms"] == 0.0
    line = timing_line(run)
    assert "coalesced" not in line and "--timing-resolution-ms" not in run.output
    assert line.startswith(f"timing: good to {run.summary['harness_lag_ms']['p99']:.1f} ms (")


def test_each_worker_reads_at_the_resolution_its_environment_gave(tmp_path: Path) -> None:
    run, read_at = run_read_at(
        tmp_path,
        "--processes",
        "2",  # a free master port of its own (own_master_port)
        env={ENV: "2"},
        seconds=8,
    )
    assert run.returncode == 0, run.output[-3000:]
    assert len(read_at) == 2 and set(read_at.values()) == {0.002}, read_at  # one user in each worker
    assert set(run.requests["worker"]) == {"worker-0", "worker-1"}
    assert run.summary["settings"]["timing_resolution_ms"] == 2.0
    assert ", plus reads coalesced to 2 ms (--timing-resolution-ms); " in timing_line(run)


@pytest.mark.parametrize(
    ("args", "env", "shown"),
    [(("--timing-resolution-ms", "60"), {}, "60"), ((), {ENV: "-1"}, "-1")],
    ids=["command_line", "environment"],
)
def test_a_resolution_outside_0_to_50_ms_stops_the_run_in_one_line(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], shown: str
) -> None:
    run, read_at = run_read_at(tmp_path, *args, env=env)
    assert run.returncode == 2, run.output[-3000:]
    ours = [line for line in run.output.splitlines() if line.startswith("sse-soak: ")]
    assert ours == [f"sse-soak: --timing-resolution-ms must be a number of ms from 0 to 50, got {shown}"]
    assert "Traceback" not in run.output and "target server:" not in run.output and not read_at
