"""How a run ends: its verdict is always written, says how the run ended, and is judged once.

Locust runs in the background and is ended the ways a person or a job ends it: its run time,
SIGTERM, Ctrl-C (SIGINT) at several moments, once or twice, headless, with ``--processes 2`` and
through the web UI's own endpoints (POST /swarm, POST /stop). Tests wait on output lines and
files, never on fixed sleeps, and end every process they start. ``python -m loadtests report``
never passes a run that judged nothing or never wrote its summary.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.judge.gates import Expect
from loadtests.judge.summary import Summary
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import Recorder
from loadtests.record.run_dir import RunDir, RunRecord
from loadtests.run.judging import JudgeOptions, judge
from tests.conftest import StartServer
from tests.loadtests.locust_run import ROOT, LiveLocust, assert_the_verdict_comes_last, locust_command, run_locust

pytestmark = pytest.mark.extended

RUN_DIR = r"^run directory: (.+)$"
REPORT = r"^report: (.+)$"
VERDICT = r"^verdict: .*$"
FIRST_SIGNAL = r"^sse-soak: SIG(INT|TERM|HUP): ending the run$"
HTML_CUT = r"^sse-soak: report\.html was not written"
HEADLESS = ("--headless", "-u", "3", "-r", "3", "--flush-interval", "1")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_parts(run_dir: Path, parts: int = 1, timeout: float = 60.0) -> None:
    """Until ``parts`` batches of rows are on disk (one per flush interval while requests finish)."""
    deadline = time.monotonic() + timeout
    while len(list((run_dir / "requests.parquet").glob("part-*.parquet"))) < parts:
        assert time.monotonic() < deadline, f"no {parts} parts of rows in {run_dir}"
        time.sleep(0.1)


def wait_for_rows(run_dir: Path, query: str, timeout: float = 60.0) -> None:
    """Until a row matching ``query`` (``DataFrame.query``) is on disk."""
    deadline = time.monotonic() + timeout
    while True:
        rows = run_dir / "requests.parquet"
        if any(rows.glob("part-*.parquet")) and len(pd.read_parquet(rows).query(query)):
            return
        assert time.monotonic() < deadline, f"no row where {query} in {run_dir}"
        time.sleep(0.1)


def wait_until_exists(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written within {timeout:.0f} s"
        time.sleep(0.02)


def complete(run_dir: Path, html: bool = True) -> dict[str, Any]:
    """The run's summary, after checking it agrees with its rows (each once) and report.html is there."""
    summary = json.loads((run_dir / "summary.json").read_text())
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert summary["requests"] == len(requests) > 0 and requests["request_id"].is_unique
    assert (run_dir / "report.html").exists() == html
    assert not list(run_dir.glob("**/*.tmp"))
    return summary


def verdict_line(summary: dict[str, Any]) -> str:
    return Summary.from_json(summary).verdict_line()


def assert_one_verdict_per_run(locust: LiveLocust, summaries: list[dict[str, Any]]) -> None:
    assert [match[0] for match in locust.matching(VERDICT)] == [verdict_line(s) for s in summaries]


# -- python -m loadtests report ----------------------------------------------------------------


def ok_rows(count: int) -> Recorder:
    recorder = Recorder()
    for index in range(count):
        stream = StreamTracker(RequestPlan(f"ok{index}", "n", "completions"), 0.0)
        stream.headers(200, 0.01, "text/event-stream")
        stream.frame(Frame(t=0, nbytes=40, data=json.dumps({"choices": [{"index": 0, "text": "hi"}]})), 0.2)
        stream.frame(Frame(t=0, nbytes=14, data="[DONE]"), 0.3)
        recorder.add(stream.finish(0.3), stream.frames)
    return recorder


def printed_verdict(stdout: str) -> str:
    """The one ``verdict:`` line of what ``report`` printed."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("verdict: ")]
    return line


def report_command(run_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadtests", "report", str(run_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_report_passes_a_run_whose_gates_passed(tmp_path: Path) -> None:
    directory = tmp_path / "demo-20260101T000000Z"
    writer = RunWriter(directory)
    writer.write_batch(ok_rows(3).take_batch())
    judge(
        RunRecord(RunDir(directory)),
        JudgeOptions([Expect("all_ok", None, "outcome == 'ok'")], ended="run time of 5 s reached"),
    )
    result = report_command(directory)
    lines = result.stdout.splitlines()
    assert result.returncode == 0
    assert lines[:3] == [
        "requests: 3 (3 ok)",
        "coverage: 3 of 3 requests judged",
        "causes: 0 proxy timeouts before the headers, 0 streams cut after them; statuses {'200': 3}",
    ]
    assert "gate PASS all_ok: 3/3 rows have outcome == 'ok'" in lines  # each gate, as the run printed it
    assert lines[-3:] == ["ended: run time of 5 s reached", "verdict: PASS", f"report: {directory}"]


def test_report_fails_a_run_that_never_wrote_its_summary_as_interrupted(tmp_path: Path) -> None:
    directory = tmp_path / "demo-20260101T000000Z"
    RunWriter(directory).write_batch(ok_rows(3).take_batch())
    result = report_command(directory)
    assert result.returncode == 1
    line = printed_verdict(result.stdout)
    assert re.fullmatch(
        r"verdict: FAIL \(interrupted: the run ended before writing its summary; "
        r"(\d+)/\d+ gates passed on 3 requests judged(, 1 unjudged)?\)",
        line,
    ), line
    summary = json.loads((directory / "summary.json").read_text())
    assert summary["interrupted"] == "the run ended before writing its summary"
    assert summary["gates_passed"] is True and summary["passed"] is False
    assert report_command(directory).returncode == 1  # re-judged again: still interrupted


def test_report_keeps_an_interrupted_run_failed(tmp_path: Path) -> None:
    directory = tmp_path / "demo-20260101T000000Z"
    writer = RunWriter(directory)
    writer.write_batch(ok_rows(2).take_batch())
    interrupted = "SIGTERM at 5.0 s of 15 s"
    judge(RunRecord(RunDir(directory)), JudgeOptions([], ended=interrupted, interrupted=interrupted))
    result = report_command(directory)
    assert result.returncode == 1
    assert printed_verdict(result.stdout).startswith(f"verdict: FAIL (interrupted: {interrupted}; ")
    assert f"Interrupted: {interrupted}" in (directory / "report.html").read_text()


@pytest.mark.parametrize("with_summary", [True, False])
def test_report_never_passes_a_run_without_requests(tmp_path: Path, with_summary: bool) -> None:
    """Judged and empty: inconclusive (exit 3); never judged (killed): interrupted, so a failure."""
    directory = tmp_path / "demo-20260101T000000Z"
    RunWriter(directory)  # the tables, empty
    if with_summary:
        judge(RunRecord(RunDir(directory)), JudgeOptions([], ended="stopped at 0.5 s"))
    result = report_command(directory)
    verdict = "INCONCLUSIVE" if with_summary else "FAIL"
    assert result.returncode == (3 if with_summary else 1)
    assert printed_verdict(result.stdout).startswith(f"verdict: {verdict} (")
    assert "on 0 requests judged" in result.stdout
    assert "verdict: PASS" not in result.stdout


@pytest.mark.parametrize("what", ["missing", "empty", "file"])
def test_report_on_something_not_a_run_directory_is_one_line_and_exit_2(tmp_path: Path, what: str) -> None:
    target = tmp_path / "nothing"
    if what == "empty":
        target.mkdir()
    elif what == "file":
        target.write_text("x")
    result = report_command(target)
    assert result.returncode == 2 and result.stdout == ""
    message = f"python -m loadtests report: {target} is not a run directory (it holds no requests.parquet)"
    assert result.stderr == message + "\n"


# -- headless ----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_report_on_a_run_in_progress_refuses_in_one_line_and_the_run_ends_judged(tmp_path: Path) -> None:
    """``report`` on a live run judged it and wrote its summary: at its end the run refused its own
    directory (``RunDirChanged``: no gates, no verdict, exit 2), and so did every later ``report``.
    The run's writer holds the directory until it is judged: ``report`` says so in one line, exit 2,
    and writes nothing; the run ends judged; a ``report`` after its end re-judges it alike."""
    with LiveLocust("mixed_truncate", tmp_path, *HEADLESS) as locust:
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_parts(run_dir)
        during = report_command(run_dir)
        assert during.returncode == 2 and during.stdout == "", during.stderr
        (line,) = during.stderr.splitlines()
        assert line.startswith(f"python -m loadtests report: {run_dir}: the run is still in progress (pid ")
        assert f"(pid {locust.process.pid} on " in line and "nothing was read or written" in line
        assert not [
            run_dir / name for name in ("summary.json", "report.html", "requests.csv") if (run_dir / name).exists()
        ]
        locust.signal(signal.SIGINT)
        code = locust.wait(60)
    summary = complete(run_dir)
    assert code == (0 if summary["passed"] else 1 if summary["verdict"] == "FAIL" else 3), locust.output[-3000:]
    assert_one_verdict_per_run(locust, [summary])
    after = report_command(run_dir)
    assert after.returncode == code, after.stdout + after.stderr
    assert verdict_line(summary) in after.stdout.splitlines()


def run_time_reached(seconds: int, ended: str) -> bool:
    """``ended`` says the run time was reached, with the start-up's share when the box was slow to
    start the test (``loadtests.run.ending``: noted from 0.5 s, which a busy machine may take)."""
    start_up = r"( \(load ran \d+\.\d s: the test's start-up took \d+\.\d s of it\))?"
    return re.fullmatch(rf"run time of {seconds} s reached{start_up}", ended) is not None


@pytest.mark.smoke
def test_the_run_time_ends_the_run_on_time_and_is_no_interruption(tmp_path: Path, start_server: StartServer) -> None:
    """With ``--host`` startup blocks the event loop for a second or more (imports, discovery) and
    libev's cached clock goes stale: Locust's -t timer would fire that much early."""
    server = start_server("--max-model-len", "8192")
    run = run_locust("mixed_truncate", tmp_path, "--host", server.url, users=3, seconds=4)
    summary = complete(run.checked_run_dir)
    assert run_time_reached(4, summary["ended"]) and summary["interrupted"] is None
    assert [line for line in run.output.splitlines() if line.startswith("verdict: ")] == [verdict_line(summary)]
    assert run.returncode == (0 if summary["passed"] else 1)
    starts = pd.read_parquet(run.checked_run_dir / "requests.parquet")["start_time"]
    assert starts.max() - starts.min() > 3.0  # requests went on for (nearly) the whole 4 s


@pytest.mark.smoke
def test_with_locusts_json_stdout_is_the_stats_json_alone_and_the_run_lines_go_to_stderr(tmp_path: Path) -> None:
    """Locust's ``--json`` prints its stats as JSON on stdout "for parsing in other programs"; the
    run's own lines (server, run directory, gates, verdict) were printed there too, so the JSON
    could not be parsed."""
    command = locust_command(
        ROOT / "scenarios" / "mixed_truncate.py", *HEADLESS, "-t", "3s", "--json", "--skip-log",
        "--report-dir", str(tmp_path), "--only-summary",
    )  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL)
    stats = json.loads(result.stdout)  # nothing but the JSON
    assert sum(entry["num_requests"] for entry in stats) > 0
    (run_dir,) = tmp_path.iterdir()
    summary = complete(run_dir)
    lines = result.stderr.splitlines()
    assert f"run directory: {run_dir}" in lines and f"report: {run_dir}" in lines
    assert verdict_line(summary) in lines and result.returncode == (0 if summary["passed"] else 1)
    assert assert_the_verdict_comes_last(result.stderr, after_tables=False)[-1] == f"report: {run_dir}"


@pytest.mark.smoke
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_before_the_run_time_fails_the_run_as_interrupted(tmp_path: Path, signum: int) -> None:
    with LiveLocust("mixed_truncate", tmp_path, *HEADLESS, "-t", "15s") as locust:
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_parts(run_dir, 4)  # about 4 s into the run
        locust.signal(signum)
        assert locust.wait(60) == 1, locust.output[-3000:]
    summary = complete(run_dir)
    name = signal.Signals(signum).name
    match = re.fullmatch(rf"{name} at (\d+\.\d) s of 15 s", summary["interrupted"] or "")
    assert match and 3 < float(match[1]) < 12, summary["interrupted"]
    assert summary["ended"] == summary["interrupted"] and summary["passed"] is False
    assert_one_verdict_per_run(locust, [summary])
    assert_the_verdict_comes_last(locust.output)  # after Locust's final tables, as at the run time's end
    judged = summary["requests"] - summary["outcomes"]["stopped"]
    gates = len(summary["gates"])
    if summary["gates_passed"]:
        expected = f"verdict: FAIL (interrupted: {summary['interrupted']}; {gates}/{gates} gates passed on {judged} requests judged)"  # noqa: E501
        assert verdict_line(summary) == expected
    assert f"Interrupted: {summary['interrupted']}" in (run_dir / "report.html").read_text()


@pytest.mark.smoke
def test_ctrl_c_ends_a_run_without_run_time_without_failing_it(tmp_path: Path) -> None:
    with LiveLocust("mixed_truncate", tmp_path, *HEADLESS) as locust:
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_parts(run_dir, 2)
        locust.signal(signal.SIGINT)
        code = locust.wait(60)
    summary = complete(run_dir)
    assert summary["interrupted"] is None and re.fullmatch(r"SIGINT at \d+\.\d s", summary["ended"])
    assert summary["passed"] == summary["gates_passed"] and code == (0 if summary["passed"] else 1)
    assert_one_verdict_per_run(locust, [summary])
    assert len(locust.matching(RUN_DIR)) == 1  # printed once, at the test's start (the soak job reads it)


@pytest.mark.smoke
@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGHUP, True)],
    ids=["SIGTERM-to-the-master", "Ctrl-C-to-every-process", "hang-up-to-every-process"],
)
def test_a_signal_with_processes_2_judges_once_and_loses_no_row(tmp_path: Path, signum: int, to_group: bool) -> None:
    """SIGTERM to the master alone, as a job scheduler sends it; SIGINT to every process of the run,
    as a terminal's Ctrl-C does (each worker then heard it too, and each said so before); SIGHUP
    to every process, as a closed terminal sends it (it killed each process before, no verdict)."""
    port, trace = free_port(), tmp_path / "trace.jsonl"
    with LiveLocust(
        "mixed_truncate",
        tmp_path / "reports",
        *HEADLESS,
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "15s",
        "--processes",
        "2",
        "--master-bind-port",
        str(port),
        "--master-port",
        str(port),
        f"--server-args=--trace-file {trace}",
    ) as locust:
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_parts(run_dir, 4)
        if to_group:
            locust.signal_group(signum)
        else:
            locust.signal(signum)
        assert locust.wait(60) == 1, locust.output[-3000:]
    summary = complete(run_dir)
    name = signal.Signals(signum).name
    assert summary["interrupted"].startswith(f"{name} at ") and summary["passed"] is False
    for prefix in ("run directory: ", "requests: ", "ended: ", "verdict: ", "report: "):
        assert len(locust.matching("^" + prefix)) == 1, prefix
    assert len(locust.matching(FIRST_SIGNAL)) == 1  # said by the master alone, though its workers got it too
    assert len(locust.matching(r"^gate (PASS|FAIL|SKIP) ")) == len(summary["gates"])
    assert_one_verdict_per_run(locust, [summary])
    assert_the_verdict_comes_last(locust.output)  # the master's, after its tables and its workers' last lines
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert set(requests["worker"]) == {"worker-0", "worker-1"}
    streamed = {json.loads(line)["request_id"] for line in trace.read_text().splitlines()}
    assert streamed <= set(requests["request_id"])  # every stream the server sent has its row


# -- web UI ------------------------------------------------------------------------------------


class WebUI:
    """Locust's web UI endpoints, as its page calls them."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the web UI never answered"
            time.sleep(0.1)

    def start(self, users: int = 2, host: str | None = None) -> None:
        """POST /swarm; ``host`` is the form's host field, which the page sends as typed (or cleared)."""
        form: dict[str, str | int] = {"user_count": users, "spawn_rate": users}
        if host is not None:
            form["host"] = host
        answer = httpx.post(self.url + "/swarm", data=form, timeout=30)
        assert answer.json()["success"], answer.text

    def stop(self) -> None:
        """POST /stop: it answers once the test is stopped and judged."""
        assert httpx.post(self.url + "/stop", timeout=120).json()["success"]


def web_locust(tmp_path: Path, *args: str) -> tuple[LiveLocust, WebUI]:
    port = free_port()
    locust = LiveLocust(
        "mixed_truncate", tmp_path, "--web-host", "127.0.0.1", "--web-port", str(port), "--flush-interval", "1", *args
    )
    try:
        return locust, WebUI(port)
    except BaseException:
        locust.close()
        raise


@pytest.mark.smoke
def test_web_ui_each_start_stop_is_a_run_directory_and_ctrl_c_quits(tmp_path: Path) -> None:
    locust, ui = web_locust(tmp_path)
    with locust:
        run_dirs = []
        for test in (1, 2):
            ui.start()
            run_dir = Path(locust.wait_for(RUN_DIR, count=test)[1])
            wait_for_parts(run_dir)
            ui.stop()
            assert locust.wait_for(REPORT, count=test)[1] == str(run_dir)
            run_dirs.append(run_dir)
        locust.signal(signal.SIGINT)
        code = locust.wait(60)
    summaries = [complete(run_dir) for run_dir in run_dirs]
    for summary in summaries:
        assert re.fullmatch(r"stopped at \d+\.\d s", summary["ended"]) and summary["interrupted"] is None
    assert_one_verdict_per_run(locust, summaries)
    verdicts = {summary["verdict"] for summary in summaries}
    assert code == (1 if "FAIL" in verdicts else 3 if "INCONCLUSIVE" in verdicts else 0)  # the worst test's
    assert sorted(tmp_path.iterdir()) == sorted(run_dirs)  # quitting between tests judged nothing more


@pytest.mark.smoke
def test_web_ui_ended_by_autoquit_closes_with_the_verdict_after_locusts_tables(tmp_path: Path) -> None:
    """``--autostart --autoquit``: the test is judged when its run time ends, Locust quits by itself
    and prints its final tables; the verdict waits for them."""
    web = ("--web-host", "127.0.0.1", "--web-port", str(free_port()), "--autostart", "--autoquit", "0")
    with LiveLocust("mixed_truncate", tmp_path, *web, "-u", "3", "-r", "3", "-t", "3s") as locust:
        code = locust.wait(90)
    (run_dir,) = tmp_path.iterdir()
    summary = complete(run_dir)
    assert run_time_reached(3, summary["ended"]) and code == (0 if summary["passed"] else 1)
    block = assert_the_verdict_comes_last(locust.output)
    assert block[-2:] == [verdict_line(summary), f"report: {run_dir}"]
    assert_one_verdict_per_run(locust, [summary])


@pytest.mark.smoke
def test_web_ui_with_processes_admits_its_own_workers_and_writes_their_rows(tmp_path: Path) -> None:
    """The web UI builds Locust's parser again (for its form, on every page, and before ``init``):
    each build made a new run id, so the master refused the very workers it had forked."""
    locust, ui = web_locust(tmp_path, "--processes", "2")
    with locust:
        ui.start(users=4)
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_rows(run_dir, "outcome == 'ok' and worker == 'worker-0'")
        wait_for_rows(run_dir, "outcome == 'ok' and worker == 'worker-1'")
        ui.stop()
        locust.wait_for(REPORT)
        locust.signal(signal.SIGINT)
        locust.wait(60)
    assert not locust.matching(r"refused"), locust.output[-3000:]
    summary = complete(run_dir)
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert set(requests["worker"]) == {"worker-0", "worker-1"} and summary["outcomes"]["ok"] > 0


@pytest.mark.smoke
@pytest.mark.parametrize("processes", [(), ("--processes", "2")], ids=["one-process", "processes-2"])
def test_web_ui_form_values_of_how_streams_are_read_apply_to_that_test(
    tmp_path: Path, processes: tuple[str, ...]
) -> None:
    """The users read ``--max-line-bytes`` and ``--frame-sample-rate`` at init only, so the form's
    values were recorded in the summary but never applied (on workers too, which get them in their
    spawn message). Test 1: 64-byte lines, so every streamed answer is a protocol error; test 2: no
    ok stream's frames kept."""
    locust, ui = web_locust(tmp_path, *processes)
    with locust:
        run_dirs = []
        forms = ({"max_line_bytes": "64"}, {"max_line_bytes": "1048576", "frame_sample_rate": "0"})
        for test, form in enumerate(forms):
            answer = httpx.post(ui.url + "/swarm", data={"user_count": 4, "spawn_rate": 4, **form}, timeout=60)
            assert answer.json()["success"], answer.text
            run_dirs.append(Path(locust.wait_for(RUN_DIR, count=test + 1)[1]))
            wait_for_rows(run_dirs[-1], "status == 200 and outcome != 'stopped'")  # a streamed answer ended
            ui.stop()
            locust.wait_for(REPORT, count=test + 1)
        locust.signal(signal.SIGINT)
        locust.wait(60)
    short_lines, unsampled = (pd.read_parquet(run_dir / "requests.parquet") for run_dir in run_dirs)
    streamed = short_lines[short_lines["status"] == 200]
    assert len(streamed) > 0 and set(streamed["outcome"]) <= {"protocol_error", "stopped"}, streamed["outcome"]
    assert complete(run_dirs[0])["settings"]["max_line_bytes"] == 64
    ok = unsampled[unsampled["outcome"] == "ok"]
    frames = run_dirs[1] / "frames.parquet"
    kept = set(pd.read_parquet(frames)["request_id"]) if any(frames.glob("part-*.parquet")) else set()
    assert len(ok) > 0 and not kept & set(ok["request_id"])
    assert complete(run_dirs[1])["frame_sample_rate"] == 0


@pytest.mark.smoke
def test_web_ui_host_field_cleared_targets_the_run_and_a_dead_one_is_recorded(tmp_path: Path) -> None:
    """A cleared host field runs against the bundled server, not against no host (every request
    was a harness_error); an unreachable host says why in one line and its requests are rows."""
    locust, ui = web_locust(tmp_path)
    with locust:
        ui.start(host="")
        cleared = Path(locust.wait_for(RUN_DIR, count=1)[1])
        wait_for_parts(cleared)
        ui.stop()
        locust.wait_for(REPORT, count=1)
        dead = f"http://127.0.0.1:{free_port()}"
        ui.start(host=dead)
        unreachable = Path(locust.wait_for(RUN_DIR, count=2)[1])
        wait_for_parts(unreachable)
        ui.stop()
        locust.wait_for(REPORT, count=2)
        locust.signal(signal.SIGINT)
        locust.wait(60)
    assert locust.matching(r"^sse-soak: no host given for this test: it targets http://127\.0\.0\.1:\d+$")
    first, second = complete(cleared), complete(unreachable)
    assert first["outcomes"]["ok"] > 0 and first["outcomes"].get("harness_error", 0) == 0, first["outcomes"]
    assert locust.matching(rf"^sse-soak: cannot reach {re.escape(dead)}/v1/models .*: this test's requests will fail$")
    requests = pd.read_parquet(unreachable / "requests.parquet")
    assert len(requests) > 0 and set(requests["outcome"]) <= {"connect_error", "stopped"}, set(requests["outcome"])
    assert second["passed"] is False


@pytest.mark.smoke
def test_web_ui_quit_before_any_test_writes_and_says_nothing(tmp_path: Path) -> None:
    locust, _ = web_locust(tmp_path)
    with locust:
        locust.signal(signal.SIGINT)
        assert locust.wait(60) == 0
    assert list(tmp_path.iterdir()) == []
    assert not locust.matching(r"^(run directory|verdict|report|sse-soak):")
    assert not locust.matching(r"KeyboardInterrupt|Traceback")  # it was raised in a web UI greenlet


def _stop_in_background(ui: WebUI) -> threading.Thread:
    def stop() -> None:
        with contextlib.suppress(httpx.HTTPError, ValueError):  # Ctrl-C may close the web UI before it answers
            ui.stop()

    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread


@pytest.mark.smoke
@pytest.mark.parametrize("moment", ["during_the_run", "just_after_stop", "twice_while_judging", "again_during_html"])
def test_web_ui_ctrl_c_at_any_moment_leaves_a_complete_run(tmp_path: Path, moment: str) -> None:
    locust, ui = web_locust(tmp_path)
    with locust:
        ui.start()
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_parts(run_dir, 2)
        stopping = _stop_in_background(ui) if moment == "just_after_stop" else None
        locust.signal(signal.SIGINT)
        if moment == "twice_while_judging":
            locust.wait_for(FIRST_SIGNAL)  # the first one is being acted on: the test stops and is judged
            locust.signal(signal.SIGINT)
        elif moment == "again_during_html":
            # summary.json is written (atomically): report.html is next, the closing block after it
            wait_until_exists(run_dir / "summary.json")
            locust.signal(signal.SIGINT)
        code = locust.wait(60)
        if stopping is not None:
            stopping.join(30)
    html_cut = bool(locust.matching(HTML_CUT))
    summary = complete(run_dir, html=not html_cut)
    assert summary["interrupted"] is None and re.fullmatch(r"(SIGINT|stopped) at \d+\.\d s", summary["ended"])
    assert_one_verdict_per_run(locust, [summary])
    assert locust.wait_for(REPORT)[1] == str(run_dir)
    assert code == (0 if summary["passed"] else 1)
    assert list(tmp_path.iterdir()) == [run_dir]
    if moment in ("twice_while_judging", "again_during_html"):
        assert html_cut or locust.matching(r"^sse-soak: SIGINT: already ending")


@pytest.mark.smoke
def test_a_closed_terminal_ends_the_run_judged_as_interrupted(tmp_path: Path) -> None:
    """Locust on a terminal of its own (a pty it controls), which then closes: the kernel hangs up
    the session (SIGHUP) and every later write to the terminal fails. The run is judged, interrupted
    by SIGHUP, its summary and report written, exit 1; before, SIGHUP killed it (exit 129, no
    summary). What it would have printed is lost with the terminal; its files say it all."""
    terminal, run_side = pty.openpty()

    def own_terminal() -> None:  # in the child: a session of its own whose controlling terminal is the pty
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    command = locust_command(
        ROOT / "scenarios" / "mixed_truncate.py",
        *HEADLESS,
        "-t",
        "30s",
        "--report-dir",
        str(tmp_path),
        "--only-summary",
    )
    locust = subprocess.Popen(
        command, stdin=run_side, stdout=run_side, stderr=run_side, cwd=ROOT, preexec_fn=own_terminal
    )
    os.close(run_side)
    shown = b""
    try:
        deadline = time.monotonic() + 60
        while not re.search(rb"^run directory: (.+?)\r?$", shown, re.MULTILINE):
            assert time.monotonic() < deadline and locust.poll() is None, shown.decode(errors="replace")[-3000:]
            if select.select([terminal], [], [], 0.5)[0]:
                shown += os.read(terminal, 65536)
        found = re.search(rb"^run directory: (.+?)\r?$", shown, re.MULTILINE)
        assert found is not None
        run_dir = Path(found[1].decode())
        wait_for_parts(run_dir, 2)
        os.close(terminal)  # the terminal closes: SIGHUP to its session, and its output is gone
        terminal = -1
        assert locust.wait(60) == 1
    finally:
        if terminal != -1:
            os.close(terminal)
        if locust.poll() is None:  # a failed test: Locust, then the services it started, by their ids
            os.killpg(locust.pid, signal.SIGKILL)
            locust.wait()
            for pid in re.findall(rb"\(pid (\d+)\)", shown):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    summary = complete(run_dir)
    assert re.fullmatch(r"SIGHUP at \d+\.\d s of 30 s", summary["interrupted"] or ""), summary["interrupted"]
    assert summary["ended"] == summary["interrupted"] and summary["passed"] is False


@pytest.mark.smoke
@pytest.mark.parametrize("idle", [False, True], ids=["during-a-test", "idle"])
def test_web_ui_hang_up_ends_it_as_ctrl_c_does(tmp_path: Path, idle: bool) -> None:
    """SIGHUP (its terminal closed) during a test judges that test and quits, as Ctrl-C does; an
    idle web UI quits and writes nothing. It killed the web UI before, with no verdict (exit 129)."""
    locust, ui = web_locust(tmp_path)
    with locust:
        ui.start()
        run_dir = Path(locust.wait_for(RUN_DIR)[1])
        wait_for_parts(run_dir)
        if idle:
            ui.stop()
            assert locust.wait_for(REPORT)[1] == str(run_dir)
        locust.signal(signal.SIGHUP)
        code = locust.wait(60)
    summary = complete(run_dir)
    ended = r"stopped at \d+\.\d s" if idle else r"SIGHUP at \d+\.\d s"
    assert summary["interrupted"] is None and re.fullmatch(ended, summary["ended"]), summary["ended"]
    assert_one_verdict_per_run(locust, [summary])
    assert code == (0 if summary["passed"] else 1 if summary["verdict"] == "FAIL" else 3), locust.output[-3000:]
    assert list(tmp_path.iterdir()) == [run_dir]


@pytest.mark.smoke
def test_web_ui_form_shows_every_option_and_a_changed_stack_setting_restarts_the_stack(tmp_path: Path) -> None:
    """The form lists the scenario's options; a test started with other server arguments runs on a
    stack restarted with them (its summary says so); a bad value stops that test, in one line."""
    locust, ui = web_locust(tmp_path)
    with locust:
        page = httpx.get(ui.url + "/", timeout=10).text
        for name in ("server_args", "proxy_read_timeout", "client_idle_timeout", "rate", "report_dir"):
            assert f'"{name}"' in page, name
        form = {"user_count": 2, "spawn_rate": 2, "server_args": "--sse-keep-alive-interval 0.1"}
        assert httpx.post(ui.url + "/swarm", data=form, timeout=60).json()["success"]
        restarted = Path(locust.wait_for(RUN_DIR, count=1)[1])
        wait_for_parts(restarted)
        ui.stop()
        locust.wait_for(REPORT, count=1)
        bad = {"user_count": 2, "spawn_rate": 2, "rate": "fast"}
        assert httpx.post(ui.url + "/swarm", data=bad, timeout=60).json()["success"]
        locust.wait_for(r"^sse-soak: --rate: expected a number, got 'fast': the test is not run$")
        locust.signal(signal.SIGINT)
        locust.wait(60)
    assert locust.matching(r"^sse-soak: the form changed the stack's settings: restarting it$")
    summary = complete(restarted)
    assert summary["settings"]["keep_alive_interval"] == 0.1
    assert summary["settings"]["server_args"][-2:] == ["--sse-keep-alive-interval", "0.1"]
    covered = {"type": "KeepAliveCovered", "interval": 0.1, "name": "keepalive_covered", "proxy": "none"}
    assert covered in summary["gate_specs"]
    assert sorted(tmp_path.iterdir()) == [restarted]  # the refused test made no run directory
