"""No secret a user gives reaches anything a command writes or prints. Each command that writes
output runs with secrets planted (a ``--host`` with a user and password and a query token, an
``--api-key``, a bundled server's key in ``--server-args``, a proxy URL with credentials in the
environment), then every console line and every file it wrote (parquet read cell by cell, with its
schema's metadata) is searched for each secret in every form it could take: as given, URL-decoded,
and base64 as HTTP Basic auth sends it. Found by test, not by reading: a new path that leaks fails here.
"""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx
import pyarrow.parquet as pq
import pytest

from tests.conftest import StartServer
from tests.loadtests.live_scrape import LIVE_LINE
from tests.loadtests.locust_run import (
    REPORT_LINE,
    ROOT,
    LiveLocust,
    locust_command,
    soak_command,
)
from tests.loadtests.misbehaving import MISBEHAVING_LOCUSTFILE, MisbehavingServer, start_misbehaving_server
from tests.user_pytest import user_pytest

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

USER = "sseuser"
PASSWORD = "Pw!Host7Secret"
"""Given percent-encoded in the URL (``Pw%21Host7Secret``): both forms are searched."""
QUERY_TOKEN = "Query7Secret"
API_KEY = "Key7Secret+/="
SERVER_KEY = "Srv7Secret"
PROXY_PASSWORD = "Proxy7Secret"


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


SECRET_FORMS = {
    "host password": PASSWORD,
    "host password, URL-encoded": quote(PASSWORD, safe=""),
    "host password's core": "Host7Secret",
    "host credentials as Basic auth": _basic(USER, PASSWORD),
    "host credentials as Basic auth, encoded": _basic(USER, quote(PASSWORD, safe="")),
    "query token": QUERY_TOKEN,
    "API key": API_KEY,
    "API key's core": "Key7Secret",
    "API key, URL-encoded": quote(API_KEY, safe=""),
    "API key, base64": base64.b64encode(API_KEY.encode()).decode(),
    "server key": SERVER_KEY,
    "proxy password": PROXY_PASSWORD,
    "proxy credentials as Basic auth": _basic("proxyuser", PROXY_PASSWORD),
}
"""Every form a secret could take where a command writes or prints it."""

PROXY_ENVIRONMENT = {
    "HTTP_PROXY": f"http://proxyuser:{PROXY_PASSWORD}@127.0.0.1:9",
    "HTTPS_PROXY": f"http://proxyuser:{PROXY_PASSWORD}@127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}
"""A proxy with credentials in the environment, bypassed for loopback as a user's shell would have it."""


def credentialed(url: str) -> str:
    """``url`` (``http://HOST:PORT``) with the planted user, password and query token."""
    return url.replace("http://", f"http://{USER}:{quote(PASSWORD, safe='')}@") + f"/?token={QUERY_TOKEN}"


def found_secrets(text: str) -> list[str]:
    return [name for name, form in SECRET_FORMS.items() if form in text]


def parquet_text(path: Path) -> str:
    """Every cell, column name and metadata value of a parquet file, as text."""
    table = pq.read_table(path)
    metadata = table.schema.metadata or {}
    shown = [repr(table.column_names), *(f"{key!r}: {value!r}" for key, value in metadata.items())]
    return "\n".join([*shown, repr(table.to_pylist())])


def leaks_in(directory: Path) -> dict[str, list[str]]:
    """``{file: [secret names]}`` for every file under ``directory`` holding a secret in any form."""
    leaks: dict[str, list[str]] = {}
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        text = path.read_bytes().decode("latin-1")
        if path.suffix == ".parquet":
            text += parquet_text(path)
        if found := found_secrets(text):
            leaks[str(path.relative_to(directory))] = found
    return leaks


@dataclass
class Written:
    """What one command printed and where it wrote."""

    console: str = ""
    directories: list[Path] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    """What the command was seen to do, so a command that did nothing cannot pass unseen."""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **PROXY_ENVIRONMENT, **extra}


def _run(command: list[str], env: dict[str, str] | None = None, timeout: float = 240) -> tuple[int, str]:
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env or _env(),
        stdin=subprocess.DEVNULL,
    )
    return result.returncode, result.stdout + result.stderr


def _locust(*args: str, locustfile: Path = MISBEHAVING_LOCUSTFILE, seconds: int = 3) -> list[str]:
    return locust_command(
        locustfile, "--headless", "-u", "2", "-r", "2", "-t", f"{seconds}s", "--stop-timeout", "5", *args
    )


def _run_dir(output: str) -> Path:
    match = REPORT_LINE.search(output)
    assert match, output[-3000:]
    return Path(match["path"])


@pytest.fixture(scope="module")
def misbehaving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MisbehavingServer]:
    """A server whose streams are well formed and whose ``/metrics`` answers 404 (its notice names the URL)."""
    server = start_misbehaving_server(tmp_path_factory.mktemp("server") / "modes.jsonl", lifetime=900, modes=("ok",))
    yield server
    server.stop()


Command = Callable[[Path, MisbehavingServer, StartServer, pytest.Pytester], Written]


def headless_raw_and_openai_users(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    log = ("--logfile", str(reports / "locust.log"), "--html", str(reports / "locust.html"))
    code, output = _run(_locust("--host", credentialed(server.url), "--report-dir", str(reports), *log))
    assert code == 0 and "no server metrics: GET http://127.0.0.1:" in output, output[-3000:]
    assert (reports / "locust.log").stat().st_size > 0
    assert "127.0.0.1" in (reports / "locust.html").read_text()  # Locust's report names the host, bare
    checked = ["raw and openai users", "metrics 404 notice", "Locust's log file", "Locust's --html report"]
    return Written(output, [reports], checked)


def embedded_proxy_in_front_of_the_host(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    code, output = _run(
        _locust("--host", credentialed(server.url), "--proxy", "embedded", "--report-dir", str(reports))
    )
    assert code == 0 and "embedded proxy: " in output, output[-3000:]
    return Written(output, [reports], ["--proxy embedded before --host"])


def proxy_command(_: Path, server: MisbehavingServer, *__: object) -> Written:
    command = [sys.executable, "-m", "loadtests", "proxy", "--upstream", credentialed(server.url)]
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL}
    proxy = subprocess.Popen(command, text=True, cwd=ROOT, env=_env(), **streams)  # type: ignore[call-overload]
    assert proxy.stdout is not None
    try:
        ready = proxy.stdout.readline()
    finally:
        proxy.send_signal(signal.SIGINT)
        rest, _ = proxy.communicate(timeout=30)
    assert ready.startswith("proxy ready: http://127.0.0.1:"), ready + rest
    return Written(ready + rest, [], ["python -m loadtests proxy"])


def processes_2(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    html = ("--html", str(reports / "locust.html"))
    command = _locust("--host", credentialed(server.url), "--processes", "2", "--report-dir", str(reports), *html)
    code, output = _run(command)
    assert code == 0 and "worker-1" in _run_dir(output).joinpath("requests.csv").read_text(), output[-3000:]
    assert (reports / "locust.html").exists()
    return Written(output, [reports], ["two worker processes", "Locust's --html report"])


UNAUTHORIZED = re.compile(r"(?<![\d:.])401(?![\d])")
"""A 401 status in a console line (never part of a port, a time or a count)."""


def basic_auth_server(reports: Path, open_server: MisbehavingServer, *__: object) -> Written:
    """A server that answers 401 to any request without the ``--host`` credentials as Basic auth:
    the preflight, both users, the prompt sizing and the metrics scraper (its 404 then, not 401)
    still send them, from the local process and from each worker; and from a test the web UI's
    form starts with that server's credentialed URL typed in, after a test of another server."""
    log = reports.parent / "basic.jsonl"
    server = start_misbehaving_server(log, lifetime=300, modes=("ok",), basic=f"{USER}:{PASSWORD}")
    reports.mkdir(parents=True, exist_ok=True)
    console = ""
    try:
        for processes in ((), ("--processes", "2")):
            html = ("--html", str(reports / f"locust{len(processes)}.html"))
            host = ("--host", credentialed(server.url))
            code, output = _run(_locust(*host, "--report-dir", str(reports), *processes, *html))
            console += output
            assert code == 0 and "answered HTTP 404" in output and not UNAUTHORIZED.search(output), output[-3000:]
            rows = _run_dir(output).joinpath("requests.csv").read_text().splitlines()
            ok = [row for row in rows[1:] if ",ok," in row]
            assert any("raw" in row for row in ok) and any("openai" in row for row in ok), rows[:5]
        port = _free_port()
        web = ("--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "2", "-r", "2", "-t", "3s")
        with LiveLocust("mixed_truncate", reports, "--host", open_server.url, *web) as locust:
            locust.wait_for(REPORT_LINE.pattern, timeout=120)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, trust_env=False) as client:
                form = {"user_count": "2", "spawn_rate": "2", "run_time": "3s", "host": credentialed(server.url)}
                swarm = client.post("/swarm", data=form)
                assert swarm.status_code == 200 and swarm.json()["success"], swarm.text
                run_dir = Path(locust.wait_for(REPORT_LINE.pattern, count=2, timeout=120)["path"])
                console += swarm.text + client.get("/").text
            locust.signal(signal.SIGINT)
            locust.wait(60)
            console += locust.output
        rows = run_dir.joinpath("requests.csv").read_text().splitlines()
        ok = [row for row in rows[1:] if ",ok," in row]
        assert any("raw" in row for row in ok) and any("openai" in row for row in ok), rows[:5]
        assert not UNAUTHORIZED.search(console), console[-3000:]
    finally:
        server.stop()
    checked = ["Basic auth sent by both users and the metrics scraper", "a web UI test's typed credentials"]
    return Written(console, [reports], checked)


def api_key_in_the_environment(reports: Path, _: MisbehavingServer, start_server: StartServer, *__: object) -> Written:
    server = start_server("--api-key", API_KEY)
    command = _locust(
        "--host", server.url, "--report-dir", str(reports), locustfile=ROOT / "scenarios" / "mixed_truncate.py"
    )
    code, output = _run(command, _env(SSE_SOAK_API_KEY=API_KEY))
    run_dir = _run_dir(output)
    assert code in (0, 1) and (run_dir / "server_metrics.parquet").exists(), output[-3000:]
    return Written(output, [reports], ["--api-key", "metrics scraped with the key"])


def bundled_server_key_in_server_args(reports: Path, *_: object) -> Written:
    command = _locust(
        "--server-args", f"--api-key {SERVER_KEY}", "--report-dir", str(reports),
        locustfile=ROOT / "scenarios" / "mixed_truncate.py",
    )  # fmt: skip
    code, output = _run(command)
    assert code in (0, 1) and _run_dir(output), output[-3000:]
    return Written(output, [reports], ["--server-args --api-key"])


def soak(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    command = soak_command(
        reports, "--scenario", "mixed_truncate", "--duration", "6s", "--host", credentialed(server.url)
    )
    code, output = _run(command)
    assert code in (0, 1, 3) and REPORT_LINE.search(output), output[-3000:]
    return Written(output, [reports], ["soak"])


def report_and_compare(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    runs = []
    console = ""
    for _run_number in range(2):
        code, output = _run(_locust("--host", credentialed(server.url), "--report-dir", str(reports)))
        assert code == 0, output[-3000:]
        runs.append(_run_dir(output))
        console += output
    code, output = _run([sys.executable, "-m", "loadtests", "report", str(runs[0])])
    assert code == 0, output[-3000:]
    console += output
    code, output = _run([sys.executable, "-m", "loadtests", "compare", str(runs[0]), str(runs[1])])
    assert code in (0, 1), output[-3000:]
    return Written(console + output, [reports], ["report", "compare"])


def pytest_plugin(reports: Path, server: MisbehavingServer, _: StartServer, pytester: pytest.Pytester) -> Written:
    os.environ.update(PROXY_ENVIRONMENT)  # pytester's child inherits this process's environment
    try:
        args = ("--pyargs", "loadtests.smoke", "-k", "mixed_truncate", "--sse-soak-report-dir", str(reports))
        result, seen = user_pytest(
            pytester, *args, "--sse-soak-host", credentialed(server.url), "--sse-soak-duration", "3"
        )
    finally:
        for name in PROXY_ENVIRONMENT:
            os.environ.pop(name, None)
    assert seen, "\n".join(result.outlines[-40:])
    return Written("\n".join(result.outlines + result.errlines), [reports, pytester.path], ["pytest plugin"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def web_ui(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    web = ("--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "2", "-r", "2", "-t", "4s")
    answers = []
    for name, value in PROXY_ENVIRONMENT.items():
        os.environ[name] = value
    try:
        with LiveLocust("mixed_truncate", reports, "--host", credentialed(server.url), *web) as locust:
            run_dir = Path(locust.wait_for(r"^run directory: (.+)$", timeout=90)[1])
            with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
                answers.append(client.get("/sse-soak/live.json").text)
                answers.append(client.get("/stats/requests").text)
                answers.append(client.get("/").text)
                locust.wait_for(REPORT_LINE.pattern, timeout=120)
                for path in ("/sse-soak/live.json", "/stats/requests", "/sse-soak/report.html"):
                    answers.append(client.get(path).text)
                # a test started from the form, its host typed with credentials: the answer, the page
                # and Locust's own report show it bare, and the test still reaches the server
                form = {"user_count": "2", "spawn_rate": "2", "run_time": "3s", "host": credentialed(server.url)}
                swarm = client.post("/swarm", data=form)
                assert swarm.status_code == 200 and swarm.json()["success"], swarm.text
                answers.append(swarm.text)
                answers.append(client.get("/").text)
                locust.wait_for(REPORT_LINE.pattern, count=2, timeout=120)
                answers.append(client.get("/").text)
                answers.append(client.get("/stats/report").text)
                for file in ("summary.json", "manifest.json", "report.html"):
                    answer = client.get(f"/sse-soak/runs/{run_dir.name}/{file}")
                    assert answer.status_code == 200, (file, answer.status_code)
                    answers.append(answer.text)
            locust.signal(signal.SIGINT)
            locust.wait(60)
            console = locust.output
    finally:
        for name in PROXY_ENVIRONMENT:
            os.environ.pop(name, None)
    return Written(console + "\n".join(answers), [reports], ["web UI JSON, tab and run files"])


def live_metrics(reports: Path, server: MisbehavingServer, *_: object) -> Written:
    """The live metrics scraped while the run goes and once it is judged: ``run_info`` names the
    server as the run shows it, redacted."""
    command = _locust(
        "--host", credentialed(server.url), "--report-dir", str(reports), "--live-metrics-port", "0",
        "--live-metrics-linger", "120", seconds=6,
    )  # fmt: skip
    answers = []
    os.environ.update(PROXY_ENVIRONMENT)
    try:
        with LiveLocust.of(command) as locust:
            url = locust.wait_for(LIVE_LINE)[1]
            with httpx.Client(timeout=30, trust_env=False) as client:
                deadline = time.monotonic() + 120
                while "sse_soak_requests_total{" not in (answer := client.get(url).text):
                    assert time.monotonic() < deadline, answer[-2000:]
                    time.sleep(0.2)  # the next scrape: what is awaited is the first row counted
                answers.append(answer)
                locust.wait_for(REPORT_LINE.pattern, timeout=120)
                answers.append(client.get(url).text)
            code = locust.wait(60)
            console = locust.output
    finally:
        for name in PROXY_ENVIRONMENT:
            os.environ.pop(name, None)
    assert code == 0, console[-3000:]
    assert f'server="{server.url}' not in answers[-1] and 'server="http://sseuser:***@127.0.0.1:' in answers[-1]
    return Written(console + "\n".join(answers), [reports], ["live metrics mid-run and final"])


def server_down(reports: Path, *_: object) -> Written:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        code, output = _run(_locust("--host", credentialed(f"http://127.0.0.1:{port}"), "--report-dir", str(reports)))
    assert code == 2 and "cannot reach" in output, output[-3000:]
    return Written(output, [reports], ["server down"])


def unauthorized(reports: Path, _: MisbehavingServer, start_server: StartServer, *__: object) -> Written:
    server = start_server("--api-key", "Other-key")
    console = ""
    for env, host in ((_env(SSE_SOAK_API_KEY=API_KEY), server.url), (_env(), credentialed(server.url))):
        code, output = _run(_locust("--host", host, "--report-dir", str(reports)), env)
        assert code == 2 and "401" in output, output[-3000:]
        console += output
    return Written(console, [reports], ["401 for a wrong key and for Basic auth"])


COMMANDS: dict[str, Command] = {
    command.__name__: command
    for command in (
        headless_raw_and_openai_users,
        embedded_proxy_in_front_of_the_host,
        proxy_command,
        basic_auth_server,
        processes_2,
        api_key_in_the_environment,
        bundled_server_key_in_server_args,
        soak,
        report_and_compare,
        pytest_plugin,
        web_ui,
        live_metrics,
        server_down,
        unauthorized,
    )
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_secret_is_written_or_printed(
    command: str,
    tmp_path: Path,
    misbehaving: MisbehavingServer,
    start_server: StartServer,
    pytester: pytest.Pytester,
) -> None:
    reports = tmp_path / "reports"
    started = time.monotonic()
    written = COMMANDS[command](reports, misbehaving, start_server, pytester)
    assert written.checked and time.monotonic() > started
    leaks = {"console": found} if (found := found_secrets(written.console)) else {}
    for directory in written.directories:
        if directory.exists():
            leaks.update({f"{directory.name}/{name}": found for name, found in leaks_in(directory).items()})
    printed = [line for line in written.console.splitlines() if found_secrets(line)]
    assert not leaks, f"{command}: {leaks}\n" + "\n".join(printed[:10])


def test_the_search_finds_every_form_it_looks_for() -> None:
    """The search itself: each planted secret is found in the forms a leak would take."""
    host = credentialed("http://127.0.0.1:1")
    assert set(found_secrets(host)) == {"host password, URL-encoded", "host password's core", "query token"}
    assert "host credentials as Basic auth" in found_secrets("Authorization: Basic " + _basic(USER, PASSWORD))
    assert "API key's core" in found_secrets("Bearer " + API_KEY)
