"""Each injected fault, seen by a real client exactly as it would see the real failure."""

from __future__ import annotations

import itertools

import httpx
import pytest

from tests.conftest import StartServer
from tests.sse_stream import stream

BODY = {"prompt": "hi", "max_tokens": 8}


def faulty(start_server: StartServer, kind: str, *extra: str) -> httpx.Client:
    server = start_server("--failure-injection-rate", "100", "--failure-types", kind, *extra)
    return httpx.Client(base_url=server.url, timeout=30)


@pytest.mark.parametrize(
    ("kind", "status", "error_type"),
    [("server_error", 500, "InternalServerError"), ("rate_limit", 429, "RateLimitError")],
)
def test_pre_stream_faults_answer_with_an_error_body(
    start_server: StartServer, kind: str, status: int, error_type: str
) -> None:
    with faulty(start_server, kind) as client:
        for streaming in (True, False):
            response = client.post("/v1/completions", json={**BODY, "stream": streaming})
            assert response.status_code == status
            error = response.json()["error"]
            assert (error["code"], error["type"]) == (status, error_type)


def test_inband_error_is_http_200_then_an_error_frame_then_done(start_server: StartServer) -> None:
    with faulty(start_server, "inband_error") as client:
        result = stream(client, "/v1/completions", BODY)
    assert result.response.status_code == 200
    assert result.kinds() == ["data"] * 4 + ["error", "done"]
    assert result.payloads()[4]["error"]["code"] == 500


def test_inband_error_without_streaming_is_a_500(start_server: StartServer) -> None:
    with faulty(start_server, "inband_error") as client:
        response = client.post("/v1/completions", json=BODY)
    assert response.status_code == 500 and response.json()["error"]["code"] == 500


def test_stall_is_a_silence_mid_stream_then_the_stream_completes(start_server: StartServer) -> None:
    with faulty(start_server, "stall", "--stall-seconds", "0.6") as client:
        result = stream(client, "/v1/completions", BODY)
    assert result.kinds() == ["data"] * 8 + ["done"]
    times = [frame.t for frame in result.frames]
    longest_gap, where = max(
        (later - earlier, index) for index, (earlier, later) in enumerate(itertools.pairwise(times))
    )
    assert longest_gap >= 0.6 * 0.9 and where == 3  # between token 4 and token 5 (10% for client jitter)


def test_stall_is_covered_by_keep_alive_when_it_is_on(start_server: StartServer) -> None:
    with faulty(start_server, "stall", "--stall-seconds", "0.5", "--sse-keep-alive-interval", "0.1") as client:
        result = stream(client, "/v1/completions", BODY)
    assert result.kinds().count("keepalive") >= 3
    assert result.kinds()[-1] == "done"


def test_disconnect_drops_the_connection_without_done(start_server: StartServer) -> None:
    with faulty(start_server, "disconnect") as client:
        result = stream(client, "/v1/completions", BODY)
        assert result.response.status_code == 200
        assert not result.complete
        assert result.kinds() == ["data"] * 4
        with pytest.raises(httpx.RemoteProtocolError):
            client.post("/v1/completions", json=BODY)  # non-streaming: the body is cut short
        assert client.get("/health").status_code == 200  # the server itself is fine


def test_the_failure_rate_is_a_share_of_requests(start_server: StartServer) -> None:
    server = start_server("--failure-injection-rate", "30", "--failure-types", "server_error", "--seed", "7")
    with httpx.Client(base_url=server.url) as client:
        statuses = [client.post("/v1/completions", json={**BODY, "max_tokens": 1}).status_code for _ in range(200)]
    failed = statuses.count(500)
    assert 30 <= failed <= 90, failed  # 30% of 200 = 60; the band is several standard deviations
    assert set(statuses) == {200, 500}


def test_the_same_seed_draws_the_same_faults(start_server: StartServer) -> None:
    args = ("--failure-injection-rate", "50", "--failure-types", "server_error", "rate_limit", "--seed", "3")
    runs = []
    for _ in range(2):
        server = start_server(*args)
        with httpx.Client(base_url=server.url) as client:
            runs.append([client.post("/v1/completions", json={**BODY, "max_tokens": 1}).status_code for _ in range(40)])
    assert runs[0] == runs[1]
    assert {200, 429, 500} <= set(runs[0])


def test_no_faults_by_default(client: httpx.Client) -> None:
    statuses = {client.post("/v1/completions", json={**BODY, "max_tokens": 1}).status_code for _ in range(50)}
    assert statuses == {200}
