"""A Locust cluster across hosts: master, two workers and the server each in a network namespace
of its own (``tests/loadtests/netns.py``), as on separate machines. Every request the server traced
has exactly one row, each worker's rows and loop lag reach the master, the server's metrics are
scraped, and the verdict is the one a single host gives (PASS). The bundled server the master
starts binds a non-loopback address when asked (``--server-bind``) and the workers reach it there;
real vLLM serves the cluster from a host of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from loadtests.services.stack import ChildService
from tests.conftest import require_vllm
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun
from tests.loadtests.netns import Hosts, available

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

SCENARIO = str(ROOT / "scenarios" / "mixed_truncate.py")
RUN_ID = "cluster-1"
SERVER_PORT = 8000
SERVER_ARGS = ("--max-num-seqs", "16", "--inter-token-latency", "5", "--sse-keep-alive-interval", "0.25")
"""A server with a slot for every stream (no queueing), a token every 5 ms, keep-alive every 0.25 s."""


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    usable, reason = available()
    if not usable:
        pytest.skip(reason)
    with Hosts(["master", "worker-a", "worker-b", "server"]) as made:
        yield made


def locust(hosts: Hosts, host: str, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "locust", "-f", SCENARIO, "--run-id", RUN_ID, *args]
    return hosts.run(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)


def run_cluster(hosts: Hosts, tmp_path: Path, *master_args: str, seconds: int = 8) -> LocustRun:
    """The master in ``master`` (two expected workers, headless) and a worker in each worker host,
    connecting to the master's address; returns the master's run once all three ended."""
    master = locust(
        hosts, "master", "--master", "--master-bind-host", hosts.addresses["master"], "--expect-workers", "2",
        "--headless", "--only-summary", "-u", "8", "-r", "8", "-t", f"{seconds}s", "--report-dir", str(tmp_path),
        *master_args,
    )  # fmt: skip
    workers = [
        locust(hosts, name, "--worker", "--master-host", hosts.addresses["master"]) for name in ("worker-a", "worker-b")
    ]
    output, _ = master.communicate(timeout=180)
    for worker in workers:
        worker.communicate(timeout=60)
        assert worker.returncode == 0
    match = REPORT_LINE.search(output)
    return LocustRun(master.returncode, output, Path(match["path"]) if match else None)


def assert_one_cluster_run(run: LocustRun) -> None:
    """PASS, both workers' rows and lag at the master, no row twice."""
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests
    assert requests["request_id"].is_unique and set(requests["worker"]) == {"worker-0", "worker-1"}
    assert requests.groupby("worker").size().min() >= 10  # each worker streamed, not one of them alone
    assert set(run.lag["worker"]) == {"master", "worker-0", "worker-1"}
    assert run.summary["outcomes"]["ok"] > 0 and run.summary["settings"]["prompt_sizing"] == "exact"


def test_master_workers_and_server_on_four_hosts_lose_no_row(hosts: Hosts, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    server_address = hosts.addresses["server"]
    served = ["--host", server_address, "--port", str(SERVER_PORT), "--trace-file", str(trace), *SERVER_ARGS]
    argv = hosts.command("server", [sys.executable, "-m", "target_server", *served])
    server = ChildService.launch(argv, "target server")
    try:
        run = run_cluster(hosts, tmp_path, "--host", f"http://{server_address}:{SERVER_PORT}")
    finally:
        server.stop()
    assert_one_cluster_run(run)
    traced = {json.loads(line)["request_id"] for line in trace.read_text().splitlines()}
    rows = run.requests
    assert traced and traced <= set(rows["request_id"])  # every stream the server sent has its row
    sent = rows[rows["status"].notna()]
    assert set(sent.query("status == 200")["request_id"]) <= traced  # and every 200 row was a traced stream
    assert run.run_dir is not None
    metrics = pd.read_parquet(run.run_dir / "server_metrics.parquet")
    assert len(metrics) > 0  # the master scraped the server across the link


def test_the_master_starts_the_bundled_server_on_an_address_the_workers_reach(hosts: Hosts, tmp_path: Path) -> None:
    run = run_cluster(hosts, tmp_path, "--server-bind", hosts.addresses["master"])
    assert_one_cluster_run(run)
    assert f"target server: http://{hosts.addresses['master']}:" in run.output
    assert "--host" in run.summary["settings"]["server_args"]  # recorded as the server ran


@pytest.mark.vllm
def test_real_vllm_on_a_host_of_its_own_serves_the_cluster(hosts: Hosts, tmp_path: Path) -> None:
    """Real vLLM (``python -m loadtests vllm serve --host``) in the server's namespace, reached by the
    master (prompt sizing through its ``/tokenize``, metrics) and both workers across the link."""
    require_vllm()
    address = hosts.addresses["server"]
    serve = [sys.executable, "-m", "loadtests", "vllm", "serve", "--host", address, "--port", str(SERVER_PORT)]
    serve += ["--max-num-seqs", "4", "--keep-alive-interval", "1"]
    vllm = ChildService.launch(hosts.command("server", serve), "vllm", timeout=240)
    try:
        assert vllm.url == f"http://{address}:{SERVER_PORT}"
        run = run_cluster(hosts, tmp_path, "--host", vllm.url, "--keep-alive-interval", "1", seconds=15)
    finally:
        vllm.stop(grace=30)
    assert_one_cluster_run(run)
    assert run.run_dir is not None
    metrics = pd.read_parquet(run.run_dir / "server_metrics.parquet")
    assert metrics["name"].str.startswith("vllm:").any()  # vLLM's own families, scraped across the link


DELAY_MS = 100


def test_a_slow_link_adds_its_delay_to_time_to_first_byte_and_nothing_to_frame_gaps(
    hosts: Hosts, tmp_path: Path
) -> None:
    """One worker's link delays what it sends by 100 ms (``tc netem``, where the kernel has it): its
    requests reach the server 100 ms later, so its time to first byte grows by that; the server's
    frames come back undelayed, so its gaps between frames do not."""
    try:
        hosts.delay("worker-b", DELAY_MS)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"tc netem is not available in this kernel: {exc.stderr.strip()}")
    served = ["--host", hosts.addresses["server"], "--port", str(SERVER_PORT), *SERVER_ARGS]
    server = ChildService.launch(
        hosts.command("server", [sys.executable, "-m", "target_server", *served]), "target server"
    )
    try:
        run = run_cluster(hosts, tmp_path, "--host", f"http://{hosts.addresses['server']}:{SERVER_PORT}")
    finally:
        server.stop()
    assert_one_cluster_run(run)
    ok = run.requests.query("outcome == 'ok' and client == 'raw'")
    ttfb = ok.groupby("worker")["ttfb_s"].median().sort_values()
    assert ttfb.iloc[1] - ttfb.iloc[0] == pytest.approx(DELAY_MS / 1000, abs=0.05), ttfb
    gaps = run.frames.query("kind == 'data' and seq > 1").merge(ok[["request_id", "worker"]], on="request_id")
    medians = gaps.groupby("worker")["gap_s"].median()
    assert abs(medians[ttfb.index[1]] - medians[ttfb.index[0]]) < 0.002, medians
