"""Shared fixtures: real target servers on free loopback ports, always stopped; and the fast tier's
promise checked: a test marked ``fast`` that starts a process fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator

import httpx
import pytest

from loadtests._stack import TargetServerProcess
from tests.no_process import no_child_processes

StartServer = Callable[..., TargetServerProcess]

# The suite's runs judge the server, on a CI machine that runs many of them at once: the
# harness_kept_up gate (which judges this machine) is off in them unless a test turns it on with
# --harness-lag-limit-ms, as the tests of the gate itself do. Every Locust child inherits this.
os.environ.setdefault("SSE_SOAK_HARNESS_LAG_LIMIT_MS", "0")


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``fast`` fails if it starts a child process, even one whose error it caught."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    with no_child_processes(request.node.nodeid) as refused:
        yield
    if refused:
        pytest.fail("\n".join(refused), pytrace=False)


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """``start_server("--max-num-seqs", "1", ...)`` starts a server; all are stopped at teardown."""
    started: list[TargetServerProcess] = []

    def start(*args: str) -> TargetServerProcess:
        server = TargetServerProcess.start(args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
        assert server.process.returncode is not None


@pytest.fixture(scope="module")
def default_server() -> Iterator[TargetServerProcess]:
    """One server with default settings, shared by a module's read-only tests."""
    server = TargetServerProcess.start(())
    yield server
    server.stop()


@pytest.fixture
def client(default_server: TargetServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=default_server.url, timeout=30) as http:
        yield http


def require_nginx() -> None:
    """Skip without nginx on PATH, unless SSE_SOAK_REQUIRE_NGINX=1 (CI installs it and sets
    that, so a missing nginx fails there instead of passing quietly)."""
    if shutil.which("nginx") is None:
        if os.environ.get("SSE_SOAK_REQUIRE_NGINX") == "1":
            pytest.fail("nginx is required (SSE_SOAK_REQUIRE_NGINX=1) but not on PATH")
        pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
