"""A redirect is an answer, never followed: not by either client, not by the preflight.

A small server on 127.0.0.1 lists one model and answers every generation request with a redirect:
completions with a 301 to another local port, chat with a 302 to an https URL standing for an
external host. Both targets are listeners of the test that count the connections they accept: none
may come, so nothing leaves for another origin (no connection, no DNS lookup of a real name).
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from tests.loadtests.locust_run import REPORT_LINE, ROOT, locust_command

pytestmark = pytest.mark.smoke

MISBEHAVING_LOCUSTFILE = ROOT / "tests" / "loadtests" / "misbehaving_locustfile.py"


@dataclass
class Trap:
    """A listener that only counts the connections it accepts."""

    sock: socket.socket
    accepted: list[tuple[str, int]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self) -> None:
        while True:
            try:
                connection, peer = self.sock.accept()
            except OSError:
                return  # closed by the fixture
            self.accepted.append(peer)
            connection.close()


def _trap() -> Trap:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    trap = Trap(sock)
    threading.Thread(target=trap.serve, daemon=True).start()
    return trap


@dataclass
class Redirector:
    url: str
    other_port: Trap
    external: Trap
    models_redirect: str | None = None
    """When set, ``GET /v1/models`` is a 301 to it (the preflight's case)."""


def _handler(redirector: Redirector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:
            pass

        def _answer(self, status: int, body: bytes = b"", location: str | None = None) -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/v1/models" and redirector.models_redirect:
                self._answer(301, location=redirector.models_redirect)
            elif self.path == "/v1/models":
                self._answer(200, json.dumps({"object": "list", "data": [{"id": "redirecting/tiny"}]}).encode())
            else:
                self._answer(404, b'{"detail": "Not Found"}')

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/v1/completions":
                self._answer(301, location=f"http://127.0.0.1:{redirector.other_port.port}/v1/completions")
            elif self.path == "/v1/chat/completions":
                self._answer(302, location=f"https://127.0.0.1:{redirector.external.port}/v1/chat/completions")
            else:
                self._answer(404, b'{"detail": "Not Found"}')

    return Handler


@pytest.fixture
def redirector() -> Iterator[Redirector]:
    traps = (_trap(), _trap())
    redirector = Redirector("", *traps)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(redirector))
    redirector.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield redirector
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        for trap in traps:
            trap.sock.close()


def _locust(redirector: Redirector, report_dir: Path, seconds: int) -> subprocess.CompletedProcess[str]:
    command = locust_command(
        MISBEHAVING_LOCUSTFILE,
        *("--headless", "-u", "2", "-r", "2", "-t", f"{seconds}s", "--host", redirector.url),
        *("--stop-timeout", "5", "--report-dir", str(report_dir), "--only-summary"),
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)


def test_a_redirect_is_a_rejected_row_naming_its_location_and_nothing_follows_it(
    redirector: Redirector, tmp_path: Path
) -> None:
    result = _locust(redirector, tmp_path, 3)
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    assert match, output[-3000:]
    rows = pd.read_parquet(Path(match["path"]) / "requests.parquet")
    finished = rows[rows["outcome"] != "stopped"]
    shown = finished[["client", "route", "outcome", "status", "error_message"]].to_string(max_colwidth=200)
    assert {(c, r) for c, r in zip(finished["client"], finished["route"], strict=True)} == {
        (client, route) for client in ("raw", "openai") for route in ("completions", "chat")
    }, shown
    assert (finished["outcome"] == "rejected").all(), shown
    for route, status, trap, scheme in (
        ("completions", 301, redirector.other_port, "http"),
        ("chat", 302, redirector.external, "https"),
    ):
        of_route = finished[finished["route"] == route]
        assert (of_route["status"] == status).all(), shown
        location = f"{scheme}://127.0.0.1:{trap.port}/v1/{'chat/' if route == 'chat' else ''}completions"
        wording = f"HTTP {status} redirect to {location}, not followed"
        assert of_route["error_message"].str.startswith(wording).all(), shown
        assert of_route.groupby("client")["error_message"].first().nunique() == 1, "both clients word it alike"
    assert redirector.other_port.accepted == [] and redirector.external.accepted == []
    assert "Traceback" not in output, output[-3000:]


def test_the_preflight_refuses_a_redirect_in_one_line_without_following_it(
    redirector: Redirector, tmp_path: Path
) -> None:
    redirector.models_redirect = f"https://127.0.0.1:{redirector.external.port}/v1/models"
    result = _locust(redirector, tmp_path, 2)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    line = f"{redirector.url}/v1/models: HTTP 301 redirect to {redirector.models_redirect}, not followed"
    assert line in output, output[-3000:]
    assert redirector.external.accepted == []
    assert not list(tmp_path.iterdir()), "a refused run makes no run directory"
