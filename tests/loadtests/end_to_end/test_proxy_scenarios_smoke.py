"""slow_prefill and proxy_timeout through the proxies: positive runs and negative controls.

proxy_timeout runs through every proxy ``--proxy`` starts (the embedded one and each real one);
slow_prefill through the embedded proxy and nginx. With keep-alive off, every proxy cuts the
streams and the run fails; how each cuts is in docs/proxies.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.services.proxies import real_proxies
from tests.conftest import real_proxy_params, require_nginx, require_proxy
from tests.loadtests.locust_run import run_locust

pytestmark = pytest.mark.smoke

REAL_PROXIES = real_proxies()

GATE_NAMES_THE_CUTS = {"embedded", "nginx", "apache", "haproxy", "squid"}
"""The proxies whose every read-timeout cut in this scenario ``no_proxy_timeouts`` names
(``loadtests.judge.causes``): HAProxy's, after the 1.8 s of silence its ~0.2 s write delay leaves the
client, and Squid's, after 2.75 to 3.7 s (its whole-second timer). Caddy ends a cut stream with a
clean final chunk (a ``cut``: no ``[DONE]``), named by the gate, but once in about fifteen runs
ended one stream 5 ms after its headers (cause not found), which the gate counts as another cut."""
SILENCE_BEFORE_THE_CUT = {"haproxy": (1.70, 2.0), "squid": (2.0, 4.0)}
"""Where a proxy's cut does not come after 2.0 s of silence as the client sees it: the range it came in."""


@pytest.fixture(params=real_proxy_params("embedded", "nginx"))
def proxy(request: pytest.FixtureRequest) -> str:
    if request.param == "nginx":
        require_nginx()
    return request.param


@pytest.fixture(params=real_proxy_params("embedded", *REAL_PROXIES))
def any_proxy(request: pytest.FixtureRequest) -> str:
    if request.param in REAL_PROXIES:
        require_proxy(request.param)
    return request.param


def test_proxy_timeout_streams_survive_a_2s_proxy_through_5s_prefill_with_keepalive(
    tmp_path: Path, any_proxy: str
) -> None:
    proxy = any_proxy
    run = run_locust("proxy_timeout", tmp_path, "--proxy", proxy, users=4, seconds=8)
    assert run.returncode == 0, run.output[-3000:]
    summary = run.summary
    assert summary["settings"]["proxy"] == proxy and summary["settings"]["proxy_read_timeout"] == 2.0
    assert summary["outcomes"]["ok"] >= 2
    assert summary["outcomes"]["cut"] == summary["causes"]["proxy_timeouts_before_headers"] == 0
    finished = run.requests.query("outcome == 'ok'")
    assert (finished["silence_before_first_token_s"] >= 4.5).all()  # 5 s prefill: far longer than the proxy's 2 s...
    assert (finished["max_gap_s"] < 2.0).all() and (finished["keepalive_frames"] >= 9).all()  # ...but never silent


def test_proxy_timeout_without_keepalive_every_stream_is_cut_and_the_run_fails(tmp_path: Path, any_proxy: str) -> None:
    proxy = any_proxy
    run = run_locust("proxy_timeout", tmp_path, "--proxy", proxy, "--keep-alive-interval", "0", users=4, seconds=6)
    assert run.returncode != 0
    assert run.summary["settings"]["keep_alive_interval"] == 0.0
    requests = run.requests.query("outcome != 'stopped'")
    assert len(requests) >= 4
    assert not run.gate("every_stream_ok")["passed"]
    assert set(requests["outcome"]) == {"cut"} and (requests["status"] == 200).all()
    if proxy not in GATE_NAMES_THE_CUTS:
        return
    low, high = SILENCE_BEFORE_THE_CUT.get(proxy, (2.0 * 0.98, 2.3))
    assert requests["max_gap_s"].between(low, high).all(), requests["max_gap_s"].describe()
    gate = run.gate("no_proxy_timeouts")
    assert not gate["passed"] and f"{len(requests)} streams cut after them" in gate["detail"]
    assert "server keep-alive off" in gate["detail"]
    assert "gate FAIL no_proxy_timeouts:" in run.output


def test_slow_prefill_keepalive_covers_every_silence(tmp_path: Path, proxy: str) -> None:
    run = run_locust("slow_prefill", tmp_path, "--proxy", proxy, users=6, seconds=8)
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests.query("outcome == 'ok'")
    waited = requests[requests["silence_before_first_token_s"] > 1.5]  # queued behind another stream
    assert len(waited) >= 2
    assert (waited["keepalive_frames"] >= (waited["silence_before_first_token_s"] / 0.5).astype(int) - 1).all()
    assert (requests["max_gap_s"] <= 0.75).all()
    by_silence = run.summary["causes"]["keepalive_vs_silence"]
    assert sum(bucket["streams"] for bucket in by_silence) == int((run.requests["status"] == 200).sum())


def test_slow_prefill_without_keepalive_fails_its_keepalive_gates(tmp_path: Path, proxy: str) -> None:
    run = run_locust("slow_prefill", tmp_path, "--proxy", proxy, "--keep-alive-interval", "0", users=6, seconds=6)
    assert run.returncode != 0
    assert not run.gate("keepalive_through_silence")["passed"]
    assert not run.gate("max_gap_within_interval_plus_0.25s")["passed"]
    assert run.judged.keepalive_frames == 0
