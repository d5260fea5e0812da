"""Locust master + workers: every row reaches the master, which alone writes and judges the run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest

from loadtests.base.ports import free_loopback_port
from loadtests.judge.summary import Summary
from loadtests.record.membership import RUN_ID_ENV
from loadtests.record.run_dir import RunDir
from tests.conftest import StartServer
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun, locust_command, run_locust
from tests.server_gauges import RUNNING, gauge

pytestmark = [pytest.mark.smoke, pytest.mark.extended]
SCENARIO = str(ROOT / "scenarios" / "mixed_truncate.py")


def locust_requests(stats_file: Path) -> int:
    return sum(entry["num_requests"] for entry in json.loads(stats_file.read_text()))


def assert_nothing_lost(run: LocustRun, stats_file: Path, workers: set[str]) -> None:
    assert run.returncode == 0, run.output[-3000:]
    summary, requests = run.summary, run.requests
    # Every stream Locust counted, plus the ones the stop interrupted, is one row; no row twice.
    assert summary["requests"] == len(requests) == locust_requests(stats_file) + summary["outcomes"]["stopped"]
    assert requests["request_id"].is_unique
    assert set(requests["worker"]) == workers
    assert summary["settings"]["prompt_sizing"] == "exact"  # the master prepares no prompt: it probed
    frames = run.frames
    assert set(frames["request_id"]) <= set(requests["request_id"])
    per_stream = frames.groupby("request_id").size()
    raw_done = requests[(requests["client"] == "raw") & requests["done"]]
    expected = (raw_done["data_frames"] + raw_done["keepalive_frames"]).to_numpy()
    assert (per_stream[raw_done["request_id"]].to_numpy() == expected).all()


def test_processes_2_loses_no_row_and_both_workers_appear(tmp_path: Path) -> None:
    port = free_loopback_port()
    stats = tmp_path / "stats"
    run = run_locust(
        "mixed_truncate",
        tmp_path,
        "--processes",
        "2",
        "--master-bind-port",
        str(port),
        "--master-port",
        str(port),
        "--json-file",
        str(stats),
        "--harness-lag-limit-ms",
        "1000",
        users=6,
        seconds=6,
    )
    assert_nothing_lost(run, stats.with_suffix(".json"), {"worker-0", "worker-1"})
    # Each process measured its own loop for the whole run, and the master judged them all.
    lag = run.lag
    assert set(lag["worker"]) == {"master", "worker-0", "worker-1"}
    for worker, samples in lag.groupby("worker"):
        assert len(samples) >= 200, worker  # 6 s at a wake every 10 ms, even on a loaded machine
    assert set(run.summary["harness_lag_ms"]["by_worker"]) == {"master", "worker-0", "worker-1"}
    assert run.gate("harness_kept_up")["passed"] and "3 process(es)" in run.gate("harness_kept_up")["detail"]
    assert run.requests["harness_lag_max_s"].notna().all()


def test_explicit_master_and_workers_lose_no_row(tmp_path: Path) -> None:
    port = free_loopback_port()
    stats = tmp_path / "stats"
    master = subprocess.Popen(
        locust_command(
            SCENARIO,
            "--master",
            "--headless",
            "--expect-workers",
            "2",
            "-u",
            "6",
            "-r",
            "6",
            "-t",
            "6s",
            "--master-bind-port",
            str(port),
            "--report-dir",
            str(tmp_path),
            "--only-summary",
            "--json-file",
            str(stats),
            "--run-id",
            "night-1",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", SCENARIO, "--worker", "--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env={**os.environ, RUN_ID_ENV: "night-1"},  # the run's id, given the other way
        )
        for _ in range(2)
    ]
    try:
        output, _ = master.communicate(timeout=120)
        for worker in workers:
            assert worker.wait(timeout=60) == 0
    finally:
        started: list[subprocess.Popen[Any]] = [master, *workers]  # the master's output is text, the workers' bytes
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    match = REPORT_LINE.search(output)
    run = LocustRun(master.returncode, output, Path(match["path"]) if match else None)
    assert_nothing_lost(run, stats.with_suffix(".json"), {"worker-0", "worker-1"})
    assert "target server: http://127.0.0.1:" in output  # the master, not the workers, started it


def test_frame_sampling_keeps_every_row_and_the_frames_of_a_share(tmp_path: Path) -> None:
    # seeded draws: at 30% the 4th request is cut (at 10% the 36th, past the end of a short run)
    server_args = "--server-args=--failure-injection-rate 30 --failure-types disconnect"
    run = run_locust("mixed_truncate", tmp_path, "--frame-sample-rate", "0.2", server_args, seconds=5)
    requests, frames = run.requests, run.frames
    sampled = set(frames["request_id"])
    streamed_ok = requests[(requests["outcome"] == "ok") & (requests["data_frames"] > 0)]
    drawn = streamed_ok["request_id"].map(lambda request_id: int(request_id[:8], 16) / 0x1_0000_0000 < 0.2)
    kept = streamed_ok["request_id"].isin(sampled)
    assert len(streamed_ok) >= 10 and (kept == drawn).all()  # exactly the fifth drawn by request id (once
    # asserted as a share in 0.05-0.4: 1 of 37 streams fell in it, a 0.3% draw)
    cut = requests[requests["outcome"] == "cut"]
    assert len(cut) > 0 and cut["request_id"].isin(sampled).all()  # failures always keep their frames
    assert run.judged.frame_sample_rate == 0.2


def test_two_runs_with_processes_started_together_keep_to_their_own_workers(tmp_path: Path) -> None:
    """No port given: each master binds a free port of its own and its forked workers reach it
    (before, both bound Locust's 5557: the second died and its workers joined the first)."""
    runs = []
    for name in ("first", "second"):
        stats = tmp_path / f"{name}-stats"
        command = locust_command(
            SCENARIO, "--headless", "-u", "4", "-r", "4", "-t", "6s", "--processes", "2",
            "--report-dir", str(tmp_path / name), "--only-summary", "--json-file", str(stats),
            "--harness-lag-limit-ms", "1000",
        )  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        runs.append((process, stats))
    for process, stats in runs:
        output, _ = process.communicate(timeout=240)
        match = REPORT_LINE.search(output)
        run = LocustRun(process.returncode, output, Path(match["path"]) if match else None)
        assert_nothing_lost(run, stats.with_suffix(".json"), {"worker-0", "worker-1"})
        assert "Address already in use" not in output


def test_a_worker_of_another_run_is_refused_and_nothing_it_sends_is_written(tmp_path: Path) -> None:
    """A worker started by hand at the port of a ``--processes`` run (whose forked workers share a
    random run id) is refused in its hello: it says so and exits 2, sends no request, and the run
    holds the rows of its own two workers only (before: the stranger joined and its rows were judged)."""
    port = free_loopback_port()
    stats = tmp_path / "stats"
    command = locust_command(
        SCENARIO, "--headless", "-u", "4", "-r", "4", "-t", "8s", "--processes", "2",
        "--master-port", str(port), "--report-dir", str(tmp_path), "--only-summary",
        "--json-file", str(stats), "--harness-lag-limit-ms", "1000",
    )  # fmt: skip
    master = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    stranger = None
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob("*/requests.parquet/*.parquet")):
            assert master.poll() is None and time.monotonic() < deadline, "the run never got going"
            time.sleep(0.1)  # polling for the run's first rows: its workers are in
        stranger = subprocess.run(
            locust_command(SCENARIO, "--worker", "--master-port", str(port)),
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
        output, _ = master.communicate(timeout=120)
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()
    assert stranger.returncode == 2, stranger.stderr[-2000:]
    assert "refused this worker: it has no --run-id, this run's is another" in stranger.stderr
    assert "refused worker" in output
    match = REPORT_LINE.search(output)
    run = LocustRun(master.returncode, output, Path(match["path"]) if match else None)
    assert_nothing_lost(run, stats.with_suffix(".json"), {"worker-0", "worker-1"})


@pytest.mark.fast
@pytest.mark.parametrize(
    ("theirs", "refused_because"),
    [
        (("mixed_truncate", "night-1"), None),
        (("slow_prefill", "night-1"), "it runs scenario 'slow_prefill', this run is 'mixed_truncate'"),
        (("mixed_truncate", None), "it has no --run-id, this run's is another"),
        (("mixed_truncate", "night-2"), "it has --run-id 'night-2', this run's is 'night-1'"),
    ],
)
def test_a_worker_joins_a_run_of_its_own_scenario_and_run_id_only(
    theirs: tuple[str, str | None], refused_because: str | None
) -> None:
    from loadtests.record.membership import RunIdentity

    assert RunIdentity("mixed_truncate", "night-1").mismatch(RunIdentity(*theirs)) == refused_because
    assert RunIdentity("mixed_truncate", None).mismatch(RunIdentity("mixed_truncate", None)) is None
    assert RunIdentity("mixed_truncate", None).mismatch(RunIdentity("mixed_truncate", "x")) == (
        "it has --run-id 'x', this run's is none"
    )


@pytest.mark.fast
def test_processes_give_the_master_and_its_workers_a_run_id_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from loadtests.record.membership import RUN_ID_ENV, own_run_id

    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-id", default=None)
    assert own_run_id(parser, ["-u", "2"]) is None  # no --processes: a cluster by hand names its own
    assert parser.parse_args([]).run_id is None
    made = own_run_id(parser, ["--processes", "2"])
    assert made and len(made) == 16 and parser.parse_args([]).run_id == made  # forked workers inherit it
    assert own_run_id(parser, ["--processes", "2"]) != made  # each run its own
    assert own_run_id(parser, ["--processes", "2", "--run-id", "night-1"]) == "night-1"  # given: kept
    monkeypatch.setenv(RUN_ID_ENV, "night-2")
    assert own_run_id(parser, ["--worker"]) == "night-2"


@pytest.mark.fast
@pytest.mark.parametrize(
    ("argv", "port"),
    [
        (["--processes", "2", "--master-bind-port", "6000"], 6000),
        (["--processes=2", "--master-port=6001"], 6001),
        (["-u", "2"], 5557),  # no --processes: Locust's own default, for a --master given by hand
    ],
)
def test_a_processes_run_binds_and_reaches_one_port_of_its_own(argv: list[str], port: int) -> None:
    import argparse

    from loadtests.base.ports import own_master_port

    parser = argparse.ArgumentParser()
    parser.add_argument("--master-port", type=int, default=5557)
    parser.add_argument("--master-bind-port", type=int, default=5557)
    own_master_port(parser, argv)
    parsed = parser.parse_args([])
    assert parsed.master_port == parsed.master_bind_port == port
    own_master_port(parser, ["--processes", "2"])
    chosen = parser.parse_args([])
    assert chosen.master_port == chosen.master_bind_port != 5557  # a free port, the same for both


def forked_workers(master: int) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """The ``--processes`` master's forked Locust workers, and its other descendants (its server).
    A child that exits while it is looked at (a short-lived helper, a zombie not yet reaped) is
    neither: it has no command line left to read."""
    workers: list[psutil.Process] = []
    others: list[psutil.Process] = []
    for child in psutil.Process(master).children(recursive=True):
        try:
            command = child.cmdline()
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
        (workers if command[1:3] == ["-m", "locust"] else others).append(child)
    return workers, others


class MasterToKill:
    """A ``--processes`` master started in the background with its forked workers, for a test that
    kills it: ``started`` polls until both workers run and the test's own condition holds; leaving
    the ``with`` kills every process of the run still alive, the master's server included."""

    def __init__(self, command: list[str]) -> None:
        self.master = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        self.workers: list[psutil.Process] = []
        self.others: list[psutil.Process] = []
        self.deadline = time.monotonic() + 60

    def started(self, ready: Callable[[], bool], what: str) -> None:
        while len(self.workers) < 2 or not ready():
            assert self.master.poll() is None and time.monotonic() < self.deadline, f"the run never got going: {what}"
            self.workers, self.others = forked_workers(self.master.pid)
            time.sleep(0.1)  # polling for the forked workers and the test's condition

    def kill(self) -> None:
        self.master.kill()
        self.master.wait()

    def __enter__(self) -> MasterToKill:
        return self

    def __exit__(self, *_: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.master.kill()
        self.master.wait()
        for process in [*self.workers, *self.others]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def test_a_killed_worker_leaves_its_missing_rows_named_and_the_run_unjudged(tmp_path: Path) -> None:
    """SIGKILL one of two workers mid-run: the master counts the requests it had started against the
    rows that arrived, the run is not a PASS, its line names the worker and the count, and the
    master does not wait 30 s for a final batch from a worker Locust saw go missing. Before:
    ``verdict: PASS``, a log line only, and the run overran by about 30 s."""
    command = locust_command(
        SCENARIO, "--headless", "-u", "6", "-r", "6", "-t", "12s", "--processes", "2",
        "--server-args=--inter-token-latency 200", "--report-dir", str(tmp_path), "--only-summary",
        "--harness-lag-limit-ms", "1000",
    )  # fmt: skip
    began = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT) as master:
        try:
            deadline = time.monotonic() + 60
            workers: list[psutil.Process] = []
            while len(workers) < 2 or not any(tmp_path.glob("*/requests.parquet/*.parquet")):
                assert master.poll() is None and time.monotonic() < deadline, "the run never got going"
                workers, _ = forked_workers(master.pid)
                time.sleep(0.1)  # polling for the forked workers and the first rows on disk
            time.sleep(2.0)  # rows in flight on the worker about to die
            workers[0].kill()
            output, _ = master.communicate(timeout=180)
        finally:
            if master.poll() is None:
                master.kill()
                master.wait()
    took = time.monotonic() - began
    match = REPORT_LINE.search(output)
    run = LocustRun(master.returncode, output, Path(match["path"]) if match else None)
    assert run.returncode in (1, 3), output[-3000:]  # never a PASS
    completed = run.gate("requests_completed")
    assert not completed["passed"] and "rows lost: worker-" in completed["detail"], completed["detail"]
    lost = run.summary["lost_rows"]
    (worker,) = lost
    assert lost[worker]["missing"] >= 1 and lost[worker]["started"] - lost[worker]["rows"] == lost[worker]["missing"]
    assert f"{worker} started {lost[worker]['started']} requests" in output
    assert took < 12 + 25, f"the run took {took:.0f} s: it waited on the dead worker"


def test_workers_of_a_killed_master_stop_promptly_and_write_their_unsent_rows_into_its_run(
    tmp_path: Path, start_server: StartServer
) -> None:
    """SIGKILL the master mid-run: its forked workers see their parent gone, stop within seconds
    (before: 60 to 80 s) and write the rows they could not send into the test's run directory
    (before: as text beside it, which ``report`` never read), so the killed run is judged on them.
    The server is the test's own, so it outlives the master; the kill waits until all 4 users are
    mid-stream (a bundled server died with its master, and users between requests met it gone)."""
    server = start_server("--inter-token-latency", "100")
    command = locust_command(
        SCENARIO, "--headless", "-u", "4", "-r", "4", "-t", "30s", "--processes", "2",
        "--host", server.url, "--report-dir", str(tmp_path), "--only-summary",
    )  # fmt: skip
    with MasterToKill(command) as run:
        run.started(lambda: any(tmp_path.glob("*/requests.parquet/*.parquet")), "no rows on disk")
        run.started(lambda: gauge(server.url, RUNNING) >= 4, "the users never all streamed at once")
        run.kill()
        _, alive = psutil.wait_procs(run.workers, timeout=15)
        assert not alive, f"{len(alive)} worker(s) still running 15 s after their master died"
    workers = run.workers
    assert not list(tmp_path.glob("orphaned-rows-*.jsonl"))  # the run directory took them
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    by_pid = {str(worker.pid): worker for worker in workers}
    written_by = {part.name.split("-")[1] for part in (run_dir / "requests.parquet").glob("part-*.parquet")}
    assert set(by_pid) <= written_by, (sorted(by_pid), sorted(written_by))  # each worker wrote its own parts
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert set(requests["worker"]) == {"worker-0", "worker-1"} and requests["request_id"].is_unique
    assert (requests["outcome"] == "stopped").sum() >= 4  # every user was mid-stream: 100 ms a token
    assert set(requests["outcome"]) <= {"ok", "stopped", "rejected", "timeout", "cut", "connect_error"}
    command = [sys.executable, "-m", "loadtests", "report", str(run_dir)]
    report = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert report.returncode == 1, report.stdout + report.stderr  # killed: judged as interrupted, so FAIL
    assert Summary.read(RunDir(run_dir).summary).requests == len(requests)  # judged on every row, the workers' too


def test_a_killed_masters_run_says_how_many_requests_its_server_counted_against_its_rows(tmp_path: Path) -> None:
    """SIGKILL a ``--processes`` master that started the bundled server: before, the server had logged
    48 requests, the run directory held 32-44, and nothing said rows were missing. Now ``report``
    sets the rows against the server's own count between its first and last scrape, says it in its
    coverage line and in summary.json, and a run short of it by more than the share allowed has
    ``requests_completed`` unjudged (the verdict fails anyway: the run never wrote its summary)."""
    command = locust_command(
        SCENARIO, "--headless", "-u", "6", "-r", "6", "-t", "30s", "--processes", "2",
        "--report-dir", str(tmp_path), "--only-summary",
    )  # fmt: skip
    with MasterToKill(command) as run:
        metrics = "*/server_metrics.parquet/*.parquet"
        run.started(lambda: len(list(tmp_path.glob(metrics))) >= 2, "no two parts of server metrics on disk")
        run.kill()
        psutil.wait_procs([*run.workers, *run.others], timeout=20)
    (run_dir,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    command = [sys.executable, "-m", "loadtests", "report", str(run_dir)]
    report = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert report.returncode == 1, report.stdout + report.stderr  # killed: judged as interrupted, so FAIL
    section = json.loads((run_dir / "summary.json").read_text())["coverage"]
    assert section["server_weighed"] is True and section["server"] > 0 and section["server_rows"] > 0
    assert section["lost"] == max(0, section["server"] - section["server_rows"])
    (line,) = [line for line in report.stdout.splitlines() if line.startswith("coverage: ")]
    assert f"(the server {section['server']} over its " in line and f"against {section['server_rows']} rows" in line
    completed = next(gate for gate in json.loads((run_dir / "summary.json").read_text())["gates"])
    short = (section["lost"] + section["not_sent"]) > section["max_share"] * (section["seen"] + section["not_sent"])
    assert completed["name"] == "requests_completed" and completed["skipped"] == short, (completed, section)


def _until_gone(process: psutil.Process, timeout: float) -> None:
    """Until ``process`` (not our child) has exited: gone, or a zombie its new parent has yet to reap."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        assert time.monotonic() < deadline, f"pid {process.pid} still running {timeout:g} s after it was resumed"
        time.sleep(0.1)  # polling a process that is not ours to wait for


def test_a_worker_frozen_until_after_its_master_ended_keeps_its_parts_apart_and_report_names_them(
    tmp_path: Path,
) -> None:
    """SIGSTOP one of two workers mid-run: the master judges the run without it (its rows named
    lost) and then waits for it forever, so it is killed, as a person or a CI job ends a hung run.
    The worker, resumed (SIGCONT), writes what it never shipped; before, into the judged run's
    tables, and every ``report`` refused the directory from then on (exit 2). Its parts go to
    ``late/``: ``report`` re-judges the run as it was judged and names them in one line."""
    from tests.loadtests.locust_run import LiveLocust

    args = ("--headless", "-u", "4", "-r", "4", "-t", "20s", "--processes", "2", "--flush-interval", "1")
    frozen: psutil.Process | None = None
    with LiveLocust("mixed_truncate", tmp_path, *args) as locust:
        run_dir = Path(locust.wait_for(r"^run directory: (.+)$")[1])
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while len(workers) < 2 or not any((run_dir / "requests.parquet").glob("part-*.parquet")):
            assert time.monotonic() < deadline, "the run never got going"
            workers, _ = forked_workers(locust.process.pid)
            time.sleep(0.1)  # polling for the forked workers and the first rows on disk
        frozen = workers[0]
        frozen.suspend()
        try:
            locust.wait_for(r"^report: ", timeout=120)  # judged without the frozen worker
            judged = json.loads((run_dir / "summary.json").read_text())
            locust.process.kill()  # it waits for its frozen worker to exit, forever
            locust.process.wait(30)
        finally:
            frozen.resume()
        _until_gone(frozen, 60)
    late = list((run_dir / "late").glob("*.parquet/part-*.parquet"))
    assert late and all(part.name.startswith(f"part-{frozen.pid}-") for part in late), late
    result = subprocess.run(
        [sys.executable, "-m", "loadtests", "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    as_judged = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[judged["verdict"]]
    assert result.returncode == as_judged, result.stdout + result.stderr  # judged as before, never refused (2)
    said = [line for line in result.stdout.splitlines() if line.startswith("verdict: ")]
    assert len(said) == 1 and said[0].split()[1] == judged["verdict"], result.stdout  # with its reason, if any
    named = [line for line in result.stdout.splitlines() if " late part(s) " in line]
    assert len(named) == 1 and named[0].startswith(f"report: {len(late)} late part(s) ("), result.stdout
    assert "written after the run was judged: kept apart in late/, not judged" in named[0]
    assert json.loads((run_dir / "summary.json").read_text())["parts"] == judged["parts"]
