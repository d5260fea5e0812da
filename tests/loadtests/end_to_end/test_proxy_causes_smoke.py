"""Causes as the real proxies run: Apache's whole-second timeout judged as Apache runs it, HAProxy's
merged writes named, and HAProxy's cuts seen late by a stalled harness still counted as its read
timeouts, each through ``--proxy`` in front of the bundled server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from loadtests.judge.causes import window
from tests.conftest import require_proxy
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun, locust_command, run_locust

pytestmark = [pytest.mark.smoke, pytest.mark.proxies]


def test_apache_asked_for_1_5s_runs_2s_and_every_figure_says_2s(tmp_path: Path) -> None:
    """``--proxy apache --proxy-read-timeout 1.5 --keep-alive-interval 0``: the run said Apache runs
    2 s, but the gate and the causes judged 1.5 s, so its cuts at 2.00 s were other cuts and
    ``no_proxy_timeouts`` passed."""
    require_proxy("apache")
    run = run_locust(
        "proxy_timeout",
        tmp_path,
        "--proxy",
        "apache",
        "--proxy-read-timeout",
        "1.5",
        "--keep-alive-interval",
        "0",
        users=4,
        seconds=6,
    )
    assert run.returncode != 0
    assert "apache: --proxy-read-timeout 1.5 runs as 2 s (apache takes whole seconds)" in run.output
    cuts = run.requests.query("outcome == 'cut'")
    assert len(cuts) >= 4 and cuts["end_silence_s"].between(1.9, 2.3).all(), cuts["end_silence_s"].describe()
    timer = "Apache's 2 s read timeout (1.5 s asked: Apache takes whole seconds)"
    gate = run.gate("no_proxy_timeouts")
    assert not gate["passed"] and f"{len(cuts)} streams cut after them" in gate["detail"]
    assert f"1.70-2.30 s for {timer}" in gate["detail"]
    recorded = run.summary["causes"]["proxy_timeouts"]
    assert (recorded["read_timeout_s"], recorded["window_s"], recorded["other_cuts"]) == (2.0, [1.7, 2.3], 0)
    assert f"1.70-2.30 s for {timer}" in run.output  # the causes: line, as the gate's


@pytest.mark.parametrize("proxy", ["haproxy", "nginx"])
def test_haproxys_merged_writes_are_named_as_its_view_and_nginx_gets_no_such_line(tmp_path: Path, proxy: str) -> None:
    """HAProxy (defaults) merged 50 ms token gaps (83%, max 252 ms) and the run recorded them as the
    server's figures with no line; nginx, which writes at once, gets none."""
    require_proxy(proxy)
    run = run_locust(
        "mixed_truncate", tmp_path, "--proxy", proxy, "--server-args", "--inter-token-latency 50", users=4, seconds=6
    )
    merged = run.summary["causes"].get("writes_merged")
    if proxy == "nginx":
        assert merged is None and "merges writes" not in run.output
        return
    assert merged is not None and merged["proxy"] == "HAProxy" and merged["shown_by_gaps"], merged
    assert merged["merged"] >= 0.25 * merged["token_gaps"] and merged["token_gaps"] >= 20
    assert merged["line"].startswith("sse-soak: the run started HAProxy, which holds and merges writes") and (
        merged["line"] in run.output
    )
    assert "times to first token here are HAProxy's view, not the server's pace" in merged["line"]


READ_TIMEOUT_S = 1.0
STALL_BLOCK_S, STALL_PERIOD_S = 1.5, 2.0
"""The harness's loop held 1.5 s of every 2 s (``tests/loadtests/stalling_locustfile.py``): most of
HAProxy's cuts after 1 s of silence reach the harness while it is held, seen up to 1.5 s late."""


def test_haproxys_cuts_seen_late_while_the_harness_stalled_are_still_its_read_timeouts(tmp_path: Path) -> None:
    """Under load (harness lag up to 4 s) 13 of 21 HAProxy read-timeout cuts were called "not read
    timeouts": the cause rule ignored the stalls the timing gates excuse. Here the stalls are made on
    purpose, so the cuts are seen late every run."""
    require_proxy("haproxy")
    locustfile = ROOT / "tests" / "loadtests" / "stalling_locustfile.py"
    options = [
        *("--headless", "-u", "2", "-r", "2", "-t", "8s", "--stop-timeout", "5", "--only-summary"),
        *("--proxy", "haproxy", "--proxy-read-timeout", str(READ_TIMEOUT_S)),
        *("--server-args", "--time-to-first-token 3000", "--report-dir", str(tmp_path)),
    ]
    env = {**os.environ, "STALL_BLOCK_S": str(STALL_BLOCK_S), "STALL_PERIOD_S": str(STALL_PERIOD_S)}
    result = subprocess.run(
        locust_command(locustfile, *options),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    match = REPORT_LINE.search(result.stdout)
    assert match, result.stdout[-3000:]
    run = LocustRun(result.returncode, result.stdout, Path(match["path"]))
    cuts = run.requests.query("outcome == 'cut'")
    assert len(cuts) >= 2, run.output[-3000:]
    low, high = window(READ_TIMEOUT_S)
    late = cuts[~cuts["end_silence_s"].between(low, high)]
    assert len(late), f"no cut was seen outside {low}-{high} s: the stalls moved nothing, the test proves nothing"
    timeouts = run.summary["causes"]["proxy_timeouts"]
    assert (timeouts["after_headers"], timeouts["other_cuts"]) == (len(cuts), 0), timeouts["line"]
    assert timeouts["stall_counted"] == len(late)
    assert f"{len(late)} of them outside the window by no more than the harness stalled" in run.output
