"""A run's live metrics (``--live-metrics-port``) scraped while it runs: the figures rise, and at the end
they are the run's own rows and frames, the master's the sum of its workers'. No option, no port; a
port that is taken stops the run in one line, before any load."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pandas as pd
import psutil
import pytest

from tests.loadtests.live_scrape import LIVE_LINE, Scrape, listening_ports, scrape, scrape_until
from tests.loadtests.locust_run import REPORT_LINE, LiveLocust, rejudged_alike, run_locust

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

LIVE = ("--live-metrics-port", "0", "--live-metrics-linger", "120")
"""Served on a free port, and after the verdict until one more scrape came: the final figures are read."""


def gate_states_of(summary: dict[str, object]) -> dict[str, float]:
    gates = summary["gates"]
    assert isinstance(gates, list)
    return {gate["name"]: -1.0 if gate.get("skipped") else 1.0 if gate["passed"] else 0.0 for gate in gates}


def assert_final_figures_are_the_runs(final: Scrape, run_dir: Path, summary: dict[str, object]) -> None:
    """Requests by route and outcome are the rows, frames by kind the frame records (every frame is
    kept: --frame-sample-rate 1), the gate states the verdict's, run_info names the run directory."""
    requests = pd.read_parquet(run_dir / "requests.parquet")
    frames = pd.read_parquet(run_dir / "frames.parquet")
    rows = (requests["route"] + " " + requests["outcome"]).value_counts().astype(float).to_dict()
    served: dict[str, float] = {}
    for name, labels, value in final.samples:
        if name == "sse_soak_requests_total":
            key = f"{labels['route']} {labels['outcome']}"
            served[key] = served.get(key, 0.0) + value
    assert served == rows
    kinds = frames["kind"].value_counts()
    for kind in ("data", "keepalive", "done"):
        assert final.total("sse_soak_frames_total", kind=kind) == kinds.get(kind, 0), kind
    assert final.total("sse_soak_ttft_seconds_count") == requests["ttft_s"].notna().sum()
    assert final.total("sse_soak_frame_gap_seconds_count", kind="any") == len(frames)
    assert final.total("sse_soak_inband_errors_total") == (requests["outcome"] == "inband_error").sum()
    assert final.total("sse_soak_protocol_errors_total") == (requests["outcome"] == "protocol_error").sum()
    assert final.total("sse_soak_open_streams") == 0
    assert final.by("sse_soak_gate_state", "gate") == gate_states_of(summary)
    assert [labels["run_dir"] for labels in final.labels_of("sse_soak_run_info")] == [str(run_dir)]


def test_a_headless_run_serves_rising_figures_and_ends_on_its_rows_and_frames(tmp_path: Path) -> None:
    # no -t: the run goes until it is stopped, so both scrapes are mid-run
    with LiveLocust("mixed_truncate", tmp_path, "--headless", "-u", "4", "-r", "4", *LIVE) as locust:
        url = locust.wait_for(LIVE_LINE)[1]
        assert listening_ports(locust.process.pid) == {int(url.rsplit(":", 1)[1].split("/")[0])}
        first = scrape_until(url, lambda found: found.total("sse_soak_requests_total") > 0)
        requests, frames = first.total("sse_soak_requests_total"), first.total("sse_soak_frames_total")
        second = scrape_until(
            url,
            lambda found: (
                found.total("sse_soak_requests_total") > requests and found.total("sse_soak_frames_total") > frames
            ),
        )
        assert second.total("sse_soak_harness_lag_seconds_count") > first.total("sse_soak_harness_lag_seconds_count")
        assert second.total("sse_soak_ttft_seconds_count", route="chat") > 0
        assert second.total("sse_soak_keep_alive_interval_seconds") > 0  # the bundled server's, told
        assert set(second.by("sse_soak_requests_total", "worker")) == {"local"}
        # the gates so far: not judged at first, then judged on what the run directory holds, mid-run
        assert second.total("sse_soak_gate_state", gate="requests_completed") in (-1, 1)
        scrape_until(url, lambda found: found.total("sse_soak_gate_state", gate="requests_completed") == 1)
        assert not locust.matching(r"^ended: ")
        locust.signal(signal.SIGINT)
        run_dir = Path(locust.wait_for(REPORT_LINE.pattern, timeout=120)["path"])
        final = scrape(url)  # the run lingers for it: the figures are final
        locust.wait(60)
    assert_final_figures_are_the_runs(final, run_dir, rejudged_alike(run_dir))


def test_with_processes_the_master_serves_each_workers_figures_and_the_workers_open_no_port(tmp_path: Path) -> None:
    args = ("--headless", "-u", "4", "-r", "4", "--processes", "2", *LIVE)
    with LiveLocust("mixed_truncate", tmp_path, *args) as locust:
        url = locust.wait_for(LIVE_LINE)[1]
        both = scrape_until(url, lambda found: len(found.by("sse_soak_requests_total", "worker")) == 2)
        assert set(both.by("sse_soak_requests_total", "worker")) == {"worker-0", "worker-1"}
        master = locust.process.pid
        command = psutil_cmdline(master)
        workers = [child for child in children(master) if psutil_cmdline(child) == command]
        assert len(workers) == 2
        for worker in workers:
            assert listening_ports(worker) == set(), worker
        locust.signal(signal.SIGINT)
        run_dir = Path(locust.wait_for(REPORT_LINE.pattern, timeout=120)["path"])
        final = scrape(url)
        locust.wait(60)
    summary = rejudged_alike(run_dir)
    assert_final_figures_are_the_runs(final, run_dir, summary)
    requests = pd.read_parquet(run_dir / "requests.parquet")
    per_worker = final.by("sse_soak_requests_total", "worker")
    assert per_worker == {worker: float(n) for worker, n in requests.groupby("worker").size().items()}
    assert sum(per_worker.values()) == final.total("sse_soak_requests_total") == len(requests)
    frames = pd.read_parquet(run_dir / "frames.parquet").merge(requests[["request_id", "worker"]], on="request_id")
    for kind in ("data", "keepalive", "done"):
        served = final.by("sse_soak_frames_total", "worker", kind=kind)
        written = frames[frames["kind"] == kind].groupby("worker").size()
        assert {w: v for w, v in served.items() if v} == {w: float(n) for w, n in written.items()}, kind
    assert set(final.by("sse_soak_harness_lag_seconds_count", "worker")) == {"master", "worker-0", "worker-1"}


def children(pid: int) -> list[int]:
    return [child.pid for child in psutil.Process(pid).children()]


def psutil_cmdline(pid: int) -> list[str]:
    return psutil.Process(pid).cmdline()


def test_without_the_option_the_run_opens_no_port(tmp_path: Path) -> None:
    with LiveLocust("mixed_truncate", tmp_path, "--headless", "-u", "2", "-r", "2", "-t", "30s") as locust:
        run_dir = Path(locust.wait_for(r"^run directory: (.+)$")[1])
        assert listening_ports(locust.process.pid) == set()
        locust.signal(signal.SIGINT)
        locust.wait(120)
    assert not locust.matching(LIVE_LINE) and (run_dir / "summary.json").exists()


def test_a_port_that_is_taken_stops_the_run_in_one_line_before_any_load(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = run_locust("mixed_truncate", tmp_path, "--live-metrics-port", str(port))
    assert run.returncode == 2, run.output[-3000:]
    said = [line for line in run.output.splitlines() if "--live-metrics-port" in line]
    assert said == [
        f"sse-soak: --live-metrics-port {port}: cannot listen on 127.0.0.1 port {port} (Address already in use)"
    ]
    assert run.run_dir is None and "run directory:" not in run.output and "target server:" not in run.output
    assert list(tmp_path.iterdir()) == []


def test_the_web_ui_serves_each_test_from_zero_and_only_the_test_under_way(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        web_port = probe.getsockname()[1]
    web = ("--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart", "-u", "2", "-r", "2", "-t", "3s")
    with LiveLocust("mixed_truncate", tmp_path, *web, "--live-metrics-port", "0") as locust:
        url = locust.wait_for(LIVE_LINE)[1]
        first_dir = Path(locust.wait_for(REPORT_LINE.pattern, timeout=120)["path"])
        first = scrape(url)
        assert first.total("sse_soak_requests_total") == len(pd.read_parquet(first_dir / "requests.parquet"))
        with httpx.Client(base_url=f"http://127.0.0.1:{web_port}", timeout=60, trust_env=False) as client:
            form = {"user_count": "2", "spawn_rate": "2", "run_time": "3s", "host": ""}
            swarm = client.post("/swarm", data=form)
            assert swarm.status_code == 200 and swarm.json()["success"], swarm.text
        second_dir = Path(locust.wait_for(REPORT_LINE.pattern, count=2, timeout=120)["path"])
        second = scrape(url)
        locust.signal(signal.SIGINT)
        locust.wait(60)
    assert second_dir != first_dir
    assert [labels["run_dir"] for labels in second.labels_of("sse_soak_run_info")] == [str(second_dir)]
    assert second.total("sse_soak_requests_total") == len(pd.read_parquet(second_dir / "requests.parquet"))
    assert second.total("sse_soak_frames_total") == len(
        pd.read_parquet(second_dir / "frames.parquet").query("kind in ('data', 'keepalive', 'done')")
    )  # counted from zero: none of the first test's
