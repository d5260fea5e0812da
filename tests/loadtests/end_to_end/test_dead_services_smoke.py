"""A dead server is said once, not flooded; an instant error answer is paced, not retried at once.

The bundled server killed by its pid mid-run, behind each proxy the run starts: one line names it,
the run ends interrupted (FAIL, the verdict block and summary.json as ever), and the proxy's instant
502s and 503s are rows at the pace the users keep (``loadtests.load.pacing``), not thousands a
second. A server that answers 429 (or 503 with ``Retry-After``) at once gets paced rows and one line
with their counts. Bounds are counts against the span the rows themselves cover, never durations.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pandas as pd
import psutil
import pytest

from loadtests.load.pacing import ERROR_ANSWER_PAUSE_S, INSTANT_ANSWER_S, RETRY_AFTER_MAX_S
from loadtests.services.proxies import real_proxies
from tests.conftest import StartServer, real_proxy_params, require_proxy
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LiveLocust, assert_the_verdict_comes_last, locust_command
from tests.loadtests.misbehaving import MISBEHAVING_LOCUSTFILE, start_misbehaving_server
from tests.misbehaving_server import RETRY_AFTER_S

pytestmark = pytest.mark.smoke

USERS = 4
RUN_DIR = r"^run directory: (.+)$"
SERVICE = r"^([a-z][a-z ]*): http://\S+ \(pid (\d+)\)$"
"""A service the run started, as it prints it: the server first, then the proxy."""
PACING_LINE = r"^sse-soak: ([\d,]+) error answers came back at once \((.+)\): each user paused"
EARLY_TIMER = 0.8
"""A gevent timer may fire a little early (its loop's clock is cached): a pause counts as this much of itself."""


def paced_bound(rows: pd.DataFrame, pause_s: float) -> float:
    """The most rows ``USERS`` users can make at one row per ``pause_s`` each over the span the rows
    cover (first start to last end), plus two a user (one in flight at each end)."""
    span = float((rows["start_time"] + rows["duration_s"]).max() - rows["start_time"].min())
    return USERS * (span / (pause_s * EARLY_TIMER) + 2)


def pacing_counts(output: str) -> dict[int, int]:
    """The pacing line's counts by status; it is said once."""
    lines = re.findall(PACING_LINE, output, re.MULTILINE)
    assert len(lines) == 1, output[-3000:]
    total, by_status = lines[0]
    counts = {int(code): int(count.replace(",", "")) for code, count in re.findall(r"HTTP (\d+): ([\d,]+)", by_status)}
    assert sum(counts.values()) == int(total.replace(",", ""))
    return counts


def assert_paced_answers_said(output: str, failing: pd.DataFrame) -> None:
    """The proxy's answers for the dead server that came at once are counted in the one line, by
    status; without any (HAProxy may retry the dead server 0.5 s or more before its 503), no line."""
    answered = failing[failing["status"].notna() & (failing["duration_s"] < INSTANT_ANSWER_S)]
    if answered.empty:
        assert not re.search(PACING_LINE, output, re.MULTILINE), output[-3000:]
    else:
        assert pacing_counts(output) == answered["status"].astype(int).value_counts().to_dict()


@pytest.fixture(params=real_proxy_params("embedded", *real_proxies()))
def proxy(request: pytest.FixtureRequest) -> str:
    if request.param in real_proxies():
        require_proxy(request.param)
    return str(request.param)


@pytest.mark.parametrize("dies", ["server", "proxy"])
def test_a_service_killed_mid_run_is_said_once_and_ends_the_run_interrupted_with_bounded_rows(
    tmp_path: Path, proxy: str, dies: str
) -> None:
    if dies == "proxy" and proxy not in ("embedded", "nginx"):
        pytest.skip("a proxy's own death: the embedded one and nginx stand for the rest")
    args = ("--headless", "-u", str(USERS), "-r", str(USERS), "-t", "60s", "--flush-interval", "1", "--proxy", proxy)
    with LiveLocust("mixed_truncate", tmp_path, *args) as locust:
        service = locust.wait_for(SERVICE, 1 if dies == "server" else 2)
        name, pid = service[1], int(service[2])
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        _wait_for_rows(run_dir)
        group = _group_of(pid)  # nginx's master and its workers, behind our watchdog
        os.kill(_the_program(pid), signal.SIGKILL)
        code = locust.wait(120)
    _assert_ended(group)  # a master killed by SIGKILL leaves no worker serving its port
    output = locust.output
    said = locust.matching(rf"^sse-soak: {re.escape(name)} \(pid {pid}\) was killed by SIGKILL while the run went")
    assert len(said) == 1, output[-3000:]
    assert code == 1, output[-3000:]
    block = assert_the_verdict_comes_last(output)
    summary = json.loads((run_dir / "summary.json").read_text())
    interrupted = str(summary["interrupted"])
    assert re.fullmatch(rf"{re.escape(name)} \(pid {pid}\) was killed by SIGKILL at \d+\.\d s of 60 s", interrupted)
    assert summary["ended"] == interrupted and not summary["passed"]
    assert block[-2].startswith(f"verdict: FAIL (interrupted: {interrupted}")
    requests = pd.read_parquet(run_dir / "requests.parquet")
    # what the users met between the death and the run's end (none, when the watch was first)
    failing = requests[requests["outcome"].isin(["http_5xx", "connect_error"])]
    assert failing.empty or len(failing) <= paced_bound(failing, ERROR_ANSWER_PAUSE_S), (len(failing), output[-3000:])
    assert_paced_answers_said(output, failing)


def test_a_server_given_with_host_that_dies_behind_the_proxy_gets_paced_rows_and_one_line(
    tmp_path: Path, proxy: str, start_server: StartServer
) -> None:
    """The server is the user's (``--host``), not the run's: its death is no death of the run's, and
    the proxy's instant answers for it are rows at the users' pace, counted in one line."""
    server = start_server()
    args = ("--headless", "-u", str(USERS), "-r", str(USERS), "-t", "8s", "--flush-interval", "1")
    with LiveLocust("mixed_truncate", tmp_path, *args, "--host", server.url, "--proxy", proxy) as locust:
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        _wait_for_rows(run_dir)
        os.kill(server.pid, signal.SIGKILL)
        code = locust.wait(120)
    output = locust.output
    assert code == 1 and "while the run went" not in output, output[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is None and summary["ended"].startswith("run time of 8 s reached")
    requests = pd.read_parquet(run_dir / "requests.parquet")
    failing = requests[requests["outcome"].isin(["http_5xx", "connect_error", "gateway_timeout"])]
    assert len(failing) >= 1, output[-3000:]
    assert len(failing) <= paced_bound(failing, ERROR_ANSWER_PAUSE_S), (len(failing), output[-3000:])
    assert_paced_answers_said(output, failing)
    assert_the_verdict_comes_last(output)


def test_a_server_that_dies_while_the_web_ui_is_idle_is_said_and_fails_the_run(tmp_path: Path) -> None:
    """No test under way, so nothing to judge: the one line, and the run quits with exit 1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with LiveLocust("mixed_truncate", tmp_path, "--web-host", "127.0.0.1", "--web-port", str(port)) as locust:
        pid = int(locust.wait_for(SERVICE)[2])
        _wait_for_the_tab(port)  # installed once the run's start-up (the preflight) is over
        os.kill(pid, signal.SIGKILL)
        code = locust.wait(120)
    said = locust.matching(rf"^sse-soak: target server \(pid {pid}\) was killed by SIGKILL while the run went")
    assert len(said) == 1 and code == 1, locust.output[-3000:]
    assert not any(tmp_path.iterdir())  # no test, no run directory


def _wait_for_the_tab(port: int, timeout: float = 60.0) -> None:
    """Until sse-soak's tab answers in the web UI on ``port``."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/sse-soak/live.json", timeout=5).status_code == 200:
                return
        assert time.monotonic() < deadline, f"no sse-soak tab on port {port}"
        time.sleep(0.1)


def _the_program(pid: int) -> int:
    """The process that serves, behind service ``pid``: a real proxy runs as the child of our
    watchdog (``loadtests.services.parent_watch``), which dies as it died; our own services are it."""
    if "parent_watch" not in Path(f"/proc/{pid}/cmdline").read_text():
        return pid
    return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])


def _group_of(pid: int) -> list[psutil.Process]:
    """Every process in service ``pid``'s process group (its own, started in a session of its own)."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pid:
                members.append(process)
    return members


def _assert_ended(processes: list[psutil.Process], timeout: float = 30.0) -> None:
    """Each of ``processes`` ends (bounded wait): nothing a service started outlives its run."""
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    assert not alive, [(process.pid, process.name()) for process in alive]


def _wait_for_rows(run_dir: Path, timeout: float = 60.0) -> None:
    """Until the run wrote its first rows (the users are streaming): the kill comes mid-run."""
    deadline = time.monotonic() + timeout
    while not list((run_dir / "requests.parquet").glob("part-*.parquet")):
        assert time.monotonic() < deadline, f"no rows in {run_dir}"
        time.sleep(0.1)


def _misbehaving_run(tmp_path: Path, mode: str, *args: str, seconds: int = 6) -> tuple[str, pd.DataFrame, set[str]]:
    """The misbehaving locustfile (raw and SDK users) against a server that answers every request
    with ``mode``: its output, its rows, and the ids of the requests the server saw."""
    server = start_misbehaving_server(tmp_path / "modes.jsonl", modes=[mode])
    try:
        command = locust_command(
            MISBEHAVING_LOCUSTFILE,
            "--headless",
            "-u",
            str(USERS),
            "-r",
            str(USERS),
            "-t",
            f"{seconds}s",
            "--host",
            server.url,
            "--report-dir",
            str(tmp_path / "reports"),
            "--only-summary",
            *args,
        )
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL
        )
        seen = set(server.logged()["request_id"])
    finally:
        server.stop()
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    assert match, output[-3000:]
    requests = pd.read_parquet(Path(match["path"]) / "requests.parquet")
    requests.attrs["summary"] = json.loads((Path(match["path"]) / "summary.json").read_text())
    return output, requests, seen


@pytest.mark.extended
@pytest.mark.parametrize(
    ("mode", "status", "pause_s"),
    [("http_429", 429, ERROR_ANSWER_PAUSE_S), ("http_503_retry_after", 503, float(RETRY_AFTER_S))],
)
def test_a_server_that_answers_an_error_at_once_gets_paced_rows_and_one_line(
    tmp_path: Path, mode: str, status: int, pause_s: float
) -> None:
    assert pause_s <= RETRY_AFTER_MAX_S
    output, requests, seen = _misbehaving_run(tmp_path, mode)
    answered = requests[requests["status"] == status]
    assert set(answered["client"]) == {"raw", "openai"}, output[-3000:]
    assert seen <= set(requests["request_id"])  # every answer the server gave is a row, with its true outcome
    assert set(answered["outcome"]) == {"rejected" if status == 429 else "http_5xx"}
    assert len(answered) <= paced_bound(answered, pause_s), (len(answered), output[-3000:])
    assert pacing_counts(output) == {status: len(answered)}
    assert "Traceback" not in output


@pytest.mark.extended
def test_in_open_loop_the_requests_a_paced_user_never_sent_count_as_not_sent(tmp_path: Path) -> None:
    """40 a second asked of 4 users facing instant 429s: they send at their pace, and the rest of
    the schedule is ``not_sent``, so the run's coverage says how little was sent."""
    output, requests, seen = _misbehaving_run(tmp_path, "http_429", "--rate", "40", "--arrival", "constant")
    section = requests.attrs["summary"]["arrival"]
    sent = requests[requests["outcome"] != "not_sent"]
    not_sent = requests[requests["outcome"] == "not_sent"]
    assert seen <= set(sent["request_id"])
    assert len(sent) <= paced_bound(sent, ERROR_ANSWER_PAUSE_S), (len(sent), output[-3000:])
    assert section["sent"] == len(sent) and section["not_sent"] == len(not_sent) > 0
    assert section["scheduled"] == len(sent) + len(not_sent) and section["rate_achieved"] < section["rate"]
    assert pacing_counts(output) == {429: int((sent["status"] == 429).sum())}
