"""The floor (bench/floor_loop.py) reads what a real server sends as sse-soak's user would: its
prepared request is accepted as sse-soak's is, a connection sends its next request after a
response's chunked end, a cut connection is replaced, and no frame is counted twice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loadtests.services.stack import TargetServerProcess

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import floor_loop  # noqa: E402
import peers  # noqa: E402

pytestmark = [pytest.mark.bench, pytest.mark.timeout(120)]

CONCURRENCY = 2
TOKENS = 8


def test_the_floor_reads_the_servers_streams_back_to_back_and_replaces_cut_connections(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    args = ["--host", "127.0.0.1", "--model", peers.MODEL, "--time-to-first-token", "0", "--inter-token-latency", "2"]
    args += [
        "--failure-injection-rate",
        "50",
        "--failure-types",
        "disconnect",
        "--seed",
        "1",
        "--trace-file",
        str(trace),
    ]
    server = TargetServerProcess.start(args, env=peers.project_env())
    try:
        request = tmp_path / "request.json"
        floor_loop.prepare(server.url, 16, TOKENS, request)
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        result = floor_loop.run(host, int(port), CONCURRENCY, 2.0, floor_loop.load_request(request))
    finally:
        server.stop()
    sent = peers.read_trace(trace)
    ids = set(sent["request_id"])
    assert ids <= {f"{number:032x}" for number in range(1, result["requests"] + 1)}  # each request its own id
    assert sent["kind"].isin(["data", "done"]).all()  # streamed as asked: no error frame for a malformed request
    assert result["reconnects"] > 0  # the injected cuts: each replaced by a new connection
    reused = result["requests"] - CONCURRENCY - result["reconnects"]
    assert reused > 0  # and after a whole response, the next request on the same connection
    assert 0 < result["frames"] <= len(sent)  # never more frames than the server sent
    assert result["frames"] >= len(sent) - CONCURRENCY * (TOKENS + 2)  # all but those of the streams open at the end
