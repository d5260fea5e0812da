"""Real runs scrape the server's /metrics: the queue they built is in server_metrics.parquet, the summary,
report.html and the soak windows; turned off, or against a server without /metrics, the run says why."""

from __future__ import annotations

import calendar
import re
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from loadtests.judge.drift import DriftLimits, soak_section
from loadtests.judge.gates import RunTables
from loadtests.record.run_dir import RunDir
from tests.loadtests.locust_run import REPORT_LINE, ROOT, locust_command, rejudged_alike, run_locust
from tests.loadtests.misbehaving import MISBEHAVING_LOCUSTFILE, start_misbehaving_server

pytestmark = pytest.mark.smoke


def report_section(run_dir: Path) -> str:
    """The server section of the run's report.html."""
    page = (run_dir / "report.html").read_text()
    match = re.search(r"<section><h2>Server: queue and KV cache</h2>.*?</section>", page, re.DOTALL)
    assert match, "no server section in report.html"
    return match[0]


def test_a_queueing_run_records_the_servers_queue_beside_its_requests(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, users=8, seconds=6)  # 8 users on 4 slots: requests wait
    assert run.returncode == 0, run.output[-3000:]
    assert run.run_dir is not None and "no server metrics" not in run.output
    metrics = RunDir(run.run_dir).read_server_metrics()
    waiting = metrics[metrics["name"] == "vllm:num_requests_waiting"]
    assert (waiting["value"] > 0).any()
    manifest = RunDir(run.run_dir).read_manifest()
    assert manifest is not None
    started = calendar.timegm(time.strptime(manifest.started_at, "%Y-%m-%dT%H:%M:%SZ"))
    judged = (run.run_dir / "summary.json").stat().st_mtime
    assert started <= metrics["time"].min() and metrics["time"].max() <= judged
    section = run.summary["server_metrics"]  # and the run re-judged gives the same summary
    assert section["available"] and section["scrapes"] == metrics["time"].nunique() >= 4
    assert section["waiting"]["max"] == waiting["value"].max() > 0
    assert 0 < section["kv_cache_usage"]["max"] <= 1 and section["prompt_tokens"] > 0
    assert "<img" in report_section(run.run_dir)
    requests = run.requests
    windows = soak_section(RunTables(requests), DriftLimits(windows=3), False, None, metrics)["windows"]
    assert [window["server_waiting_max"] is not None for window in windows] == [True] * 3
    assert 0 < max(window["server_waiting_max"] for window in windows) <= section["waiting"]["max"]


def test_no_server_metrics_writes_no_file_and_the_summary_says_why(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--no-server-metrics", seconds=3)
    assert run.returncode == 0, run.output[-3000:]
    assert run.run_dir is not None and not (run.run_dir / "server_metrics.parquet").exists()
    reason = "turned off with --no-server-metrics"
    assert run.summary["server_metrics"] == {"available": False, "reason": reason}  # also once re-judged
    assert f"No server metrics: {reason}." in report_section(run.run_dir)


def test_a_target_without_metrics_is_said_once_and_the_run_is_judged(tmp_path: Path) -> None:
    server = start_misbehaving_server(tmp_path / "modes.jsonl", lifetime=120.0)  # GET /metrics is its 404
    try:
        command = locust_command(
            MISBEHAVING_LOCUSTFILE,
            *("--headless", "-u", "2", "-r", "2", "-t", "3s", "--host", server.url),
            *("--client-idle-timeout", "2", "--stop-timeout", "3", "--report-dir", str(tmp_path / "reports")),
        )
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL
        )
    finally:
        server.stop()
    output = result.stdout + result.stderr
    line = f"sse-soak: no server metrics: GET {server.url}/metrics answered HTTP 404; the run goes on without them"
    assert output.count("no server metrics") == 1 and line in result.stdout.splitlines(), output[-3000:]
    match = REPORT_LINE.search(result.stdout)
    assert match and re.search(r"^verdict: (PASS|FAIL)", result.stdout, re.MULTILINE), output[-3000:]
    run_dir = Path(match["path"])
    summary = rejudged_alike(run_dir)
    assert summary["server_metrics"] == {"available": False, "reason": f"GET {server.url}/metrics answered HTTP 404"}
    assert len(pd.read_parquet(run_dir / "requests.parquet")) > 0
    assert not (run_dir / "server_metrics.parquet").exists()
