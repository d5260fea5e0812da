"""The embedded proxy and each real proxy, started for real between a client and a real upstream.

What differs between them is pinned here, as measured (docs/proxies.md): the status a read
timeout before the headers gives, and whether a timeout after them shows as a broken body."""

from __future__ import annotations

import itertools
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import httpx
import psutil
import pytest

from loadtests.declare.options import option
from loadtests.errors import ServerStartError
from loadtests.services.proxies import real_proxies, start_real_proxy, timeout_notes
from loadtests.services.proxies.embedded import start_embedded_proxy
from loadtests.services.proxies.nginx import nginx_config, start_nginx
from loadtests.services.proxies.real import Setup, Upstream
from loadtests.services.stack import ChildService
from tests.conftest import StartServer, real_proxy_params, require_nginx, require_proxy
from tests.sse_stream import Streamed, stream

StartProxy = Callable[[str, float], ChildService]
REAL_PROXIES = real_proxies()
PROXY_KINDS = option("proxy").kind.choices or ()
"""``--proxy``'s choices."""
PROXIES = ["embedded", *REAL_PROXIES]
TIMEOUT_BEFORE_HEADERS = {"apache": 502}
"""What a read timeout before the response headers answers: 504 (a gateway timeout), but Apache's
mod_proxy_http says 502 (a proxy error)."""
CLEAN_END_AFTER_A_TIMEOUT = {"caddy"}
"""Proxies that end a stream cut by their read timeout with a valid final chunk: only the missing
``[DONE]`` shows the cut (the others close the connection without it, a broken body)."""


@pytest.fixture(params=real_proxy_params(*PROXIES))
def start_proxy(request: pytest.FixtureRequest) -> Iterator[StartProxy]:
    """Starts the parametrized proxy kind; every one started is stopped at teardown."""
    started: list[ChildService] = []
    kind = request.param
    if kind in REAL_PROXIES:
        require_proxy(kind)

    def start(upstream: str, read_timeout: float) -> ChildService:
        if kind == "embedded":
            service = start_embedded_proxy(upstream, read_timeout)
        else:
            service = start_real_proxy(kind, upstream, read_timeout)
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


class SilentUpstream:
    """A real TCP server that accepts connections and never answers (an engine stuck before headers)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.connections:
            connection.close()


class ResettingUpstream(SilentUpstream):
    """Reads the start of each request, then resets the connection (a server that crashed)."""

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.recv(1)
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.fixture
def silent_upstream() -> Iterator[SilentUpstream]:
    upstream = SilentUpstream()
    yield upstream
    upstream.close()


def test_silence_before_the_headers_is_a_504_or_apaches_502(
    start_proxy: StartProxy, silent_upstream: SilentUpstream
) -> None:
    proxy = start_proxy(silent_upstream.url, 0.5)
    started = time.monotonic()
    response = httpx.post(proxy.url + "/v1/completions", json={"prompt": "hi"}, timeout=30)
    assert response.status_code == TIMEOUT_BEFORE_HEADERS.get(proxy.name, 504)
    assert 0.5 <= time.monotonic() - started < 5


def test_silence_after_the_headers_cuts_the_stream(start_proxy: StartProxy, start_server: StartServer) -> None:
    server = start_server("--time-to-first-token", "3000")
    proxy = start_proxy(server.url, 0.5)
    with httpx.Client(base_url=proxy.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert result.response.status_code == 200 and result.frames == []  # no [DONE]: a cut stream
    assert result.complete == (proxy.name in CLEAN_END_AFTER_A_TIMEOUT)


def test_keepalive_comments_pass_through_and_keep_the_stream_alive(
    start_proxy: StartProxy, start_server: StartServer, request: pytest.FixtureRequest
) -> None:
    """Comments every 0.2 s keep a stream alive through a 0.5 s read timeout. Squid's is whole
    seconds on a whole-second timer: at 1 s it cut 7 streams of 8 after 0.2 s of silence (it fires
    anywhere in the second after the last read's second), so it gets 2 s."""
    server = start_server("--time-to-first-token", "1500", "--sse-keep-alive-interval", "0.2")
    proxy = start_proxy(server.url, 2.0 if request.node.callspec.params["start_proxy"] == "squid" else 0.5)
    with httpx.Client(base_url=proxy.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 3}, **{"X-Request-Id": "via-proxy"})
    assert result.complete and result.kinds().count("keepalive") >= 5
    assert result.kinds()[-4:] == ["data", "data", "data", "done"]
    assert {payload["id"] for payload in result.payloads()[:-1]} == {"cmpl-via-proxy"}  # the header went through
    assert result.response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert result.response.headers["vary"] == "Origin"  # and the server's headers came back


def test_frames_are_relayed_as_they_come_not_buffered(start_proxy: StartProxy, start_server: StartServer) -> None:
    server = start_server("--inter-token-latency", "200")
    proxy = start_proxy(server.url, 5.0)
    with httpx.Client(base_url=proxy.url, timeout=30) as client:
        result = stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 5})
    gaps = token_gaps(result)
    if proxy.name == "haproxy":  # without option http-no-delay (its default) it holds writes up to ~0.2 s
        assert len(gaps) == 4 and min(gaps) < 0.05
    else:
        assert len(gaps) == 4 and min(gaps) > 0.05  # 0.2 s apart when sent; buffered frames would arrive together


def token_gaps(result: Streamed) -> list[float]:
    token_times = [frame.t for frame in result.frames if frame.data and frame.data != "[DONE]"]
    return [later - earlier for earlier, later in itertools.pairwise(token_times)]


@pytest.mark.proxies
def test_haproxy_with_http_no_delay_relays_frames_as_they_come(start_server: StartServer) -> None:
    require_proxy("haproxy")
    server = start_server("--inter-token-latency", "200")
    proxy = start_real_proxy("haproxy", server.url, 5.0, no_delay=True)
    try:
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            gaps = token_gaps(stream(client, "/v1/completions", {"prompt": "hi", "max_tokens": 5}))
    finally:
        proxy.stop()
    assert len(gaps) == 4 and min(gaps) > 0.05


def test_error_statuses_and_bodies_pass_through(start_proxy: StartProxy, start_server: StartServer) -> None:
    server = start_server()
    proxy = start_proxy(server.url, 5.0)
    response = httpx.post(proxy.url + "/v1/completions", json={"prompt": "hi", "model": "nope"}, timeout=30)
    assert response.status_code == 404 and response.json()["error"]["param"] == "model"


def test_a_client_that_leaves_frees_the_server_slot(start_proxy: StartProxy, start_server: StartServer) -> None:
    server = start_server("--max-num-seqs", "1", "--time-to-first-token", "30000", "--sse-keep-alive-interval", "0.1")
    proxy = start_proxy(server.url, 5.0)
    body = {"prompt": "hi", "max_tokens": 1, "stream": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", proxy.url + "/v1/completions", json=body) as r:
        next(r.iter_raw())  # a keep-alive: the request holds the only slot
    deadline = time.monotonic() + 10
    while not re.search(r"^vllm:num_requests_running(\{[^}]*\})? 0\.0$", httpx.get(server.url + "/metrics").text, re.M):
        assert time.monotonic() < deadline, "the server still runs the abandoned request"
        time.sleep(0.05)


def test_the_embedded_proxy_says_502_for_an_unreachable_upstream() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    proxy = start_embedded_proxy(dead, 1.0)
    try:
        assert httpx.get(proxy.url + "/health", timeout=10).status_code == 502
    finally:
        proxy.stop()


def test_the_proxy_command_counts_what_it_did_when_stopped(silent_upstream: SilentUpstream) -> None:
    command = [sys.executable, "-m", "loadtests", "proxy", "--upstream", silent_upstream.url, "--read-timeout", "0.3"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        url = re.match(r"proxy ready: (http://127\.0\.0\.1:\d+) -> ", ready)
        assert url, ready
        assert httpx.get(url[1] + "/x", timeout=10).status_code == 504
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=10)
    assert "proxy: 1 requests, 1 read timeouts before headers (504), 0 after headers (cut)" in output


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--upstream", "ftp://x"], "http:// URL"),
        (["--upstream", "http://x", "--read-timeout", "0"], "number of seconds"),
        (["--listen", "nowhere", "--upstream", "http://x"], "expected HOST:PORT"),
    ],
)
def test_proxy_command_line_errors_are_one_line(args: list[str], complaint: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loadtests", "proxy", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and complaint in result.stderr.strip().splitlines()[-1]


@pytest.mark.fast
def test_nginx_config_is_sse_ready(tmp_path: Path) -> None:
    config = nginx_config(tmp_path, 8080, "http://127.0.0.1:9000/", 2.5)
    for line in (
        "listen 127.0.0.1:8080;",
        "proxy_pass http://127.0.0.1:9000;",
        "proxy_http_version 1.1;",
        "proxy_buffering off;",
        "proxy_read_timeout 2500ms;",
        "daemon off;",
    ):
        assert line in config


@pytest.mark.fast
def test_missing_nginx_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ServerStartError, match="needs nginx installed"):
        start_nginx("http://127.0.0.1:9", 1.0)


@pytest.mark.proxies
def test_nginx_leaves_no_files_behind(start_server: StartServer) -> None:
    require_nginx()
    server = start_server()
    nginx = start_nginx(server.url, 1.0)
    args = cast(list[str], nginx.process.args)
    directory = Path(args[args.index("-p") + 1])
    assert (directory / "nginx.conf").exists()
    nginx.stop()
    assert not directory.exists()


def setup(tmp_path: Path, read_timeout: float = 2.5, no_delay: bool = False) -> Setup:
    return Setup(tmp_path, 8080, Upstream("127.0.0.1", 9000), read_timeout, no_delay)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("kind", "lines"),
    [
        ("haproxy", ["bind 127.0.0.1:8080", "server upstream 127.0.0.1:9000", "timeout server 2500ms", "mode http"]),
        ("caddy", ['"127.0.0.1:8080"', '"dial": "127.0.0.1:9000"', '"read_timeout": "2500ms"', '"flush_interval": -1']),
        ("apache", ["Listen 127.0.0.1:8080", "ProxyTimeout 3", '"http://127.0.0.1:9000/" timeout=3 flushpackets=on']),
        ("squid", ["http_port 127.0.0.1:8080 accel", "cache_peer 127.0.0.1 parent 9000 0", "read_timeout 3 seconds"]),
    ],
)
def test_each_real_proxy_config_fronts_the_upstream_with_the_read_timeout(
    tmp_path: Path, kind: str, lines: list[str]
) -> None:
    config = REAL_PROXIES[kind].render(setup(tmp_path))
    for line in lines:
        assert line in config
    if kind != "caddy":  # whose server has no read or write timeout of its own by default
        assert "3600" in config  # the client side's timeouts far above the read timeout


@pytest.mark.fast
def test_haproxy_keeps_its_write_delay_unless_told() -> None:
    assert "    option http-no-delay" not in REAL_PROXIES["haproxy"].render(setup(Path("/x")))
    assert "    option http-no-delay\n" in REAL_PROXIES["haproxy"].render(setup(Path("/x"), no_delay=True))


@pytest.mark.fast
def test_the_proxies_that_take_whole_seconds_say_how_they_run_a_fraction() -> None:
    assert timeout_notes("squid", 0.5) == ["squid: --proxy-read-timeout 0.5 runs as 1 s (squid takes whole seconds)"]
    assert timeout_notes("apache", 2.0) == [] and timeout_notes("haproxy", 0.5) == []


@pytest.mark.fast
def test_every_real_proxy_and_litellm_is_a_proxy_kind() -> None:
    assert tuple(PROXY_KINDS) == ("none", "embedded", *REAL_PROXIES, "litellm")


@pytest.mark.fast
@pytest.mark.parametrize("kind", sorted(REAL_PROXIES))
def test_a_missing_real_proxy_is_one_line_naming_its_package(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    package = REAL_PROXIES[kind].package
    one_line = rf"^--proxy {kind} needs \S+ installed \(Debian: apt-get install {package}\)$"
    with pytest.raises(ServerStartError, match=one_line):
        start_real_proxy(kind, "http://127.0.0.1:9", 1.0)


@pytest.mark.fast
def test_a_real_proxy_fronts_plain_http_only() -> None:
    with pytest.raises(ServerStartError, match="--proxy haproxy fronts an http:// server only, not https://"):
        Upstream.of("https://example.com", "haproxy")


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan waits for a reaper that may never come in a container)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_proxy_exits_when_the_pipe_from_its_starter_closes(
    start_proxy: StartProxy, start_server: StartServer
) -> None:
    """The kernel closes the pipe when the process that started the proxy dies, even by SIGKILL;
    nginx's watchdog then stops nginx (and removes its files, which no one else is left to do)."""
    server = start_server("--sse-keep-alive-interval", "0.1", "--time-to-first-token", "30000")
    proxy = start_proxy(server.url, 5.0)
    tree = [proxy.pid, *(child.pid for child in psutil.Process(proxy.pid).children(recursive=True))]
    body = {"prompt": "hi", "max_tokens": 1, "stream": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", proxy.url + "/v1/completions", json=body) as r:
        next(r.iter_raw())  # a stream is open through the proxy
        assert proxy.process.stdin is not None
        proxy.process.stdin.close()
        assert proxy.process.wait(10) is not None
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in tree):
        assert time.monotonic() < deadline, "a process of the proxy outlived its starter"
        time.sleep(0.05)
    port = int(proxy.url.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    if proxy.name in REAL_PROXIES:  # its directory, which the watchdog removes: --remove DIR
        args = cast(list[str], proxy.process.args)
        assert not Path(args[args.index("--remove") + 1]).exists()


def test_an_upstream_that_resets_before_its_headers_is_a_502(start_proxy: StartProxy) -> None:
    upstream = ResettingUpstream()
    try:
        proxy = start_proxy(upstream.url, 5.0)
        assert httpx.get(proxy.url + "/health", timeout=10).status_code == 502
    finally:
        upstream.close()
