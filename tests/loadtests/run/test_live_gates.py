"""The live metrics' gate states are judged in a child process, never in the run's own (whose GIL the
load's event loop needs): its answers are the judgement so far, its failures one error the watch
retries, and it ends, reaped, when closed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest

from loadtests.errors import LiveJudgeError
from loadtests.record.run_dir import RunDir
from loadtests.run.live_gates import ChildJudge
from tests.loadtests.locust_run import run_locust


@pytest.fixture(scope="module")
def judged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = run_locust("mixed_truncate", tmp_path_factory.mktemp("runs"), seconds=3)
    assert run.returncode == 0, run.output[-3000:]
    return run.checked_run_dir


def test_the_child_judges_a_run_so_far_by_its_manifests_gates_and_ends_when_closed(
    judged_run: Path, tmp_path: Path
) -> None:
    copy = tmp_path / judged_run.name
    shutil.copytree(judged_run, copy)
    (copy / RunDir.SUMMARY).unlink()  # so far: nothing of the verdict is read
    judge = ChildJudge(copy, 0.05)
    try:
        states, interval = judge()
        child = judge._pid
        assert child is not None and child != os.getpid()
        assert states["requests_completed"] == 1 and states["truncated_ok_at_1000"] == 1
        assert set(states) >= {"no_http_500", "outcomes_as_expected", "keepalive_covered"}
        assert interval == 0.25
        assert judge() == (states, interval)  # the same child answers again
        assert judge._pid == child
    finally:
        judge.close()
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert sorted(path.name for path in copy.iterdir()) == sorted(
        path.name for path in judged_run.iterdir() if path.name != RunDir.SUMMARY
    )  # it wrote nothing


def test_a_directory_it_cannot_judge_is_one_error_and_the_child_answers_the_next(tmp_path: Path) -> None:
    judge = ChildJudge(tmp_path / "nothing-here", 0.05)
    try:
        with pytest.raises(LiveJudgeError):
            judge()
        child = judge._pid
        with pytest.raises(LiveJudgeError):
            judge()
        assert judge._pid == child
    finally:
        judge.close()
