"""A stream that never ends is judged, never excused: the bundled server's ``stall`` fault keeps a
stream alive with keep-alive comments, as a hung engine behind vLLM's keep-alive does, so the
client's idle timeout never fires. Before: 8 such streams, ``verdict: PASS``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.loadtests.locust_run import run_locust

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

STALLS = "--server-args=--failure-injection-rate 15 --failure-types stall --stall-seconds 60"


def test_streams_still_open_far_longer_than_the_rest_when_the_run_ends_are_stuck(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, STALLS, users=8, seconds=14)
    assert run.returncode == 1, run.output[-3000:]
    requests = run.requests
    stuck = requests[requests["outcome"] == "timeout"]
    assert len(stuck) >= 1, requests["outcome"].value_counts()
    assert stuck["error_message"].str.startswith("stuck: still open when the run ended").all(), stuck["error_message"]
    assert (stuck["duration_s"] > 5.0).all() and stuck["keepalive_frames"].fillna(1).ge(1).all()
    longest_ok = requests.loc[requests["outcome"] == "ok", "duration_s"].max()
    assert (stuck["duration_s"] > 3 * longest_ok).all()
    stopped = requests[requests["outcome"] == "stopped"]
    assert stopped["error_message"].str.startswith("the run ended").all()
    assert "verdict: FAIL" in run.output and not run.gate("outcomes_as_expected")["passed"]


def test_a_stream_past_its_deadline_is_a_timeout_naming_the_deadline(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, STALLS, "--stream-deadline", "3", users=8, seconds=10)
    assert run.returncode == 1, run.output[-3000:]
    requests = run.requests
    deadline = requests[requests["error_message"].fillna("").str.contains("--stream-deadline")]
    assert len(deadline) >= 1, requests[["outcome", "error_message"]].to_string()
    assert (deadline["outcome"] == "timeout").all() and deadline["duration_s"].between(3.0, 4.5).all()
    assert (requests.loc[requests["outcome"] == "ok", "duration_s"] < 3.0).all()
