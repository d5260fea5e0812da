"""A real run of the bundled server read into the history: one night whose figures are its
summary's, and the same night as an older sse-soak wrote it, its gaps and keep-alive read back from
its parquet tables."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from loadtests.judge.summary import TOKEN_GAP
from loadtests.report.history import read_history
from tests.loadtests.locust_run import ROOT, run_locust, soak_command
from tests.loadtests.synthetic_nights import OLD_VERSION, as_older_version

pytestmark = pytest.mark.smoke


def independent_token_gaps(frames: pd.DataFrame) -> pd.Series:
    """Each stream's data frames in order, the time between one and the next: the figure by hand."""
    gaps: list[float] = []
    for _, stream in frames[frames["kind"] == "data"].groupby("request_id"):
        times = stream.sort_values("seq")["t_s"].tolist()
        gaps += [later - earlier for earlier, later in itertools.pairwise(times)]
    return pd.Series(gaps, dtype="float64")


def test_a_real_run_is_one_night_with_its_summarys_figures(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path / "reports", seconds=4)
    assert run.returncode == 0, run.output[-3000:]
    summary = run.summary
    found = read_history([tmp_path / "reports"])
    assert not found.left_out
    (night,) = found.nights.to_dict("records")
    latency = summary["latency"]
    assert night["series"] == "mixed_truncate on bundled" and night["kind"] == "run"
    assert night["verdict"] == summary["verdict"] == "PASS" and night["gates_failed"] == ""
    assert (night["requests"], night["judged"]) == (summary["requests"], summary["coverage"]["judged"])
    assert (night["ttft_p50_s"], night["ttft_p99_s"]) == (latency["ttft_s"]["p50"], latency["ttft_s"]["p99"])
    assert (night["gap_p50_s"], night["gap_p99_s"]) == (latency[TOKEN_GAP]["p50"], latency[TOKEN_GAP]["p99"])
    assert night["longest_silence_s"] == latency["max_gap_s"]["max"]
    assert night["silence_over_interval"] == latency["max_gap_s"]["max"] / summary["settings"]["keep_alive_interval"]
    assert night["keepalive_per_silent_s"] == summary["keepalive_per_stream"]["per_silent_s"] > 0
    assert night["harness_lag_p99_ms"] == summary["harness_lag_ms"]["p99"]
    assert night["server_kv_cache_max"] == summary["server_metrics"]["kv_cache_usage"]["max"]
    assert night["rate_http_5xx"] == summary["outcomes"]["http_5xx"] / summary["coverage"]["judged"]
    by_hand = independent_token_gaps(run.frames)
    assert latency[TOKEN_GAP]["count"] == len(by_hand) > 0
    assert latency[TOKEN_GAP]["p99"] == pytest.approx(by_hand.quantile(0.99), abs=1e-6)

    older = tmp_path / "older" / run.checked_run_dir.name
    shutil.copytree(run.checked_run_dir, older)
    as_older_version(older)
    (old_night,) = read_history([older]).nights.to_dict("records")
    assert old_night["version"] == OLD_VERSION
    for column in ("gap_p50_s", "gap_p99_s", "keepalive_per_silent_s"):  # from frames.parquet and requests.parquet
        assert old_night[column] == pytest.approx(night[column], abs=1e-6), column

    out = tmp_path / "history"
    cli = subprocess.run(
        [sys.executable, "-m", "loadtests", "history", str(tmp_path / "reports"), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert cli.stdout.splitlines()[-1] == f"history: 1 night in 1 series, 0 regression(s): {out / 'history.html'}"


@pytest.mark.soak
def test_a_real_soak_is_a_soak_night_with_its_peak_memory(tmp_path: Path) -> None:
    command = soak_command(tmp_path / "reports", "--duration", "12s", "--users", "4")
    soak = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=170, stdin=subprocess.DEVNULL)
    assert soak.returncode == 0, soak.stdout[-3000:] + soak.stderr[-3000:]
    (run_dir,) = (tmp_path / "reports").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    resources = pd.read_csv(run_dir / "resources.csv")
    (night,) = read_history([run_dir]).nights.to_dict("records")
    assert night["kind"] == "soak" and night["series"] == "soak on bundled via embedded"
    assert night["verdict"] == summary["verdict"] and night["gates_failed"] == ""
    assert (night["gap_p50_s"], night["gap_p99_s"]) == (
        summary["latency"][TOKEN_GAP]["p50"],
        summary["latency"][TOKEN_GAP]["p99"],
    )
    assert night["harness_peak_rss_mb"] == resources["harness_rss_mb"].max() > 0
    assert night["server_peak_rss_mb"] == resources["server_rss_mb"].max() > 0
