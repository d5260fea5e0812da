"""Keep-alive judged against a server the run did not start (``--host``): its interval is never
assumed, and a gateway that holds the headers and strips comments cannot hide the silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.services.proxies.litellm import start_litellm
from tests.conftest import StartServer, require_litellm
from tests.loadtests.locust_run import run_locust

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

PROXY_TIMEOUT_PROFILE = ("--max-num-seqs", "2", "--time-to-first-token", "5000", "--inter-token-latency", "20")
"""scenarios/proxy_timeout.py's server, started by the test: 5 s of silence before each first token."""


def test_a_host_runs_keepalive_interval_is_inferred_from_its_comments_not_the_scenarios(
    tmp_path: Path, start_server: StartServer
) -> None:
    """The scenario declares 0.5 s; the server sends a comment every 1 s: healthy streams pass at 1 s."""
    server = start_server(*PROXY_TIMEOUT_PROFILE, "--sse-keep-alive-interval", "1")
    run = run_locust("proxy_timeout", tmp_path, "--host", server.url, users=4, seconds=8)
    assert run.returncode == 0, run.output[-3000:]
    settings = run.summary["settings"]
    assert settings["keep_alive_interval_source"] == "inferred" and settings["server_args"] is None
    assert settings["keep_alive_interval"] == pytest.approx(1.0, abs=0.05)
    covered = run.gate("keepalive_covered")
    assert covered["passed"] and int(covered["detail"].split("/")[0]) >= 2, covered["detail"]
    assert "the interval inferred from the comments of" in covered["detail"]
    assert "gate PASS keepalive_covered:" in run.output


@pytest.mark.litellm
def test_a_gateway_that_holds_headers_and_strips_comments_fails_keepalive_and_is_named(
    tmp_path: Path, start_server: StartServer
) -> None:
    """Real LiteLLM, which the run did not start: it holds the headers until the first token and
    strips the comments, so no keep-alive reaches the client through 5 s of silence."""
    require_litellm()
    server = start_server(*PROXY_TIMEOUT_PROFILE, "--sse-keep-alive-interval", "0.5")
    gateway = start_litellm(server.url, 30.0)
    try:
        run = run_locust(
            "proxy_timeout", tmp_path, "--host", gateway.url, "--proxy", "none", "--keep-alive-interval", "0.5",
            users=2, seconds=10,
        )  # fmt: skip  # 10 s: 5 s of prefill after LiteLLM's first, cold request (in CI once none ended in 7 s)
    finally:
        gateway.stop()
    assert run.returncode == 1, run.output[-3000:]
    assert run.summary["settings"]["keep_alive_interval_source"] == "given"
    finished = run.requests.query("outcome == 'ok'")
    assert len(finished) >= 1 and (finished["keepalive_frames"] == 0).all()
    assert (finished["silence_before_first_token_s"] < 0.1).all()  # the headers came with the first token...
    assert (finished["silence_from_send_s"] >= 4.5).all()  # ...5 s after the send
    covered = run.gate("keepalive_covered")
    assert not covered["passed"]
    line = f"sse-soak: {len(finished)} raw streams were silent over 0.65 s and none got a keep-alive comment"
    assert line in covered["detail"] and line in run.output
    assert "(a gateway such as LiteLLM)" in covered["detail"]
    withheld = run.summary["causes"]["keepalive_withheld"]  # the summary and a console line say it too
    assert withheld["streams"] == len(finished) and withheld["headers_held"] == len(finished)
    assert withheld["line"] in run.output.splitlines() and covered["detail"].endswith(withheld["line"])
    assert "(the run started no proxy: it stands in front of the server the run was given)" in withheld["line"]


MANY_SLOTS = ("--max-num-seqs", "32", "--inter-token-latency", "2", "--sse-keep-alive-interval", "0.5")
"""A server like real vLLM on a CPU: prompts prefill at once, a token every 2 ms, and 32 slots, so the
run's 4 users alone never queue (real vLLM on a CPU runs 128 at once)."""


@pytest.mark.parametrize(
    ("scenario", "point"),
    [
        ("slow_prefill", "keepalive_through_silence"),
        ("proxy_timeout", "no_proxy_timeouts"),
        ("soak", "no_proxy_timeouts"),
    ],
)
def test_a_scenario_whose_point_is_silence_finds_the_servers_concurrency_and_holds_it(
    tmp_path: Path, start_server: StartServer, scenario: str, point: str
) -> None:
    """32 slots and 4 users: the run finds the 32 from the server's gauges, holds them, and its own
    streams wait, silent, a release period at most: judged, not stopped at the end."""
    server = start_server(*MANY_SLOTS)
    run = run_locust(scenario, tmp_path, "--host", server.url, "--keep-alive-interval", "0.5", users=4, seconds=15)
    assert run.returncode == 0, run.output[-3000:]
    found = "sse-soak: silence by queueing: found concurrency 32 from the server's gauges"
    holding = "holding 32 streams and releasing slots to the run's streams once they waited 3 s in the queue"
    assert found in run.output and holding in run.output
    held = next(line for line in run.output.splitlines() if line.startswith("sse-soak: silence by queueing: held"))
    gate = run.gate(point)
    assert gate["passed"] and not gate.get("skipped"), gate["detail"]
    rows = run.requests.query("client == 'raw'")
    silent = rows.query("outcome != 'stopped' and silence_before_first_token_s > 1.9")  # the read timeout, 2 s
    assert len(silent) >= 4 and (silent["keepalive_frames"] >= 3).all(), held
    assert (rows["outcome"] == "stopped").sum() <= 4  # only those sent in the last release period


def test_without_the_servers_gauges_a_ramp_of_first_token_waits_finds_its_concurrency(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(*MANY_SLOTS)
    run = run_locust(
        "slow_prefill", tmp_path, "--host", server.url, "--keep-alive-interval", "0.5", "--no-server-metrics",
        users=4, seconds=15,
    )  # fmt: skip
    assert run.returncode == 0, run.output[-3000:]
    found = "from a ramp that watched first-token waits (--no-server-metrics); holding"
    assert found in run.output and "the server's gauges" not in run.output
    through = run.gate("keepalive_through_silence")
    assert through["passed"] and not through.get("skipped"), through["detail"]


def test_a_server_that_runs_more_streams_than_the_bound_is_inconclusive_naming_the_bound(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(*MANY_SLOTS)
    run = run_locust(
        "slow_prefill", tmp_path, "--host", server.url, "--keep-alive-interval", "0.5", "--max-slot-holders", "4",
        users=2, seconds=6,
    )  # fmt: skip
    assert run.returncode == 3, run.output[-3000:]
    bound = "4 is the bound on slot holders (--max-slot-holders); streams that needed it are unjudged"
    assert "sse-soak: silence by queueing not made: the server ran 4 slot holders" in run.output
    assert bound in run.output
    through = run.gate("keepalive_through_silence")
    assert through.get("skipped") and "which bound it reached" in through["detail"]
    verdict = next(line for line in run.output.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: INCONCLUSIVE (its point could not be judged: keepalive_through_silence")
