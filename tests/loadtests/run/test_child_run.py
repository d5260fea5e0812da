"""The one launcher of a child run: the command it builds for launch and soak alike, and how it
treats the child (its session, its launcher's name, its output, signals, its time limit)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from loadtests.declare import catalog
from loadtests.launch import Launch
from loadtests.run.child_run import ChildRun
from loadtests.run.soak import SoakPlan
from loadtests.services.parent_watch import LAUNCHER_ENV


def test_a_soak_and_a_launch_of_the_same_run_build_the_same_command(tmp_path: Path) -> None:
    locustfile = catalog.locate("soak")
    host = "http://127.0.0.1:9"
    workers = {"processes": 2}
    launched = Launch(
        locustfile, users=3, duration_s=7, spawn_rate=1.5, host=host, report_dir=tmp_path, options=workers
    )
    soaked = SoakPlan(locustfile, 7, 3, 1.5, processes=2, host=host, report_dir=str(tmp_path), locust_args=["--x=1"])
    launch_command = [sys.executable, "-m", "locust", "-f", str(locustfile), *launched.command()]
    assert soaked.command() == [*launch_command, "--stop-timeout=5", "--x=1"]  # the soak's own, then the user's


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait for a reaper that never comes in a container)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


OUTLIVES_ITS_LIMIT = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(f"worker {worker.pid}", flush=True)
print(f"own session {os.getsid(0) == os.getpid()}, launcher {os.environ.get(sys.argv[1])}", flush=True)
time.sleep(120)
"""


def test_a_child_that_outlives_its_limit_is_killed_with_its_group() -> None:
    seen: list[str] = []
    command = [sys.executable, "-c", OUTLIVES_ITS_LIMIT, LAUNCHER_ENV]
    with ChildRun(command, dict(os.environ), on_line=seen.append) as child:
        returncode, output, problem = child.wait(limit_s=3)
    assert (returncode, problem) == (-signal.SIGKILL, "killed after 3 s: the run did not end by itself")
    assert seen == output.splitlines() and seen[1] == f"own session True, launcher {os.getpid()}"
    worker = int(seen[0].split()[1])
    deadline = time.monotonic() + 10
    while running(worker) and time.monotonic() < deadline:
        time.sleep(0.05)  # SIGKILL is not instant for the kernel either
    assert not running(worker), "the child's worker outlived it"


ENDS_ON_SIGTERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"ended by {signal.Signals(signum).name}"))
print("ready", flush=True)
time.sleep(60)
"""


def test_a_signal_forwarded_reaches_the_child_as_the_one_asked_for_and_is_named() -> None:
    ready = threading.Event()
    command = [sys.executable, "-c", ENDS_ON_SIGTERM]
    with ChildRun(command, dict(os.environ), on_line=lambda line: ready.set() if line == "ready" else None) as child:
        before = signal.getsignal(signal.SIGINT)
        with child.forwarding((signal.SIGINT, signal.SIGTERM), signal.SIGTERM):
            assert ready.wait(30)
            os.kill(os.getpid(), signal.SIGINT)  # handled here, between two bytecodes of this thread
            returncode, output, problem = child.wait(limit_s=30)
        assert signal.getsignal(signal.SIGINT) is before
    assert (returncode, problem, child.interrupted_by) == (1, None, "SIGINT")
    assert output.splitlines()[-1] == "ended by SIGTERM"
