"""Nothing outlives the run: ``kill -9`` of Locust takes the services it started with it.

A run starts the bundled server and a proxy (the embedded one, or nginx under our watchdog). Each
holds a pipe from Locust that the kernel closes when Locust dies, however it dies; the services
must then exit within seconds and free their ports. The watchdog's own contract (exit as its
command exited, stop it when the pipe closes) is checked here too, without Locust.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import real_proxy_params, require_nginx
from tests.loadtests.locust_run import LiveLocust

pytestmark = pytest.mark.extended

IDLE = re.compile(r"^vllm:num_requests_running(\{[^}]*\})? 0\.0$", re.MULTILINE)
"""The server's running gauge at 0 (labelled, as vLLM's: ``engine``, ``model_name``)."""

SERVICE = (
    r"^(?P<name>target server|embedded proxy|nginx|haproxy|caddy|apache|squid): (?P<url>http://\S+) "
    r"\(pid (?P<pid>\d+)\)$"
)


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan waits for a reaper that may never come in a container)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def with_descendants(pid: int) -> set[int]:
    return {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}


def nginx_directory(watchdog_pid: int) -> Path:
    command = psutil.Process(watchdog_pid).cmdline()
    return Path(command[command.index("-p") + 1])


def refuses_connections(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.smoke
@pytest.mark.parametrize("proxy", real_proxy_params("embedded", "nginx"))
def test_kill_9_of_locust_stops_every_service_it_started(tmp_path: Path, proxy: str) -> None:
    if proxy == "nginx":
        require_nginx()
    pids: set[int] = set()
    with LiveLocust("proxy_timeout", tmp_path, "--headless", "-u", "2", "-t", "60s", "--proxy", proxy) as live:
        try:
            live.wait_for(SERVICE, count=2)
            services = {match["name"]: match for match in live.matching(SERVICE)}
            assert set(services) == {"target server", "embedded proxy" if proxy == "embedded" else "nginx"}
            for service in services.values():
                pids |= with_descendants(int(service["pid"]))  # nginx: the watchdog, its master and worker
            nginx_files = [nginx_directory(int(services["nginx"]["pid"]))] if "nginx" in services else []
            live.wait_for(r"^run directory: ")
            metrics = services["target server"]["url"] + "/metrics"
            deadline = time.monotonic() + 30
            while IDLE.search(httpx.get(metrics, timeout=10).text):
                assert time.monotonic() < deadline, "no stream reached the server"
                time.sleep(0.05)  # polling the server's gauge: streams are open when it moves

            live.process.kill()  # SIGKILL: no handler, no atexit, no quitting event
            live.process.wait(10)
            killed = time.monotonic()
            while any(running(pid) for pid in pids):
                assert time.monotonic() - killed < 10, f"still running: {sorted(p for p in pids if running(p))}"
                time.sleep(0.05)
            gone_after = time.monotonic() - killed
            assert gone_after < 5, f"the services took {gone_after:.1f} s to go"
            for service in services.values():
                assert refuses_connections(service["url"]), service[0]
            for directory in nginx_files:
                assert not directory.exists(), f"nginx's files outlived the run: {directory}"
        finally:
            # Whatever a failed test left, by its id, before LiveLocust closes its output pipe: the
            # services write their stderr into it.
            for pid in pids:
                with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                    if running(pid):
                        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def watchdog(*command: str, cpus: int | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m loadtests.services.parent_watch [--cpus N] -- COMMAND`` with a stdin pipe from this test;
    ended by its id afterwards if a failed test left it running."""
    confined = [] if cpus is None else ["--cpus", str(cpus)]
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtests.services.parent_watch", *confined, "--", *command],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdin is not None:
            process.stdin.close()


@pytest.mark.parametrize(("script", "code"), [("raise SystemExit(3)", 3), ("import os; os.kill(os.getpid(), 9)", -9)])
def test_the_watchdog_exits_as_its_command_did(script: str, code: int) -> None:
    with watchdog(sys.executable, "-c", script) as process:
        assert process.wait(30) == code


def test_the_watchdog_runs_its_command_on_the_cpus_it_is_given() -> None:
    cpu = min(os.sched_getaffinity(0))
    script = "import os, sys; sys.exit(sorted(os.sched_getaffinity(0)) != [int(sys.argv[1])])"
    with watchdog(sys.executable, "-c", script, str(cpu), cpus=cpu) as process:
        assert process.wait(30) == 0
    refused = subprocess.run(
        [sys.executable, "-m", "loadtests.services.parent_watch", "--cpus", "x", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "'x' is not a comma-separated list of CPU numbers" in refused.stderr


@pytest.mark.parametrize("stop", ["pipe closes", "SIGTERM", "SIGHUP"])
def test_the_watchdog_stops_its_command_by_pid(tmp_path: Path, stop: str) -> None:
    marker = tmp_path / "started"
    script = f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('x'); time.sleep(120)"
    commands: list[psutil.Process] = []
    try:
        with watchdog(sys.executable, "-c", script) as process:
            deadline = time.monotonic() + 30
            while not marker.exists():
                assert time.monotonic() < deadline and process.poll() is None, "the command never started"
                time.sleep(0.02)  # polling a file the command writes once it runs
            commands += psutil.Process(process.pid).children()
            assert len(commands) == 1 and process.stdin is not None
            if stop == "pipe closes":
                process.stdin.close()
            else:  # a scheduler's SIGTERM, or a hang-up: either is passed on as SIGTERM
                process.send_signal(signal.Signals[stop])
            assert process.wait(10) == -signal.SIGTERM  # the command ended by the SIGTERM it was passed
            assert not running(commands[0].pid)
    finally:
        for command in commands:  # by its id, should the watchdog have left it
            with contextlib.suppress(psutil.NoSuchProcess):
                command.kill()
