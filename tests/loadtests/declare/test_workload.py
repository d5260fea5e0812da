"""Prompt sizing against a real server, and request mixes."""

from __future__ import annotations

import collections
import json
import random
from typing import cast

import httpx
import pytest

from loadtests.client.outcome import RequestRow
from loadtests.declare.workload import (
    PreparedMix,
    PreparedRequest,
    RequestMix,
    RequestSpec,
    ServerFacts,
    discover,
    sized_text,
)


@pytest.mark.parametrize("route", ["completions", "chat"])
@pytest.mark.parametrize("tokens", [1, 7, 1000, 10_000])
def test_prompts_have_exactly_the_tokens_the_server_counts(client: httpx.Client, route: str, tokens: int) -> None:
    facts = discover(client)
    if route == "chat" and tokens < 5:
        tokens = 5  # the chat template alone is a few tokens
    text, counted = sized_text(client, facts, route, tokens)  # type: ignore[arg-type]
    assert counted == tokens
    source = {"messages": [{"role": "user", "content": text}]} if route == "chat" else {"prompt": text}
    assert client.post("/tokenize", json=source).json()["count"] == tokens


def test_discover_takes_the_first_listed_model_and_its_context(client: httpx.Client) -> None:
    facts = discover(client)
    assert (facts.model, facts.max_model_len, facts.prompt_sizing) == ("sse-soak/tiny-sim", 8192, "exact")
    assert discover(client, "chosen").model == "chosen"


def test_without_tokenize_the_size_is_an_estimate_and_says_so(client: httpx.Client) -> None:
    facts = ServerFacts(model="sse-soak/tiny-sim", estimate_reason="told so")
    text, counted = sized_text(client, facts, "completions", 1000)
    assert counted is None
    assert 500 <= len(text.split()) <= 2000
    assert facts.prompt_sizing == "estimated (told so)"


def test_a_mix_draws_by_weight_in_a_seeded_order(client: httpx.Client) -> None:
    mix = RequestMix([RequestSpec("a", "completions", 10, weight=3), RequestSpec("b", "chat", 20, weight=1)], seed=5)
    facts = discover(client)
    first, second = mix.prepare(client, facts), mix.prepare(client, facts)
    labels = [first.draw().spec.label for _ in range(400)]
    assert labels == [second.draw().spec.label for _ in range(400)]
    share = collections.Counter(labels)["a"] / 400
    assert 0.65 <= share <= 0.85
    prepared = {r.spec.label: r for r in first.requests}
    assert prepared["b"].prompt_tokens == 20 and "messages" in prepared["b"].body
    body = prepared["a"].stream_body("m")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True} and body["model"] == "m"
    payload = prepared["a"].stream_payload("m")
    assert json.loads(payload) == body and prepared["a"].stream_payload("m") is payload  # encoded once
    assert json.loads(prepared["a"].stream_payload("other"))["model"] == "other"


@pytest.mark.fast
def test_draws_follow_the_seeded_weighted_order() -> None:
    """The same sequence ``random.choices`` gives with the weights themselves, for the mix's seed."""
    specs = [RequestSpec(label, "completions", 10, weight=weight) for label, weight in (("a", 3), ("b", 1), ("c", 2))]
    requests = [PreparedRequest(spec, {}, 10) for spec in specs]
    drawn = PreparedMix(requests, random.Random(7))
    expected = random.Random(7)
    for _ in range(200):
        assert drawn.draw() is expected.choices(requests, weights=[3, 1, 2])[0]


def test_truncation_is_sent_only_when_asked(client: httpx.Client) -> None:
    mix = RequestMix([RequestSpec("t", "completions", 10, truncate_prompt_tokens=5), RequestSpec("u", "chat", 10)])
    bodies = {r.spec.label: r.body for r in mix.prepare(client, discover(client)).requests}
    assert bodies["t"]["truncate_prompt_tokens"] == 5 and "truncate_prompt_tokens" not in bodies["u"]


@pytest.mark.fast
def test_an_empty_mix_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one spec"):
        RequestMix([])


def test_a_slot_holder_streams_for_its_hold_at_the_servers_pace_within_the_context() -> None:
    from loadtests.declare.workload import HOLD_MAX_TOKENS, ServerPace

    holder = RequestSpec("hold", "chat", 1500, max_tokens=8, hold_s=3.0)
    fast = ServerPace.of(ttft_s=0.01, duration_s=0.01 + 0.002 * 99, tokens=100)
    assert fast is not None and fast == ServerPace(first_token_s=0.01, per_token_s=cast(float, pytest.approx(0.002)))
    assert fast.hold_tokens(holder, room=None) == (1500, "hold now asks for 1500 tokens (~3.0 s)")
    assert fast.hold_tokens(holder, room=600)[0] == 600  # what the context leaves
    assert ServerPace(0.01, 1e-9).hold_tokens(holder, None)[0] == HOLD_MAX_TOKENS
    slow_to_first_token = ServerPace(first_token_s=5.0, per_token_s=0.002)  # silent on its own
    assert slow_to_first_token.hold_tokens(holder, None) == (8, None)
    assert ServerPace.of(0.01, 0.5, tokens=1) is None and ServerPace.of(None, 0.5, tokens=9) is None
    plain = RequestSpec("plain", "chat", 1500, max_tokens=8)
    assert fast.hold_tokens(plain, None) == (8, None)


def test_holders_are_sized_at_the_fastest_pace_seen_until_it_settles(capsys: pytest.CaptureFixture[str]) -> None:
    """Against vLLM a short first stream under another's prefill showed 10 ms a token where the
    holders streamed at 5, so they held their slots half as long as meant: a faster holder sizes
    them again; a slower one settles the pace (holders hold at least their time, and a server that
    slows down later shows as longer waits, not as shorter holders)."""
    import dataclasses
    import random

    from loadtests.client.outcome import Outcome, RequestPlan, StreamTracker
    from loadtests.declare.workload import PreparedMix, PreparedRequest, ServerFacts
    from loadtests.load.state import PACE_MAX_RESIZES, RunState

    holder = RequestSpec("holder", "completions", 100, max_tokens=8, hold_s=3.0)

    def state_with_a_mix() -> tuple[RunState, PreparedMix]:
        mix = PreparedMix([PreparedRequest(holder, {"max_tokens": 8}, 100)], random.Random(0))
        state = RunState(hold_slots=True, facts=ServerFacts("m", max_model_len=8192))
        state._mixes[id(mix)] = mix
        return state, mix

    def finished(max_tokens: int, tokens: int, per_token_s: float) -> RequestRow:
        plan = RequestPlan("r", "n", "completions", prompt_tokens=100, max_tokens=max_tokens)
        row = StreamTracker(plan, 0.0).finish(0.05 + per_token_s * (tokens - 1))
        return dataclasses.replace(row, outcome=Outcome.OK, ttft_s=0.05, usage_completion_tokens=tokens)

    state, mix = state_with_a_mix()
    state.learn_pace(finished(16, 16, 0.010))  # the first stream: 10 ms a token
    assert mix.requests[0].body["max_tokens"] == 300 and "now asks for 300 tokens" in capsys.readouterr().out
    state.learn_pace(finished(16, 16, 0.002))  # not a holder: too short to check the pace
    assert mix.requests[0].body["max_tokens"] == 300
    state.learn_pace(finished(300, 300, 0.005))  # a holder streamed at 5 ms: faster, sized again
    said = capsys.readouterr().out
    assert mix.requests[0].body["max_tokens"] == 600
    assert "the slot holders streamed a token every 5.0 ms, not 10.0: sized again" in said and "600 tokens" in said
    state.learn_pace(finished(600, 600, 0.020))  # slower (contention): holders hold longer; settled
    state.learn_pace(finished(600, 600, 0.001))  # settled: the workload is fixed from here on
    assert mix.requests[0].body["max_tokens"] == 600 and capsys.readouterr().out == ""

    restless, mix = state_with_a_mix()
    for pace in (0.016, 0.008, 0.004, 0.002, 0.001):  # ever faster: settled after PACE_MAX_RESIZES
        restless.learn_pace(finished(300, 300, pace))
    assert restless._resizes == PACE_MAX_RESIZES and mix.requests[0].body["max_tokens"] == 1500  # at 2 ms

    capsys.readouterr()
    bursting, mix = state_with_a_mix()
    bursting.learn_pace(finished(16, 16, 0.0004))  # a server that sends its tokens in bursts
    bursting.learn_pace(finished(300, 300, 0.00004))
    assert "a token every 0.04 ms, not 0.4: sized again" in capsys.readouterr().out  # never "0.0 ms, not 0.0"
