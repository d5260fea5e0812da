"""A run directory knows its own contents: its summary records each parquet part and its rows,
and ``report`` refuses (exit 2, one line, summary.json untouched) a directory that lost or changed
one. Before: a deleted requests part was re-judged silently, PASS on 259 of 273 requests, and
summary.json was overwritten with the lower count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadtests.judge.summary import Summary
from loadtests.record.run_dir import RunDir, parts_problem
from tests.loadtests.locust_run import ROOT, run_locust


@pytest.mark.fast
def test_parts_missing_changed_or_added_are_each_named() -> None:
    recorded = {"requests.parquet/a.parquet": 5, "requests.parquet/b.parquet": 7}
    assert parts_problem(recorded, dict(recorded), growing=False) is None
    assert parts_problem(recorded, {"requests.parquet/a.parquet": 5}, growing=False) == (
        "1 part(s) missing: requests.parquet/b.parquet"
    )
    assert parts_problem(recorded, {**recorded, "requests.parquet/b.parquet": 6}, growing=False) == (
        "1 part(s) changed: requests.parquet/b.parquet (7 rows, now 6)"
    )
    grown = {**recorded, "lag.parquet/c.parquet": 3}
    assert parts_problem(recorded, grown, growing=False) == "1 part(s) added: lag.parquet/c.parquet"
    assert parts_problem(recorded, grown, growing=True) is None  # a soak's checkpoint: the run went on


def report(run_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadtests", "report", str(run_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.smoke
def test_report_refuses_a_run_directory_that_lost_a_part(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, users=4, seconds=4)
    assert run.returncode == 0, run.output[-3000:]
    run_dir = run.run_dir
    assert run_dir is not None
    summary = Summary.read(RunDir(run_dir).summary)
    parts = summary.parts or {}
    requests_parts = sorted(name for name in parts if name.startswith("requests.parquet/"))
    assert requests_parts and sum(parts[name] for name in requests_parts) == summary.requests
    assert report(run_dir).returncode == 0  # the same directory judges the same

    before = (run_dir / "summary.json").read_bytes()
    (run_dir / requests_parts[0]).unlink()
    refused = report(run_dir)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1 and f"1 part(s) missing: {requests_parts[0]}" in refused.stderr
    assert (run_dir / "summary.json").read_bytes() == before

    first = requests_parts[0]
    rows = pq.read_table(run_dir / requests_parts[-1])
    other = rows.slice(0, 2 if parts[first] == 1 else 1)  # the part back, with another number of rows
    pq.write_table(other, run_dir / first)
    changed = report(run_dir)
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert f"1 part(s) changed: {first} ({parts[first]} rows, now {other.num_rows})" in changed.stderr
