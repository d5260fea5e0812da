"""compare: the side-by-side table and the regression verdict."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtests.compare import Thresholds, compare, load_summary
from tests.loadtests.locust_run import ROOT, run_locust


def summary(**changes: Any) -> dict[str, Any]:
    base = {
        "requests": 1000, "http_500": 0, "inband_500": 0, "passed": True,
        "outcomes": {"ok": 900, "rejected": 100, "stopped": 0},
        "latency": {"ttft_s": {"p50": 0.2, "p95": 0.4}, "duration_s": {"p95": 1.0}, "max_gap_s": {"p99": 0.5}},
        "keepalive_per_stream": {"mean": 4.0},
    }  # fmt: skip
    result = copy.deepcopy(base)
    for dotted, value in changes.items():
        target = result
        *path, last = dotted.split("__")
        for key in path:
            target = target[key]
        target[last] = value
    return result


DEFAULTS = Thresholds()


def regressions(new: dict[str, Any], limits: Thresholds = DEFAULTS) -> list[str]:
    return [row.metric for row in compare(summary(), new, limits) if row.regressed]


def test_an_identical_run_is_no_regression() -> None:
    assert regressions(summary()) == []


def test_a_single_new_500_is_a_regression() -> None:
    # 1 in 1000 is within the failure-rate threshold (0.001), but no 500 is tolerated.
    assert regressions(summary(inband_500=1, outcomes__inband_error=1, outcomes__ok=899)) == [
        "500 rate (HTTP + in-band)"
    ]


def test_cuts_beyond_the_failure_threshold_regress_and_within_do_not() -> None:
    assert regressions(summary(outcomes__cut=5, outcomes__ok=895)) == ["failure rate"]
    assert regressions(summary(outcomes__cut=5, outcomes__ok=895), Thresholds(max_failure_rate_increase=0.01)) == []


def test_latency_growth_beyond_the_threshold_regresses() -> None:
    assert regressions(summary(latency__ttft_s__p95=0.6)) == ["ttft_s p95"]
    assert regressions(summary(latency__ttft_s__p95=0.45)) == []


def test_a_keepalive_drop_and_a_lost_verdict_regress() -> None:
    assert regressions(summary(keepalive_per_stream__mean=1.0)) == ["keep-alive frames per raw stream"]
    verdict = "verdict passed (an interrupted run fails)"
    assert regressions(summary(passed=False)) == ["gates passed", verdict]  # an older summary: no gates_passed
    interrupted = summary(passed=False, gates_passed=True, interrupted="SIGTERM at 5.0 s of 15 s")
    assert regressions(interrupted) == [verdict]


def test_stopped_streams_are_not_judged() -> None:
    rows = compare(summary(), summary(requests=1100, outcomes__stopped=100))
    assert rows[0].base == rows[0].new == 1000


def test_load_summary_takes_a_run_dir_or_the_file(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(summary()))
    assert load_summary(tmp_path) == load_summary(tmp_path / "summary.json") == summary()
    with pytest.raises(FileNotFoundError, match=r"no summary\.json"):
        load_summary(tmp_path / "nowhere")


def run_compare(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadtests", "compare", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)


@pytest.mark.smoke
def test_compare_flags_a_faulty_run_against_a_clean_one(tmp_path: Path) -> None:
    clean = run_locust("mixed_truncate", tmp_path, seconds=4)
    faults = "--server-args=--failure-injection-rate 15 --failure-types inband_error disconnect"
    faulty = run_locust("mixed_truncate", tmp_path, faults, seconds=4)
    assert clean.run_dir and faulty.run_dir
    flagged = run_compare(str(clean.run_dir), str(faulty.run_dir))
    assert flagged.returncode == 1, flagged.stdout
    last = flagged.stdout.strip().splitlines()[-1]
    assert last.startswith("compare: REGRESSION:") and "500 rate" in last and "failure rate" in last
    same = run_compare(str(clean.run_dir), str(clean.run_dir / "summary.json"))
    assert same.returncode == 0 and same.stdout.strip().endswith("compare: OK, no regression")


def test_compare_command_line_errors_are_one_line(tmp_path: Path) -> None:
    result = run_compare(str(tmp_path), str(tmp_path))
    assert (
        result.returncode == 1
        and result.stderr.strip() == f"python -m loadtests compare: no summary.json at {tmp_path}"
    )
