"""``--api-server-count N``: N real server processes on one port, their shares, their one trace,
and their lifetimes (every child gone after SIGTERM, stdin EOF, or a SIGKILLed parent)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from loadtests.services.stack import ChildService, TargetServerProcess
from target_server.app import TargetServer
from target_server.config import ServerConfig
from target_server.faults import FaultInjector
from target_server.share import SOLE, ProcessShare
from tests.bench_scripts import load_bench_script
from tests.server_gauges import scrape

pytestmark = pytest.mark.extended

STREAMS = 60
TOKENS = 12
GONE_WITHIN_S = 10.0
"""A child's lifeline stops it within uvicorn's 2 s graceful shutdown; the rest is a busy machine."""


@pytest.mark.fast
@pytest.mark.parametrize(("total", "count"), [(16, 1), (16, 2), (17, 3), (3, 3), (5, 4)])
def test_the_slots_are_the_total_split_evenly_and_each_process_gets_one(total: int, count: int) -> None:
    slots = [ProcessShare(index, count).slots(total) for index in range(count)]
    assert sum(slots) == total
    assert max(slots) - min(slots) <= 1 and min(slots) >= 1
    server = TargetServer(ServerConfig(max_num_seqs=total, api_server_count=count), ProcessShare(count - 1, count))
    assert server.engine.scheduler.capacity == slots[-1]


@pytest.mark.fast
def test_fewer_slots_than_processes_is_refused() -> None:
    with pytest.raises(ValueError, match="--max-num-seqs 2 is the total across processes"):
        ServerConfig(max_num_seqs=2, api_server_count=3)


@pytest.mark.fast
def test_each_process_draws_faults_from_its_own_seed_and_process_0_draws_a_single_servers() -> None:
    config = ServerConfig(failure_injection_rate=50, seed=7, api_server_count=2)

    def draws(share: ProcessShare) -> list[object]:
        injector = FaultInjector(config, share.fault_seed(config.seed))
        return [injector.draw() for _ in range(200)]

    single = FaultInjector(config)
    assert draws(ProcessShare(0, 2)) == [single.draw() for _ in range(200)] == draws(SOLE)
    assert draws(ProcessShare(1, 2)) == draws(ProcessShare(1, 2)) != draws(ProcessShare(0, 2))


def children_of(server: ChildService) -> list[psutil.Process]:
    return psutil.Process(server.pid).children()


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_all_gone(processes: list[psutil.Process], timeout: float = GONE_WITHIN_S) -> list[psutil.Process]:
    """The processes still running after ``timeout`` (none, when all went)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(map(gone, processes)):
        time.sleep(0.05)
    return [process for process in processes if not gone(process)]


@pytest.fixture
def two_servers(tmp_path: Path) -> Iterator[tuple[ChildService, list[psutil.Process], Path]]:
    """A server of two processes, its children, and its trace file; every process gone at teardown."""
    trace = tmp_path / "trace.jsonl"
    args = ["--api-server-count", "2", "--max-num-seqs", str(STREAMS), "--inter-token-latency", "2"]
    server = TargetServerProcess.start([*args, "--trace-file", str(trace)])
    children = children_of(server)
    yield server, children, trace
    server.stop()
    for child in children:
        if not gone(child):
            child.kill()  # by its pid, only if the test failed to see it go
    assert not wait_all_gone(children)


def test_one_process_is_todays_server_with_no_children() -> None:
    server = TargetServerProcess.start([])
    try:
        assert children_of(server) == []
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    finally:
        server.stop()


async def stream_all(url: str) -> list[list[str]]:
    """``STREAMS`` concurrent streams, each on its own connection, named ``s-<i>``: their data lines."""

    async def one(index: int) -> list[str]:
        async with httpx.AsyncClient(timeout=60) as client:
            body = {"prompt": "hello", "max_tokens": TOKENS, "stream": True}
            headers = {"x-request-id": f"s-{index}"}
            async with client.stream("POST", url + "/v1/completions", json=body, headers=headers) as response:
                assert response.status_code == 200
                return [line async for line in response.aiter_lines() if line.startswith("data: ")]

    return await asyncio.gather(*(one(index) for index in range(STREAMS)))


def test_two_processes_serve_one_port_and_append_one_whole_trace(
    two_servers: tuple[ChildService, list[psutil.Process], Path],
) -> None:
    server, children, trace = two_servers
    assert len(children) == 2
    streams = asyncio.run(stream_all(server.url))
    assert all(len(lines) == TOKENS + 1 and lines[-1] == "data: [DONE]" for lines in streams)
    scrapes = [httpx.get(server.url + "/metrics", timeout=10) for _ in range(4)]
    assert all(r.status_code == 200 and 'vllm:num_requests_running{engine="' in r.text for r in scrapes)
    server.stop()  # the trace is whole once the server has shut down
    assert not wait_all_gone(children)

    records = [json.loads(line) for line in trace.read_text().splitlines()]  # a line cut in two would not parse
    by_stream: dict[str, list[str]] = {}
    for record in records:
        by_stream.setdefault(record["request_id"], []).append(record["kind"])
    assert by_stream == {f"s-{index}": ["data"] * TOKENS + ["done"] for index in range(STREAMS)}
    assert {record["pid"] for record in records} == {child.pid for child in children}  # both served
    per_request = load_bench_script("sse_user_throughput").read_trace(trace)  # a reader the benchmarks use
    assert {rid: dict(entry["kinds"]) for rid, entry in per_request.items()} == {
        f"s-{index}": {"data": TOKENS, "done": 1} for index in range(STREAMS)
    }


def test_sigterm_stops_every_process(two_servers: tuple[ChildService, list[psutil.Process], Path]) -> None:
    server, children, _ = two_servers
    assert server.stop() == 0
    assert not wait_all_gone(children)


def test_the_end_of_stdin_stops_every_process(
    two_servers: tuple[ChildService, list[psutil.Process], Path],
) -> None:
    server, children, _ = two_servers
    assert server.process.stdin is not None
    server.process.stdin.close()  # what the kernel does when the harness dies
    assert server.process.wait(GONE_WITHIN_S) == 0
    assert not wait_all_gone(children)


def test_a_killed_parent_leaves_no_child(two_servers: tuple[ChildService, list[psutil.Process], Path]) -> None:
    server, children, _ = two_servers
    shared = Path(children[0].environ()["TARGET_SERVER_API_SERVER"].split(" ", 3)[3])  # where they share metrics
    assert shared.is_dir()
    os.kill(server.pid, signal.SIGKILL)
    server.process.wait(GONE_WITHIN_S)
    assert not wait_all_gone(children)
    assert not shared.exists()  # the last child out removed it: nobody else was left to


def engines(samples: dict[str, float]) -> dict[str, float]:
    return {labels.split('engine="', 1)[1].split('"', 1)[0]: value for labels, value in samples.items()}


def test_every_process_answers_metrics_for_the_whole_server_as_vllms_api_servers_do() -> None:
    """Measured on vLLM 0.32.0 with ``--api-server-count 2``: whichever process answers, the token
    counters and ``http_requests_total`` are the whole server's, and there are no process families.
    Before, each process answered with its own share, so a scrape saw whichever half the kernel chose."""
    streams, tokens = 6, 60
    args = ["--api-server-count", "2", "--max-num-seqs", "2", "--inter-token-latency", "20"]
    server = TargetServerProcess.start(args)
    try:

        async def one(client: httpx.AsyncClient) -> None:
            body = {"prompt": "hello", "max_tokens": tokens, "stream": True}
            async with client.stream("POST", server.url + "/v1/completions", json=body) as response:
                async for _ in response.aiter_lines():
                    pass

        async def load_and_look() -> list[dict[str, dict[str, float]]]:
            clients = [httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1)) for _ in range(streams)]
            running = [asyncio.create_task(one(client)) for client in clients]
            await asyncio.sleep(0.4)  # every stream admitted (running or queued), none near its end (1.2 s)
            during = [await asyncio.to_thread(scrape, server.url) for _ in range(4)]
            await asyncio.gather(*running)
            for client in clients:
                await client.aclose()
            return during

        during = asyncio.run(load_and_look())
        for seen in during:
            assert set(engines(seen["vllm:num_requests_running"])) == {"0", "1"}  # one sample per process
            open_streams = sum(engines(seen["vllm:num_requests_running"]).values()) + sum(
                engines(seen["vllm:num_requests_waiting"]).values()
            )
            assert open_streams == streams, seen  # every open stream counted, whichever process holds it
        time.sleep(3 * 0.1)  # three publishing intervals: every process's last counts are out
        for _ in range(4):
            seen = scrape(server.url)
            assert sum(engines(seen["vllm:generation_tokens_total"]).values()) == streams * tokens
            completions = 'handler="/v1/completions",method="POST",status="2xx"'
            assert seen["http_requests_total"][completions] == streams  # summed over the processes
            assert not [name for name in seen if name.startswith(("process_", "python_"))]
    finally:
        server.stop()
