"""``--proxy litellm``: the run starts real LiteLLM (its own venv) in front of the bundled server,
proxy_timeout's profile (5 s to a first token, 2 slots, 4 users), read timeout 2 s.

With the server's keep-alive on, LiteLLM's own timer never fires (the comments it strips reset it):
every stream is ``ok``, yet no comment reaches the client, whose headers come with the first token,
and the run names LiteLLM as what withheld them. With keep-alive off, LiteLLM answers its timeout with
408 on /v1/completions and 500 on /v1/chat/completions, before any header: every answer is a
``gateway_timeout``, never ``rejected``, and ``no_proxy_timeouts`` names LiteLLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_litellm
from tests.loadtests.locust_run import run_locust

pytestmark = [pytest.mark.smoke, pytest.mark.litellm]


@pytest.fixture(autouse=True)
def _litellm() -> None:
    require_litellm()


def test_keepalive_on_every_stream_passes_litellm_but_no_comment_reaches_the_client(tmp_path: Path) -> None:
    run = run_locust("proxy_timeout", tmp_path, "--proxy", "litellm", users=4, seconds=10)  # LiteLLM's cold start
    assert run.returncode == 1, run.output[-3000:]
    assert any(line.startswith("litellm: http://127.0.0.1:") for line in run.output.splitlines())
    assert "prompt sizing estimated" not in run.output  # sized at the server: LiteLLM forwards no /tokenize
    finished = run.requests.query("outcome != 'stopped'")
    assert len(finished) >= 2 and set(finished["outcome"]) == {"ok"}
    assert (finished["keepalive_frames"] == 0).all() and (finished["silence_from_send_s"] >= 4.5).all()
    assert (finished["silence_before_first_token_s"] < 1.0).all()  # the headers came with the first token
    assert run.gate("no_proxy_timeouts")["passed"] and run.gate("every_stream_ok")["passed"]
    covered = run.gate("keepalive_covered")
    withheld = run.summary["causes"]["keepalive_withheld"]
    assert not covered["passed"] and covered["detail"].endswith(withheld["line"])
    assert "(the run's proxy, LiteLLM, which does both, measured)" in withheld["line"]
    assert withheld["headers_held"] == withheld["streams"] == len(finished)
    verdict = next(line for line in run.output.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: FAIL") and verdict.endswith("failed: keepalive_covered)"), verdict


def test_keepalive_off_every_answer_is_litellms_timeout_named_never_a_rejection(tmp_path: Path) -> None:
    run = run_locust("proxy_timeout", tmp_path, "--proxy", "litellm", "--keep-alive-interval", "0", users=4, seconds=6)
    assert run.returncode == 1, run.output[-3000:]
    answered = run.requests.query("outcome != 'stopped'")
    assert len(answered) >= 4 and set(answered["outcome"]) == {"gateway_timeout"}
    by_route = answered.groupby("route")["status"].agg(set).to_dict()
    assert by_route == {"completions": {408}, "chat": {500}}, by_route
    assert answered["error_message"].str.startswith("litellm.").all()
    assert (answered["end_silence_s"] >= 2.0).all()  # LiteLLM answers after its 2 s timer, never before
    gate = run.gate("no_proxy_timeouts")
    assert not gate["passed"] and gate["detail"].startswith(f"{len(answered)} proxy timeouts before the headers (")
    assert "; answered by LiteLLM;" in gate["detail"] and "server keep-alive off" in gate["detail"]
    causes = run.summary["causes"]["proxy_timeouts"]
    assert causes["before_headers"] == len(answered) and causes["named"] == ["LiteLLM"]
    assert causes["run_proxy"] == "LiteLLM"
    chat = len(answered.query("route == 'chat'"))
    http_500 = run.gate("no_http_500")  # the client got a 500: said, and named as the gateway's timeout
    assert not http_500["passed"] and f"({chat} of them a gateway's own timeout, by its message" in http_500["detail"]


def test_a_stream_the_server_drops_is_litellms_own_500_named_with_its_upstream_cause(tmp_path: Path) -> None:
    """LiteLLM rewraps an upstream disconnect as its own in-band error of code "500"; ``no_inband_500``
    charged it to the server, naming no gateway."""
    faults = "--time-to-first-token 0 --failure-injection-rate 100 --failure-types disconnect"
    run = run_locust("proxy_timeout", tmp_path, "--proxy", "litellm", "--server-args", faults, users=4, seconds=10)
    assert run.returncode == 1, run.output[-3000:]
    dropped = run.requests.query("outcome == 'inband_error' and error_code == '500'")
    assert len(dropped) >= 2 and dropped["error_message"].str.startswith("litellm.").all(), run.output[-3000:]
    gate = run.gate("no_inband_500")
    assert not gate["passed"] and gate["detail"].startswith(
        f"{len(dropped)} in-band errors with code 500 under HTTP 200: {len(dropped)} LiteLLM's own, not the server's "
        "(upstream: "
    )
    assert "; 0 the server's" in gate["detail"]
    owned = run.summary["causes"]["gateway_500s"]
    assert sum(owned["gateways"]["LiteLLM"].values()) == len(dropped) and owned["server"] == 0
    assert set(owned["gateways"]["LiteLLM"]) <= {
        "the server dropped the connection mid-response",
        "the connection to the server failed (refused or dropped)",
    }
    assert owned["line"] in run.output
