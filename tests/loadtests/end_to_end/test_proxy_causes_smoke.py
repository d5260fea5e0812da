"""Causes as the real proxies run: Apache's whole-second timeout judged as Apache runs it, and
HAProxy's merged writes named, each through ``--proxy`` in front of the bundled server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_proxy
from tests.loadtests.locust_run import run_locust

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
