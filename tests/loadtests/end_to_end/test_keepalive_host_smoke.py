"""Keep-alive judged against a server the run did not start (``--host``): its interval is never
assumed, and a gateway that holds the headers and strips comments cannot hide the silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.services.proxies import start_real_proxy
from loadtests.services.proxies.litellm import start_litellm
from tests.conftest import StartServer, require_litellm, require_proxy
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
    assert "the interval inferred from " in covered["detail"] and " comments on " in covered["detail"]
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


HAPROXY_QUEUE = ("--max-num-seqs", "2", "--time-to-first-token", "3000", "--inter-token-latency", "20")
"""Two slots and 3 s to each first token: four users keep two streams queued, silent, for 3-6 s."""


@pytest.mark.proxies
@pytest.mark.parametrize("interval", [0.2, 0.1])
def test_behind_haproxy_the_interval_is_inferred_as_the_servers_not_its_pairs(
    tmp_path: Path, start_server: StartServer, interval: float
) -> None:
    """Real HAProxy (defaults, started by hand) delivers comments in pairs: the median gap read 0.2 s as
    0.396 s and 0.1 s as 0 s (a false FAIL, "0" recorded as inferred). Here: the server's interval,
    with the batching seen recorded and said."""
    require_proxy("haproxy")
    server = start_server(*HAPROXY_QUEUE, "--sse-keep-alive-interval", str(interval))
    proxy = start_real_proxy("haproxy", server.url, 10.0)
    try:
        run = run_locust("proxy_timeout", tmp_path, "--host", proxy.url, "--proxy", "none", users=4, seconds=9)
    finally:
        proxy.stop()
    assert run.returncode == 0, run.output[-3000:]
    settings = run.summary["settings"]
    assert settings["keep_alive_interval_source"] == "inferred"
    assert settings["keep_alive_interval"] == pytest.approx(interval, rel=0.15), settings["keep_alive_inferred"]
    inferred = settings["keep_alive_inferred"]
    assert inferred["comments"] >= 10 and inferred["interval"] == settings["keep_alive_interval"]
    covered = run.gate("keepalive_covered")
    assert covered["passed"] and f"keep-alive every {settings['keep_alive_interval']:g} s" in covered["detail"]
    line = next(line for line in run.output.splitlines() if line.startswith("keep-alive: every "))
    assert line.startswith(f"keep-alive: every {settings['keep_alive_interval']:g} s, inferred from ")
    assert ("at once" in line) == (inferred["batched_deliveries"] > 0)


NGINX_FAST_PREFILL = ("--max-num-seqs", "2", "--inter-token-latency", "2", "--sse-keep-alive-interval", "0.3")


@pytest.mark.proxies
def test_every_gate_of_slow_prefill_judges_the_one_interval_inferred_behind_nginx(
    tmp_path: Path, start_server: StartServer
) -> None:
    """Was: keepalive_covered inferred 0.3 s and passed while the scenario's own keep-alive gates said
    the interval was unknown: INCONCLUSIVE, exit 3, for a good server."""
    require_proxy("nginx")
    server = start_server(*NGINX_FAST_PREFILL)
    proxy = start_real_proxy("nginx", server.url, 10.0)
    try:
        # four users on two slots: two wait up to one 3 s hold, silent, never the 5 s of a stuck stream
        run = run_locust("slow_prefill", tmp_path, "--host", proxy.url, "--proxy", "none", users=4, seconds=12)
    finally:
        proxy.stop()
    assert run.returncode == 0, run.output[-3000:]
    settings = run.summary["settings"]
    assert settings["keep_alive_interval_source"] == "inferred"
    interval = settings["keep_alive_interval"]
    assert interval == pytest.approx(0.3, rel=0.1)
    for name in ("keepalive_through_silence", "max_gap_within_interval_plus_0.25s", "keepalive_covered"):
        gate = run.gate(name)
        assert gate["passed"] and not gate.get("skipped"), (name, gate["detail"])
    assert f"silence_before_first_token_s > {interval + 0.25}" in run.gate("keepalive_through_silence")["detail"]
    assert f"max_gap_s <= {interval + 0.25}" in run.gate("max_gap_within_interval_plus_0.25s")["detail"]


@pytest.mark.litellm
def test_a_gateway_that_holds_headers_and_strips_comments_is_named_without_an_interval(
    tmp_path: Path, start_server: StartServer
) -> None:
    """``--host`` at LiteLLM without ``--keep-alive-interval`` passed with keepalive_covered unjudged, and
    nothing said the headers came with the first token and the comments were stripped."""
    require_litellm()
    server = start_server(*PROXY_TIMEOUT_PROFILE, "--sse-keep-alive-interval", "0.5")
    gateway = start_litellm(server.url, 30.0)
    try:
        run = run_locust("proxy_timeout", tmp_path, "--host", gateway.url, "--proxy", "none", users=2, seconds=20)
    finally:
        gateway.stop()
    assert run.summary["settings"]["keep_alive_interval_source"] == "unknown", run.output[-3000:]
    finished = run.requests.query("outcome == 'ok'")
    assert len(finished) >= 1 and (finished["keepalive_frames"] == 0).all()
    causes = run.summary["causes"]
    held, stripped = causes["headers_withheld"], causes["keepalive_withheld"]
    assert held is not None and held["streams"] == len(finished), run.output[-3000:]
    assert stripped is not None and not stripped["interval_known"]
    lines = run.output.splitlines()
    assert held["line"] in lines and stripped["line"] in lines
    assert "got their response headers only with their first token" in held["line"]
    assert "none got a keep-alive comment" in stripped["line"]
