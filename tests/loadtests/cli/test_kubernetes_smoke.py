"""The rendered master's and worker's command lines, run here as their pods would run them: the
worker joins (same run id), sends the load, and the master judges the run into its --report-dir.

Only what a pod's network gives changes: the master's port is a free one (not Locust's 5557, which
another run on this machine may hold), the worker reaches it on 127.0.0.1 (not the Service's
name), every bind is 127.0.0.1 (not the pod's 0.0.0.0), and the report directory is a temporary one
(not the claim's mount). With ``--live-metrics`` the master's live metrics are scraped as they go."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest
import yaml

from loadtests.base.ports import free_loopback_port
from loadtests.cli import kubernetes as k8s
from tests.conftest import StartServer
from tests.loadtests.live_scrape import LIVE_LINE, scrape, scrape_until
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LiveLocust, LocustRun, run_in_checkout

pytestmark = [pytest.mark.smoke, pytest.mark.extended]


def as_here(args: list[str], cluster: k8s.Cluster, port: int, report_dir: Path) -> list[str]:
    """``args`` as a pod runs them (``sse-soak`` is ``python -m loadtests``), on this machine's loopback."""
    here = {
        "--master-bind-host=0.0.0.0": "--master-bind-host=127.0.0.1",
        "--live-metrics-bind=0.0.0.0": "--live-metrics-bind=127.0.0.1",
        f"--master-bind-port={k8s.MASTER_PORT}": f"--master-bind-port={port}",
        f"--master-port={k8s.MASTER_PORT}": f"--master-port={port}",
        f"--master-host={cluster.name('master')}": "--master-host=127.0.0.1",
        f"--report-dir={k8s.REPORT_MOUNT}": f"--report-dir={report_dir}",
    }
    command = [sys.executable, "-m", "loadtests", *(here.get(argument, argument) for argument in args)]
    assert not any("0.0.0.0" in argument for argument in command), command
    return command


def test_the_rendered_master_and_worker_run_and_judge_a_run(start_server: StartServer, tmp_path: Path) -> None:
    server = start_server()
    cluster = k8s.Cluster("mixed_truncate", server.url, 1, "unused", "smoke", users=2, spawn_rate=2, run_time_s=4)
    port = free_loopback_port()
    master = subprocess.Popen(
        as_here(cluster.master_args(), cluster, port, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        as_here(cluster.worker_args(), cluster, port, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    try:
        output, _ = master.communicate(timeout=150)
        worker_output, _ = worker.communicate(timeout=90)  # it ends when the master quits
    finally:
        for process in (master, worker):
            if process.poll() is None:
                process.kill()
                process.wait()
    assert worker.returncode == 0, worker_output[-3000:]
    match = REPORT_LINE.search(output)
    run = LocustRun(master.returncode, output, Path(match["path"]) if match else None)
    assert master.returncode in (0, 1, 3), output[-3000:]  # judged: PASS, FAIL or inconclusive, never refused
    assert run.run_dir is not None and run.run_dir.parent == tmp_path, output[-3000:]
    assert run.judged.requests > 0 and len(run.requests) == run.judged.requests  # the worker's rows
    assert "refused" not in output + worker_output


def rendered(*argv: str) -> tuple[list[str], list[str]]:
    """The master's and the workers' container args that ``python -m loadtests kubernetes argv`` renders."""
    done = run_in_checkout(sys.executable, "-m", "loadtests", "kubernetes", *argv)
    assert done.returncode == 0, done.stderr
    jobs = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(done.stdout) if doc["kind"] == "Job"}
    (master,) = [job for name, job in jobs.items() if name.endswith("-master")]
    (workers,) = [job for name, job in jobs.items() if name.endswith("-workers")]
    return container_args(master), container_args(workers)


def container_args(job: dict[str, Any]) -> list[str]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["sse-soak"]  # python -m loadtests
    return list(container["args"])


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on."""
    connections = psutil.Process(pid).net_connections(kind="inet")
    return {
        (connection.laddr.ip, connection.laddr.port)
        for connection in connections
        if connection.status == psutil.CONN_LISTEN
    }


def test_with_live_metrics_the_rendered_master_serves_the_workers_figures_and_lingers_for_a_last_scrape(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Rendered with ``--live-metrics-port``: mid-run the master's /metrics rise with the worker's
    requests under its name; the worker opens no port; after the verdict the master waits (up to its
    rendered ``--live-metrics-linger`` of 120 s) for one more scrape, which ends the wait and reads the
    run's rows."""
    server = start_server()
    metrics_port, master_port, run_id = free_loopback_port(), free_loopback_port(), "smoke-live"
    target = ["--scenario", "mixed_truncate", "--host", server.url, "--workers", "1", "--image", "unused"]
    load = ["--run-id", run_id, "--users", "2", "--spawn-rate", "2", "--run-time", "6s"]
    batches = ["--", "--flush-interval", "0.5"]  # worker -> master: the figures move several times in 6 s
    master_args, worker_args = rendered(*target, *load, "--live-metrics-port", str(metrics_port), *batches)
    named = k8s.Cluster("mixed_truncate", server.url, 1, "unused", run_id)  # the master's Service name, as rendered
    assert f"--live-metrics-linger={k8s.LIVE_METRICS_LINGER_S}" in master_args  # kept: the last scrape ends it
    with (
        LiveLocust.of(as_here(master_args, named, master_port, tmp_path)) as master,
        LiveLocust.of(as_here(worker_args, named, master_port, tmp_path)) as worker,
    ):
        url = master.wait_for(LIVE_LINE, timeout=120)[1]
        assert url == f"http://127.0.0.1:{metrics_port}/metrics"
        first = scrape_until(url, lambda found: found.total("sse_soak_requests_total") > 0)
        second = scrape_until(
            url, lambda found: found.total("sse_soak_requests_total") > first.total("sse_soak_requests_total")
        )
        assert list(second.by("sse_soak_requests_total", "worker")) == ["worker-0"]  # the Locust worker's name
        assert listening_addresses(worker.process.pid) == set()  # its figures reach the master with its rows
        assert listening_addresses(master.process.pid) == {("127.0.0.1", master_port), ("127.0.0.1", metrics_port)}
        run_dir = Path(master.wait_for(REPORT_LINE.pattern, timeout=120)["path"])
        final = scrape(url)  # after the verdict: the master lingers for it, then exits at once
        code = master.wait(60)  # well under the linger's 120 s: this scrape ended it
        assert worker.wait(90) == 0, worker.output[-3000:]
    assert code in (0, 1, 3), master.output[-3000:]  # judged: PASS, FAIL or inconclusive, never refused
    assert run_dir.parent == tmp_path
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert set(requests["worker"]) == {"worker-0"}
    assert final.total("sse_soak_requests_total") == len(requests) >= second.total("sse_soak_requests_total")
    assert final.by("sse_soak_requests_total", "worker") == {"worker-0": float(len(requests))}
    assert final.total("sse_soak_open_streams") == 0
    assert "refused" not in master.output + worker.output
