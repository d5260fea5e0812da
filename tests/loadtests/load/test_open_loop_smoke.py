"""Open-loop runs with real Locust: the schedule is kept whatever the server does, and what it could
not keep is written down (late starts, ``not_sent`` rows), alone and across worker processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.loadtests.locust_run import run_in_checkout, run_locust

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

FAST = "--server-args=--prefill-time-per-token 0 --inter-token-latency 1"
SLOW = "--server-args=--max-num-seqs 1 --time-to-first-token 700"


def scheduled(requests: pd.DataFrame) -> pd.DataFrame:
    return requests[requests["scheduled_time"].notna()].sort_values("scheduled_time")


def test_a_server_that_keeps_up_gets_the_rate_asked_on_schedule(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--rate", "10", "--arrival", "constant", FAST, users=8, seconds=5)
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests
    assert requests["scheduled_time"].notna().all()  # every request of an open-loop run follows the schedule
    section = run.summary["arrival"]
    assert section["rate"] == 10 and section["arrival"] == "constant"
    assert section["not_sent"] == 0 and section["sent"] == section["scheduled"] == len(requests)
    times = scheduled(requests)["scheduled_time"].diff().dropna()
    assert times.to_numpy() == pytest.approx(0.1, abs=1e-6)  # constant spacing at 10 a second
    assert section["rate_achieved"] == pytest.approx(10.0, rel=1e-3)
    assert "arrivals: asked 10/s (constant), " in run.output
    assert "asked 10/s (constant), " in (run.checked_run_dir / "report.html").read_text()  # the report's headline


def test_a_server_that_falls_behind_makes_requests_late_and_leaves_some_unsent(tmp_path: Path) -> None:
    args = ("--rate", "8", "--arrival", "poisson", "--max-in-flight", "1", SLOW)
    run = run_locust("mixed_truncate", tmp_path, *args, users=4, seconds=5)
    requests = run.requests
    section = run.summary["arrival"]
    not_sent = requests[requests["outcome"] == "not_sent"]
    assert section["not_sent"] == len(not_sent) > 0 and not_sent["status"].isna().all()
    sent = scheduled(requests[requests["outcome"] != "not_sent"])
    assert section["sent"] == len(sent) and section["rate_achieved"] < section["rate"]
    lateness = sent["start_lateness_s"]
    assert lateness.notna().all() and lateness.iloc[-1] > lateness.iloc[0]  # the backlog grew
    assert section["late"] > 0 and section["ttft_from_schedule_s"]["max"] > section["ttft_from_send_s"]["max"]
    # the unsent ones were due after every sent one had been taken: the backlog at the end
    assert not_sent["scheduled_time"].min() > sent["scheduled_time"].min()
    assert run.gate("outcomes_as_expected")["passed"]  # never sent is no verdict on the server
    assert f"{section['not_sent']} not sent" in run.output


def test_workers_split_the_rate_and_together_keep_one_schedule(tmp_path: Path) -> None:
    args = ("--rate", "10", "--arrival", "constant", "--processes", "2", FAST)
    run = run_locust("mixed_truncate", tmp_path, *args, users=8, seconds=6)
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests
    assert set(requests["worker"]) == {"worker-0", "worker-1"}
    times = scheduled(requests)["scheduled_time"].diff().dropna()
    assert times.to_numpy() == pytest.approx(0.1, abs=1e-6)  # interleaved from one shared start: 10 a second in all
    assert run.summary["arrival"]["rate_achieved"] == pytest.approx(10.0, rel=1e-3)


def test_an_open_loop_that_sent_few_of_its_schedule_is_inconclusive_live_and_in_report(tmp_path: Path) -> None:
    """Before: 36 of 197,482 scheduled requests sent, ``verdict: PASS``, exit 0. What was never sent
    is no verdict on the server, but a verdict on so little of the schedule is no PASS either."""
    args = ("--rate", "40", "--arrival", "constant", "--max-in-flight", "1", SLOW)
    run = run_locust("mixed_truncate", tmp_path, *args, users=2, seconds=4)
    assert run.returncode == 3, run.output[-3000:]
    section = run.summary["coverage"]
    assert section["scheduled"] == run.summary["arrival"]["scheduled"] and section["not_sent"] > section["judged"]
    (line,) = [line for line in run.output.splitlines() if line.startswith("coverage: ")]
    assert f"{section['scheduled']} scheduled" in line and f"; {section['not_sent']} never sent; " in line
    verdict = next(line for line in run.output.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: INCONCLUSIVE (its point could not be judged: ") and "never sent (" in verdict
    again = run_in_checkout(sys.executable, "-m", "loadtests", "report", str(run.checked_run_dir), timeout=120)
    assert again.returncode == 3 and line in again.stdout.splitlines() and verdict in again.stdout.splitlines()
