"""The rendered master's and worker's command lines, run here as their pods would run them: the
worker joins (same run id), sends the load, and the master judges the run into its --report-dir.

Only what a pod's network gives changes: the master's port is a free one (not Locust's 5557, which
another run on this machine may hold), the worker reaches it on 127.0.0.1 (not the Service's
name), and the report directory is a temporary one (not the claim's mount)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.base.ports import free_loopback_port
from loadtests.cli import kubernetes as k8s
from tests.conftest import StartServer
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun

pytestmark = [pytest.mark.smoke, pytest.mark.extended]


def as_here(args: list[str], cluster: k8s.Cluster, port: int, report_dir: Path) -> list[str]:
    here = {
        f"--master-bind-port={k8s.MASTER_PORT}": f"--master-bind-port={port}",
        f"--master-port={k8s.MASTER_PORT}": f"--master-port={port}",
        f"--master-host={cluster.name('master')}": "--master-host=127.0.0.1",
        f"--report-dir={k8s.REPORT_MOUNT}": f"--report-dir={report_dir}",
    }
    return [sys.executable, "-m", "loadtests", *(here.get(argument, argument) for argument in args)]


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
