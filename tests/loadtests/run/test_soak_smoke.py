"""``python -m loadtests soak``, for seconds rather than hours: verdicts, windows, and SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from loadtests.judge.summary import Summary
from loadtests.record.run_dir import RunDir
from tests.loadtests.locust_run import ROOT, rejudged_alike, soak_command

pytestmark = [pytest.mark.smoke, pytest.mark.soak]


def run_soak(report_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(soak_command(report_dir, *args), capture_output=True, text=True, timeout=240, cwd=ROOT)


def run_dir_of(output: str) -> Path:
    return Path(next(line for line in output.splitlines() if line.startswith("report: ")).split(": ", 1)[1])


@pytest.fixture(scope="module")
def clean_soak(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    return run_soak(tmp_path_factory.mktemp("clean"), "--duration", "25s")


def test_a_clean_soak_passes_with_windows_progress_and_memory(clean_soak: subprocess.CompletedProcess[str]) -> None:
    result = clean_soak
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert lines[-1] == "verdict: PASS"
    progress = [line for line in lines if line.startswith("soak ")]
    assert len(progress) >= 5 and "elapsed" in progress[0] and "harness" in progress[-1]
    summary = rejudged_alike(run_dir_of(result.stdout))
    windows = summary["soak"]["windows"]
    assert len(windows) == 3 and summary["soak"]["partial"] is False
    assert [w["verdict"] for w in windows] == ["PASS"] * 3 and "windows: 3 PASS" in result.stdout
    assert all(w["harness_rss_mb"] and w["server_rss_mb"] for w in windows)
    assert sum(w["requests"] for w in windows) == summary["requests"] - summary["outcomes"]["stopped"]
    assert {"memory_growth", "latency_drift"} <= {g["name"] for g in summary["gates"]}
    html = (run_dir_of(result.stdout) / "report.html").read_text()
    assert "Soak windows" in html


def test_a_soak_with_injected_failures_fails_with_the_counts_and_against_its_baseline(
    tmp_path: Path, clean_soak: subprocess.CompletedProcess[str]
) -> None:
    baseline = run_dir_of(clean_soak.stdout)
    faults = "--server-args=--failure-injection-rate 40 --failure-types server_error inband_error"
    result = run_soak(tmp_path, "--duration", "15s", "--baseline", str(baseline), "--", faults)
    assert result.returncode == 1
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("verdict: FAIL (") and "no_http_500" in last and "no_inband_500" in last
    assert "regression in 500 rate (HTTP + in-band)" in last
    assert f"base: {baseline}" in result.stdout  # the side-by-side table
    summary = rejudged_alike(run_dir_of(result.stdout))  # a failing soak stays failing, section and all
    requests = pd.read_parquet(run_dir_of(result.stdout) / "requests.parquet")
    assert summary["http_500"] == int((requests["status"] == 500).sum()) > 0
    assert f"gate FAIL no_http_500: {summary['http_500']} HTTP 500" in result.stdout
    failing = [w for w in summary["soak"]["windows"] if w["verdict"] == "FAIL"]
    assert failing and all("no_http_500" in w["failed"] for w in failing if w["http_500"])
    assert f"{len(failing)} FAIL (" in next(line for line in result.stdout.splitlines() if line.startswith("windows:"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_an_ending_signal_midway_still_leaves_a_readable_report(tmp_path: Path, signum: int) -> None:
    """SIGTERM (a scheduler) or SIGHUP (a closed terminal, a CI runner's hang-up): the soak passes it
    on to its run as SIGTERM and judges what the run recorded, interrupted by that signal."""
    soak = subprocess.Popen(soak_command(tmp_path, "--duration", "10m"), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert soak.stdout is not None
        deadline = time.monotonic() + 120
        for line in soak.stdout:  # wait for a checkpoint with requests on disk, then stop it
            if line.startswith("run directory: "):
                checkpoint = Path(line.split(": ", 1)[1].strip()) / "summary.json"
            if line.startswith("soak ") and " 0 requests" not in line and checkpoint.exists():
                break
            assert time.monotonic() < deadline, "no progress"
        assert json.loads(checkpoint.read_text())["soak"]["partial"] is True  # readable while running
        report = subprocess.run(  # a run still going is its writer's: report refuses it, writes nothing
            [sys.executable, "-m", "loadtests", "report", str(checkpoint.parent)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert report.returncode == 2 and "the run is still in progress (pid " in report.stderr, report
        os.kill(soak.pid, signum)
        output = line + soak.stdout.read()
        assert soak.wait(timeout=120) == 1
    finally:
        if soak.poll() is None:
            soak.kill()
            soak.wait()
        if soak.stdout is not None:
            soak.stdout.close()
    name = signal.Signals(signum).name
    assert output.strip().splitlines()[-1].startswith(f"verdict: FAIL (interrupted by {name}")
    run_dir = run_dir_of(output)
    summary = Summary.read(RunDir(run_dir).summary)
    assert summary.requests == len(pd.read_parquet(run_dir / "requests.parquet")) > 0
    assert summary.soak is not None and summary.soak.partial is False and (run_dir / "report.html").exists()
    assert not list(run_dir.glob("**/.*.tmp"))  # no half-written part left behind


def test_a_soak_killed_outright_leaves_no_run_behind_and_a_judged_report(tmp_path: Path) -> None:
    """SIGKILL gives the soak no chance to stop its Locust run: the run sees its launcher gone,
    ends itself as a SIGTERM would, and is judged interrupted."""
    soak = subprocess.Popen(soak_command(tmp_path, "--duration", "10m"), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert soak.stdout is not None
        deadline = time.monotonic() + 120
        for line in soak.stdout:  # wait until requests are being recorded
            if line.startswith("run directory: "):
                run_dir = Path(line.split(": ", 1)[1].strip())
            if line.startswith("soak ") and " 0 requests" not in line:
                break
            assert time.monotonic() < deadline, "no progress"
        runs = psutil.Process(soak.pid).children()
        assert len(runs) == 1, runs
        soak.kill()
        soak.wait(timeout=30)
        _, alive = psutil.wait_procs(runs, timeout=60)
        assert not alive, f"the Locust run outlived its soak: {alive}"
    finally:
        if soak.poll() is None:
            soak.kill()
            soak.wait()
        if soak.stdout is not None:
            soak.stdout.close()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"].startswith("SIGTERM at ") and summary["passed"] is False
    assert summary["requests"] == len(pd.read_parquet(run_dir / "requests.parquet")) > 0


@pytest.mark.parametrize(
    ("locust_args", "refusal"),
    [
        pytest.param(["--no-such-option"], "error: unrecognized arguments: --no-such-option", id="unknown_to_locust"),
        pytest.param(["--flush-interval", "0"], "sse-soak: --flush-interval ", id="refused_by_the_scenario"),
    ],
)
def test_locust_refusing_its_options_is_a_usage_error_not_a_failed_soak(
    tmp_path: Path, locust_args: list[str], refusal: str
) -> None:
    result = run_soak(tmp_path / "reports", "--duration", "5s", "--", *locust_args)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-2000:]
    assert "verdict:" not in result.stdout
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("python -m loadtests soak: locust refused to start: ") and refusal in line, line
    assert list(tmp_path.glob("reports/*")) == []  # no run directory


def test_an_open_loop_soak_keeps_its_schedule_and_says_so(tmp_path: Path) -> None:
    result = run_soak(tmp_path, "--duration", "8s", "--rate", "4", "--arrival", "constant", "--max-in-flight", "12")
    run_dir = run_dir_of(result.stdout)
    summary = json.loads((run_dir / "summary.json").read_text())
    section = summary["arrival"]
    assert (section["rate"], section["arrival"], section["max_in_flight"]) == (4.0, "constant", 12)
    assert section["scheduled"] == section["sent"] + section["not_sent"] > 0
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert requests["scheduled_time"].notna().all()  # every request of the soak followed the schedule
    assert any(line.startswith("arrivals: asked 4/s (constant), ") for line in result.stdout.splitlines())
