"""A report directory that fills up or turns read-only mid-run: the verdict and every gate line still
print, the summary goes to the first place that takes it (said in one line), the exit code is 4
(``UNWRITTEN_EXIT_CODE``), no temporary file is left, and no traceback. Before: "Uncaught exception
in event handler", no verdict line, exit 2, an empty summary.json.tmp left behind.

The disk is a small tmpfs mounted for the test (root, as in CI) and unmounted after."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loadtests.errors import UNWRITTEN_EXIT_CODE
from tests.loadtests.locust_run import ROOT, locust_command

pytestmark = [pytest.mark.smoke, pytest.mark.extended]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs at ``tmp_path/disk``: enough for a run's first parts, small enough to fill."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    """Take every free byte of ``disk``."""
    with (disk / "filler").open("wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
            out.flush()


def remount_read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def run_breaking_the_disk(disk: Path, breaks: Callable[[Path], None]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """An 8 s main job into ``disk``; ``breaks(disk)`` once its run directory holds a part."""
    command = locust_command(
        ROOT / "scenarios" / "mixed_truncate.py", "--headless", "-u", "4", "-r", "4", "-t", "8s",
        "--report-dir", str(disk), "--only-summary",
    )  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while not any(disk.glob("*/requests.parquet/*.parquet")):
            assert process.poll() is None and time.monotonic() < deadline, "the run wrote no part"
            time.sleep(0.1)  # polling for the first part file: the run announces none
        breaks(disk)
        output, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    (run_dir,) = [path for path in disk.iterdir() if path.is_dir()]
    return subprocess.CompletedProcess(command, process.returncode, output, ""), run_dir


def assert_the_verdict_survives(result: subprocess.CompletedProcess[str], run_dir: Path, gates: bool = True) -> None:
    """Exit 4, no traceback, the verdict line (and, from a run, each gate line), one line saying
    where the summary went, no temporary file."""
    output = result.stdout
    assert result.returncode == UNWRITTEN_EXIT_CODE, output[-3000:]
    assert "Traceback" not in output and "Uncaught exception" not in output, output[-3000:]
    lines = output.splitlines()
    assert any(line.startswith("verdict: ") for line in lines), output[-3000:]
    assert not gates or any(line.startswith("gate ") for line in lines), output[-3000:]
    said = [line for line in lines if line.startswith(f"sse-soak: could not write {run_dir / 'summary.json'}: ")]
    assert len(said) == 1, output[-3000:]
    assert not list(run_dir.rglob("*.tmp")), list(run_dir.rglob("*.tmp"))
    fallback = Path(tempfile.gettempdir()) / f"sse-soak-{run_dir.name}-summary.json"
    try:
        assert said[0].endswith(f"the summary is in {fallback}")
        kept = json.loads(fallback.read_text())
        assert kept["verdict"] in ("PASS", "FAIL", "INCONCLUSIVE") and f"verdict: {kept['verdict']}" in output
    finally:
        fallback.unlink(missing_ok=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI is root)")
def test_a_report_directory_that_fills_up_mid_run(small_disk: Path) -> None:
    result, run_dir = run_breaking_the_disk(small_disk, fill)
    assert_the_verdict_survives(result, run_dir)
    assert "(the disk refused them): not judged" in result.stdout or "No space left on device" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI is root)")
def test_a_report_directory_that_turns_read_only_mid_run(small_disk: Path) -> None:
    result, run_dir = run_breaking_the_disk(small_disk, remount_read_only)
    assert_the_verdict_survives(result, run_dir)
    assert "Read-only file system" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI is root)")
def test_report_on_a_read_only_run_directory_prints_its_verdict_and_exits_4(small_disk: Path) -> None:
    command = locust_command(
        ROOT / "scenarios" / "mixed_truncate.py", "--headless", "-u", "2", "-r", "2", "-t", "3s",
        "--report-dir", str(small_disk), "--only-summary",
    )  # fmt: skip
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stdout[-3000:]
    (run_dir,) = [path for path in small_disk.iterdir() if path.is_dir()]
    before = (run_dir / "summary.json").read_bytes()
    remount_read_only(small_disk)
    again = subprocess.run(
        [sys.executable, "-m", "loadtests", "report", str(run_dir)], capture_output=True, text=True, timeout=180
    )
    judged = subprocess.CompletedProcess([], again.returncode, again.stdout, "")
    assert_the_verdict_survives(judged, run_dir, gates=False)
    assert (run_dir / "summary.json").read_bytes() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI is root)")
@pytest.mark.parametrize("breaks", [fill, remount_read_only], ids=["full", "read-only"])
def test_a_run_whose_disk_refused_its_rows_never_passes_on_the_rest(
    small_disk: Path, breaks: Callable[[Path], None]
) -> None:
    """Before: ``verdict: PASS`` on 308 of 2,503 requests (118 of 460 on a remount), and a summary.json
    saying PASS with no lost count. Now the coverage line says how many the disk refused, the verdict
    is no PASS, and every summary written (in place, or where it went) says the same figures."""
    result, run_dir = run_breaking_the_disk(small_disk, breaks)
    output = result.stdout
    (said,) = [line for line in output.splitlines() if line.startswith("coverage: ")]
    refused = re.search(r"; (\d+) lost \(never recorded: the run could not write (\d+)\)", said)
    assert refused and int(refused[1]) >= int(refused[2]) > 0, said
    verdict = next(line for line in output.splitlines() if line.startswith("verdict: "))
    assert "verdict: PASS" not in output and "over the 10% allowed" in said, output[-3000:]
    assert not list(run_dir.rglob("*.tmp")), list(run_dir.rglob("*.tmp"))
    fallback = Path(tempfile.gettempdir()) / f"sse-soak-{run_dir.name}-summary.json"
    try:
        kept = (
            json.loads(fallback.read_text())
            if fallback.exists()
            else json.loads((run_dir / "summary.json").read_text())
        )
        assert verdict.startswith(f"verdict: {kept['verdict']} ") and kept["coverage"]["lost"] == int(refused[1])
        assert kept["coverage"]["unwritten"] == int(refused[2]) and kept["coverage"]["locust"] > 0
    finally:
        fallback.unlink(missing_ok=True)
