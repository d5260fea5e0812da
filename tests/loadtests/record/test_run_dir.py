"""Run directories: one per run even when runs start in the same second, and a report root that
cannot hold them is a ``RunDirError`` with one line naming it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loadtests.errors import RunDirError
from loadtests.record import run_dir
from loadtests.record.run_dir import RunDir, report_root_problem
from tests.loadtests.locust_run import ROOT

RUNS = 8
FIXED_SECOND = time.struct_time((2026, 1, 1, 0, 0, 0, 3, 1, 0))


def new_run_dir(root: Path, scenario: str) -> Path:
    return RunDir.create(root, scenario).path


# A child that makes its run directory when told to (a line on stdin), all in the same UTC second.
CHILD = """
import sys, time
from loadtests.record import run_dir
run_dir.time.gmtime = lambda *_: time.struct_time((2026, 1, 1, 0, 0, 0, 3, 1, 0))
print("ready", flush=True)
sys.stdin.readline()
print(run_dir.RunDir.create(sys.argv[1], "race"), flush=True)
"""


def test_eight_processes_in_the_same_second_get_eight_directories(tmp_path: Path) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(RUNS)
    ]
    try:
        for child in children:  # every one imported and waiting: then all go at once
            assert child.stdout is not None and child.stdout.readline() == "ready\n", child.stderr
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [child.communicate(timeout=60) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [child.returncode for child in children] == [0] * RUNS, [err for _, err in results]
    made = {Path(out.strip()) for out, _ in results}
    assert len(made) == RUNS and made == set(tmp_path.iterdir())
    assert {path.name for path in made} == {"race-20260101T000000Z"} | {
        f"race-20260101T000000Z-{n}" for n in range(2, RUNS + 1)
    }


@pytest.mark.fast
def test_eight_threads_past_a_barrier_get_eight_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_dir.time, "gmtime", lambda *_: FIXED_SECOND)
    barrier, made, errors = threading.Barrier(RUNS), [], []

    def run() -> None:
        barrier.wait(timeout=30)
        try:
            made.append(new_run_dir(tmp_path / "reports", "race"))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(RUNS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(set(made)) == RUNS
    assert all(path.is_dir() for path in made)


@pytest.mark.fast
def test_a_taken_name_is_skipped_even_when_it_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_dir.time, "gmtime", lambda *_: FIXED_SECOND)
    (tmp_path / "demo-20260101T000000Z").write_text("not a run")
    assert new_run_dir(tmp_path, "demo") == tmp_path / "demo-20260101T000000Z-2"


@pytest.mark.fast
def test_a_missing_report_root_is_created(tmp_path: Path) -> None:
    directory = new_run_dir(tmp_path / "a" / "b", "demo")
    assert directory.parent == tmp_path / "a" / "b" and directory.is_dir()


@pytest.mark.fast
def test_a_report_root_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    root.write_text("x")
    with pytest.raises(ValueError) as caught:  # RunDirError is a ValueError: callers that catch those keep working
        new_run_dir(root, "demo")
    assert isinstance(caught.value, RunDirError)
    assert str(caught.value) == f"--report-dir {root}: not a directory (a file is in the way)"
    assert root.read_text() == "x"


@pytest.mark.fast
def test_a_file_in_the_way_above_the_report_root_is_named(tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("x")
    root = tmp_path / "reports" / "nightly"
    with pytest.raises(RunDirError) as caught:
        new_run_dir(root, "demo")
    assert str(caught.value) == f"--report-dir {root}: cannot be created (a file is in the way: {tmp_path / 'reports'})"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_report_root_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "reports"
    root.mkdir(mode=0o500)
    try:
        with pytest.raises(RunDirError) as caught:
            new_run_dir(root, "demo")
        assert str(caught.value) == f"--report-dir {root}: not writable"
        assert report_root_problem(root / "sub") == f"cannot be created ({root} is not writable)"
    finally:
        root.chmod(0o700)


@pytest.mark.fast
def test_a_mkdir_refused_by_the_system_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the checks cannot see (root on a read-only mount, an ACL) still ends as a ``RunDirError``."""

    def refuse(*_: object, **__: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(RunDirError) as caught:
        new_run_dir(tmp_path, "demo")
    assert str(caught.value) == f"--report-dir {tmp_path}: cannot create a run directory (Permission denied)"


@pytest.mark.fast
def test_a_run_name_that_is_a_path_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    root = tmp_path / "reports" / "inner"
    with pytest.raises(RunDirError, match=r"run name '\.\./\.\./x' is not a plain name"):
        RunDir.create(root, "../../x")
    assert not (tmp_path / "reports").exists()


# A writer that holds a run directory until its stdin closes (or it is killed).
HOLDER = """
import sys
from loadtests.record.run_dir import RunDir
lock = RunDir(sys.argv[1]).writer_lock()
print("held", flush=True)
sys.stdin.read()
"""


def test_a_run_directory_has_one_writer_at_a_time_and_a_killed_one_leaves_no_lock(tmp_path: Path) -> None:
    """The lock names its holder to whoever else asks (``RunInProgress``, one line); the kernel
    drops it with its holder however that dies, so a killed run is never left unreportable."""
    from loadtests.errors import RunInProgress

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(RunInProgress) as refused:
            run.writer_lock()
        (line,) = str(refused.value).splitlines()
        assert f"{run.path}: the run is still in progress (pid {holder.pid} on " in line
        holder.kill()
        holder.wait(30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()
    with run.writer_lock() as lock:  # the killed holder's lock went with it
        assert lock.held
        assert run.writer_lock_file.read_text().startswith(f"pid {os.getpid()} on ")
    with run.writer_lock() as again:  # released: the next writer takes it at once
        assert again.held
