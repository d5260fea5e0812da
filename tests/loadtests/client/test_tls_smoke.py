"""An https target with a self-signed certificate: refused in one line naming the problem and the
options, served with ``--ca-cert``, and with ``--insecure`` served, said loudly and recorded.

The bundled server runs under uvicorn's TLS on a free loopback port, with a certificate for
127.0.0.1 made by the test; the run is the misbehaving locustfile's (both clients, both routes).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.loadtests.client.certificates import self_signed
from tests.loadtests.locust_run import REPORT_LINE, ROOT, locust_command

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

LOCUSTFILE = ROOT / "tests" / "loadtests" / "misbehaving_locustfile.py"
SERVE_TLS = """
import sys
import uvicorn
from target_server.__main__ import _AnnouncingServer, listening_socket
from target_server.app import create_app
from target_server.config import ServerConfig

config = ServerConfig.from_args(sys.argv[3:])
sock = listening_socket("127.0.0.1", 0)
url = f"https://127.0.0.1:{sock.getsockname()[1]}"
uv = uvicorn.Config(create_app(config), log_level="warning", access_log=False, ssl_certfile=sys.argv[1],
                    ssl_keyfile=sys.argv[2])
_AnnouncingServer(uv, url, config.model).run(sockets=[sock])
"""
READY_PREFIX = "target_server ready: "


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The bundled server over https: its URL and its certificate."""
    yield from _serve_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def slow_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The same, streaming a token every 20 ms."""
    yield from _serve_tls(tmp_path_factory.mktemp("slow-tls"), "--inter-token-latency", "20")


def _serve_tls(directory: Path, *server_args: str) -> Iterator[tuple[str, Path]]:
    cert, key = self_signed(directory)
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE_TLS, str(cert), str(key), *server_args],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,  # the server exits when its stdin closes, too
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    try:
        url = ""
        deadline = time.monotonic() + 30
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while not url:
                assert selector.select(max(0.0, deadline - time.monotonic())), "no ready line within 30 s"
                line = process.stdout.readline()
                assert line, f"the server exited with {process.poll()} before it was ready"
                if line.startswith(READY_PREFIX):
                    url = line[len(READY_PREFIX) :].split()[0]
        yield url, cert
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        for pipe in (process.stdout, process.stdin):
            if pipe is not None:
                pipe.close()


def _run(url: str, report_dir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = locust_command(
        LOCUSTFILE,
        *("--headless", "-u", "2", "-r", "2", "-t", "3s", "--host", url, "--stop-timeout", "5"),
        *("--report-dir", str(report_dir), "--only-summary", *options),
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)


def test_an_untrusted_certificate_is_one_line_naming_the_problem_and_the_options(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = tls_server
    result = _run(url, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    line = next(line for line in output.splitlines() if "certificate" in line)
    assert f"the TLS certificate of {url}/v1/models was refused (certificate verify failed: self-signed" in line
    assert "--ca-cert FILE" in line and "--insecure" in line and "is the server running" not in output
    assert "Traceback" not in output and not list(tmp_path.iterdir())


def _passed_run(result: subprocess.CompletedProcess[str]) -> tuple[dict[str, object], pd.DataFrame]:
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    assert match and result.returncode == 0, output[-3000:]
    run_dir = Path(match["path"])
    rows = pd.read_parquet(run_dir / "requests.parquet")
    finished = rows[rows["outcome"] != "stopped"]
    assert set(finished["client"]) == {"raw", "openai"} and (finished["outcome"] == "ok").all(), finished
    assert finished["finish_reason"].isin(["length", "stop"]).all(), finished["finish_reason"]
    return json.loads((run_dir / "summary.json").read_text())["settings"], finished


def test_the_certificate_given_with_ca_cert_is_trusted_by_every_client(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, cert = tls_server
    result = _run(url, tmp_path, "--ca-cert", str(cert))
    settings, _ = _passed_run(result)
    assert settings["ca_cert"] == str(cert) and settings["insecure"] is False
    assert "--insecure" not in result.stdout + result.stderr
    run_dir = Path(REPORT_LINE.search(result.stdout)["path"])  # type: ignore[index]
    server = json.loads((run_dir / "summary.json").read_text())["server_metrics"]
    assert server["scrapes"] >= 2, server  # the server's own view, scraped over https too


def test_insecure_runs_says_so_loudly_and_is_recorded(tls_server: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = tls_server
    result = _run(url, tmp_path, "--insecure")
    settings, _ = _passed_run(result)
    assert settings["insecure"] is True and settings["ca_cert"] is None
    assert "WARNING: --insecure: TLS certificates are NOT verified" in result.stderr


SCRAPE_TLS = """
from gevent import monkey
monkey.patch_all()  # as in a Locust process: the ssl module's sockets are gevent's
import gc, json, sys
from pathlib import Path
import gevent, gevent.hub
from loadtests.client import tls as _tls
from loadtests.record.server_metrics import ServerMetricsScraper
url, directory, ca_cert = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if ca_cert:
    _tls.configure(ca_cert=ca_cert)
scraper = ServerMetricsScraper(url, directory, interval=0.01, flush_interval=0.02)
scraper.start()
while scraper.scrapes < 10 and scraper.refusal is None:
    gevent.sleep(0.01)
unavailable = scraper.stop()
hubs = [thing for thing in gc.get_objects() if isinstance(thing, gevent.hub.Hub)]
print(json.dumps({"hubs": len(hubs), "scrapes": scraper.scrapes, "unavailable": unavailable}))
"""


def _scrape(url: str, directory: Path, ca_cert: str) -> dict[str, object]:
    command = [sys.executable, "-c", SCRAPE_TLS, url, str(directory), ca_cert]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    *said, found = result.stdout.splitlines()
    return {**json.loads(found), "said": said}


def test_an_https_server_is_scraped_over_tls_in_the_scrapers_thread_trusting_what_the_run_trusts(
    tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, cert = tls_server
    found = _scrape(url, tmp_path / "trusted", str(cert))
    assert found["hubs"] == 1 and found["unavailable"] is None and found["scrapes"] >= 10  # type: ignore[operator]
    samples = pd.read_parquet(tmp_path / "trusted")
    assert "vllm:num_requests_running" in set(samples["name"]) and samples["time"].nunique() == found["scrapes"]
    refused = _scrape(url, tmp_path / "untrusted", "")  # the system's CAs only
    assert str(refused["unavailable"]).startswith(f"GET {url}/metrics failed (TLS: certificate verify failed")
    assert "--ca-cert FILE" in str(refused["unavailable"]) and refused["scrapes"] == 0, refused
    assert refused["said"] == [f"sse-soak: no server metrics: {refused['unavailable']}; the run goes on without them"]
    assert not (tmp_path / "untrusted").exists()


LONG_STREAMS = """
from loadtests import Expect, RequestMix, RequestSpec, Scenario, SSEUser

scenario = Scenario(name="long_tls_streams", gates=[Expect("some_ok", where=None, require="outcome != 'cut'")])


class LongStreams(SSEUser):
    mix = RequestMix([RequestSpec("long", "completions", 20, max_tokens=1000)])
"""


def test_an_https_run_stopped_mid_stream_ends_and_keeps_what_arrived(
    slow_tls_server: tuple[str, Path], tmp_path: Path
) -> None:
    """Every user is 20 s into its stream when the 3 s run stops it. Before: reading what had
    arrived, the stopped reader fed the TLS socket's ciphertext to the HTTP parser, whose error
    ended the stream as a cut and swallowed the stop; the user went on, and Locust waited for it
    for ever."""
    url, cert = slow_tls_server
    locustfile = tmp_path / "long_tls_streams.py"
    locustfile.write_text(LONG_STREAMS)
    command = locust_command(
        locustfile,
        *("--headless", "-u", "4", "-r", "4", "-t", "3s", "--host", url, "--ca-cert", str(cert)),
        *("--report-dir", str(tmp_path / "reports"), "--only-summary"),
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=ROOT, stdin=subprocess.DEVNULL)
    match = REPORT_LINE.search(result.stdout)
    assert match, (result.stdout + result.stderr)[-3000:]
    rows = pd.read_parquet(Path(match["path"]) / "requests.parquet")
    assert list(rows["outcome"]) == ["stopped"] * 4, rows[["outcome", "error_message"]]
    assert (rows["data_frames"] > 50).all()  # what had arrived, about 150 frames each, kept
    assert "Traceback" not in result.stderr


def test_a_ca_cert_that_is_no_file_is_one_line(tmp_path: Path) -> None:
    result = _run("https://127.0.0.1:9", tmp_path, "--ca-cert", str(tmp_path / "missing.pem"))
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert f"--ca-cert {tmp_path / 'missing.pem'}: no such file" in output and "Traceback" not in output
