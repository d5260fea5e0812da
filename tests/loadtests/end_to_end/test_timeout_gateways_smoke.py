"""Timeouts of proxies and gateways the run did not start (``--host`` at them): real HAProxy, Apache
and LiteLLM, started by the test in front of a silent server. Each is attributed by the one rule of
``loadtests.judge.causes`` from what the client saw (the silence, the status, the ``Server`` header,
the error body), and the verdict, the gate's line and the ``causes:`` line say the same."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.services.proxies import start_real_proxy
from loadtests.services.proxies.litellm import start_litellm
from loadtests.services.stack import ChildService
from tests.conftest import StartServer, require_litellm, require_proxy
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun, locust_command, run_locust

pytestmark = pytest.mark.smoke

SILENT_5S = ("--max-num-seqs", "2", "--time-to-first-token", "5000", "--inter-token-latency", "20")
"""scenarios/proxy_timeout.py's server, started by the test with keep-alive off: 5 s to a first token."""
READ_TIMEOUT_S = 2.0


def agreeing_lines(run: LocustRun) -> str:
    """The gate's line and the causes line say the same phrase, and the verdict fails on the gate;
    returns the phrase."""
    phrase = run.summary["causes"]["proxy_timeouts"]["line"]
    gate = run.gate("no_proxy_timeouts")
    assert not gate["passed"] and gate["detail"].startswith(phrase + "; longest silence"), gate["detail"]
    lines = run.output.splitlines()
    assert f"gate FAIL no_proxy_timeouts: {gate['detail']}" in lines
    assert any(line.startswith(f"causes: {phrase}; statuses ") for line in lines), run.output[-3000:]
    verdict = next(line for line in lines if line.startswith("verdict: "))
    assert verdict.startswith("verdict: FAIL") and "no_proxy_timeouts" in verdict.split("failed: ")[1]
    return phrase


@pytest.fixture
def gateway(start_server: StartServer, request: pytest.FixtureRequest) -> Iterator[ChildService]:
    """The real proxy or gateway ``request.param`` names, its read timeout 2 s, in front of a server
    silent 5 s before each first token, with keep-alive off. ``apache-before-litellm``: Apache in
    front of LiteLLM (which holds the headers until the first token, its own timeout far off) in
    front of that server with keep-alive on, which LiteLLM strips: Apache times out before any header."""
    kind = request.param
    if kind != "haproxy":
        require_litellm()
    if kind != "litellm":
        require_proxy(kind.split("-")[0])
    started: list[ChildService] = []
    try:
        if kind == "apache-before-litellm":
            server = start_server(*SILENT_5S, "--sse-keep-alive-interval", "0.5")
            started.append(start_litellm(server.url, 30.0))
            started.append(start_real_proxy("apache", started[-1].url, READ_TIMEOUT_S))
        else:
            server = start_server(*SILENT_5S, "--sse-keep-alive-interval", "0")
            start = start_litellm if kind == "litellm" else functools.partial(start_real_proxy, kind)
            started.append(start(server.url, READ_TIMEOUT_S))
        yield started[-1]
    finally:
        for service in reversed(started):
            service.stop()


@pytest.mark.proxies
@pytest.mark.parametrize("gateway", ["haproxy"], indirect=True)
def test_haproxys_cuts_after_1_8s_of_silence_are_its_read_timeout(tmp_path: Path, gateway: ChildService) -> None:
    """HAProxy holds each write ~0.2 s, so the client sees 1.8 s of silence before each 2 s cut (a
    0.95 x rule filed them all as other cuts, and the gate passed)."""
    run = run_locust("proxy_timeout", tmp_path, "--host", gateway.url, "--keep-alive-interval", "0", users=2, seconds=7)
    assert run.returncode == 1, run.output[-3000:]
    assert "the scenario's own proxy (embedded) is not started in front of it" in run.output  # --host: none added
    cuts = run.requests.query("outcome == 'cut'")
    assert len(cuts) >= 2 and set(run.requests.query("outcome != 'stopped'")["outcome"]) == {"cut"}
    assert cuts["end_silence_s"].between(1.7, 2.05).all(), cuts["end_silence_s"].tolist()
    phrase = agreeing_lines(run)
    assert phrase.startswith(f"0 proxy timeouts before the headers, {len(cuts)} streams cut after them, after ")
    assert "other cuts" not in phrase


@pytest.mark.proxies
@pytest.mark.litellm
@pytest.mark.parametrize("gateway", ["apache-before-litellm"], indirect=True)
def test_apaches_502_after_its_timeout_is_named_and_fails_the_gate(tmp_path: Path, gateway: ChildService) -> None:
    """Apache answers a timeout before the upstream's headers with 502 Proxy Error (the gate looked
    for 504 and said 0 proxy 504s, PASS); LiteLLM behind it held the headers, and stripped the
    server's keep-alive, which would have kept Apache's timer from firing."""
    run = run_locust("proxy_timeout", tmp_path, "--host", gateway.url, "--keep-alive-interval", "0", users=2, seconds=7)
    assert run.returncode == 1, run.output[-3000:]
    answered = run.requests.query("outcome != 'stopped'")
    assert len(answered) >= 2 and set(answered["status"]) == {502} and set(answered["outcome"]) == {"http_5xx"}
    assert answered["served_by"].str.contains("Apache").all()
    phrase = agreeing_lines(run)
    assert phrase.startswith(f"{len(answered)} proxy timeouts before the headers ({len(answered)}x 502)")
    assert phrase.endswith("; answered by Apache")


EXPECTS_REJECTIONS = """
from loadtests import NoProxyTimeouts, RequestMix, RequestSpec, Scenario, SSEUser

scenario = Scenario(name="expects_rejections", gates=[NoProxyTimeouts()], proxy_read_timeout=2.0)


class RefusedUser(SSEUser):
    mix = RequestMix([RequestSpec("refused", "completions", 50, max_tokens=8, expected="rejected")])
"""


@pytest.mark.litellm
@pytest.mark.parametrize("gateway", ["litellm"], indirect=True)
def test_litellms_408_is_a_gateway_timeout_never_the_rejection_a_mix_expects(
    tmp_path: Path, gateway: ChildService
) -> None:
    """LiteLLM answers its timeout on /v1/completions with 408 and an OpenAI-style error (a mix
    expecting rejections passed on 5 of 5 answers that were timeouts)."""
    locustfile = tmp_path / "expects_rejections.py"
    locustfile.write_text(EXPECTS_REJECTIONS)
    command = locust_command(
        locustfile, "--headless", "--only-summary", "-u", "2", "-r", "2", "-t", "6s", "--host", gateway.url,
        "--report-dir", str(tmp_path),
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, stdin=subprocess.DEVNULL
    )
    match = REPORT_LINE.search(result.stdout)
    run = LocustRun(result.returncode, result.stdout + result.stderr, Path(match["path"]) if match else None)
    assert run.returncode == 1, run.output[-3000:]
    answered = run.requests.query("outcome != 'stopped'")
    assert len(answered) >= 2 and set(answered["status"]) == {408} and set(answered["outcome"]) == {"gateway_timeout"}
    assert (answered["error_code"] == "408").all()
    expected = run.gate("outcomes_as_expected")
    assert not expected["passed"] and f"{len(answered)} gateway_timeout (expected rejected)" in expected["detail"]
    phrase = agreeing_lines(run)
    assert phrase.startswith(f"{len(answered)} proxy timeouts before the headers ({len(answered)}x 408)")
    assert phrase.endswith("; answered by LiteLLM")
