"""``python -m target_server``: readiness line, and one-line errors for bad options."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import httpx
import pytest

from loadtests.errors import ServerStartError
from loadtests.services.stack import TargetServerProcess
from target_server.__main__ import listening_socket
from target_server.config import ServerConfig
from tests.conftest import StartServer
from tests.target_server.cli_run import run_cli


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs must be at least 1"),
        (["--failure-injection-rate", "150"], "percentage in 0..100"),
        (["--failure-types", "meteor"], "invalid choice: 'meteor'"),
        (["--sse-keep-alive-interval", "soon"], "invalid float value: 'soon'"),
        (["--inter-token-latency", "-5"], "--inter-token-latency must be a finite number >= 0"),
        (["--port", "70000"], "--port must be in 0..65535"),
    ],
)
def test_bad_options_exit_2_with_one_line_that_names_them(args: list[str], complaint: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    assert complaint in result.stderr.strip().splitlines()[-1]
    assert result.stdout == ""  # started by hand: the refusal line for a harness is not printed


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--max-model-len", "0"], "--max-model-len must be at least 1"),
        (["--bogus-option", "3"], "unrecognized arguments: --bogus-option 3"),
        (["--failure-types", "meteor"], "argument --failure-types: invalid choice: 'meteor'"),
    ],
)
def test_a_server_that_refuses_to_start_is_reported_with_its_reason(args: list[str], reason: str) -> None:
    with pytest.raises(ServerStartError) as refused:
        TargetServerProcess.start(args, timeout=30)
    assert str(refused.value).startswith(f"target server exited with 2 before it was ready: {reason}")


def test_a_busy_port_is_reported_with_its_reason() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError) as refused:
            TargetServerProcess.start(["--port", str(port)], timeout=30)
    assert f"exited with 1 before it was ready: cannot listen on 127.0.0.1:{port}" in str(refused.value)


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("--port", str(port))
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_ready_line_names_a_url_that_answers(start_server: StartServer) -> None:
    server = start_server("--model", "my/model")
    assert server.url.startswith("http://127.0.0.1:")
    assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == "my/model"


@pytest.mark.fast
def test_the_command_line_defaults_are_the_config_defaults_and_options_parse_to_fields() -> None:
    assert ServerConfig.from_args([]) == ServerConfig()
    parsed = ServerConfig.from_args(
        [
            "--max-model-len",
            "4096",
            "--sse-keep-alive-interval",
            "0.25",
            "--failure-types",
            "stall",
            "disconnect",
            "--api-key",
            "k",
            "--inter-token-latency",
            "12.5",
        ]
    )
    assert (parsed.max_model_len, parsed.sse_keep_alive_interval, parsed.failure_types, parsed.api_key) == (
        4096,
        0.25,
        ("stall", "disconnect"),
        "k",
    )
    assert parsed.inter_token_latency == 12.5


@pytest.mark.fast
def test_accepted_connections_get_tcp_nodelay() -> None:
    """Without TCP_NODELAY each small SSE frame after the first waits for the client's delayed ACK."""

    async def scenario() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=listening_socket("127.0.0.1", 0))
        host, port = server.sockets[0].getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        nodelay = await accepted
        writer.close()
        server.close()
        await server.wait_closed()
        return nodelay

    assert asyncio.run(scenario()) == 1


def wait_until_gone(process: subprocess.Popen[str], url: str, timeout: float = 10.0) -> float:
    """Seconds until ``process`` exited and nothing accepts connections at ``url`` any more."""
    started = time.monotonic()
    process.wait(timeout)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2).close()
    return time.monotonic() - started


def test_a_server_started_by_the_harness_exits_when_the_harness_pipe_closes() -> None:
    server = TargetServerProcess.start(["--sse-keep-alive-interval", "0.1", "--time-to-first-token", "30000"])
    try:
        body = {"prompt": "hi", "max_tokens": 1, "stream": True}
        with httpx.Client(timeout=30) as client, client.stream("POST", server.url + "/v1/completions", json=body) as r:
            next(r.iter_raw())  # a stream is open: shutting down must not wait for it to finish
            assert server.process.stdin is not None
            server.process.stdin.close()  # what the kernel does when the harness dies, even by SIGKILL
            assert wait_until_gone(server.process, server.url) < 5
    finally:
        server.stop()


def test_a_server_started_by_hand_ignores_the_end_of_its_stdin() -> None:
    command = [sys.executable, "-m", "target_server", "--port", "0"]
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            ready = process.stdout.readline()  # stdin is at EOF from the start: a watch would have fired
            assert ready.startswith("target_server ready: "), ready
            assert httpx.get(ready.split()[2] + "/health", timeout=10).status_code == 200
            assert process.poll() is None
        finally:
            process.terminate()
            process.wait(10)


def test_the_server_runs_with_a_short_gil_switch_interval() -> None:
    """An intake thread tokenizing a long prompt may hold the loop for one switch interval at a
    time: 1 ms, not CPython's 5 ms (``target_server.__main__.SWITCH_INTERVAL_S``)."""
    script = (
        "import sys\n"
        "import target_server.__main__ as main\n"
        "main._AnnouncingServer.run = lambda server, sockets: print(sys.getswitchinterval())\n"
        "main.main(['--port', '0'])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.split()[-1]) == pytest.approx(0.001)
