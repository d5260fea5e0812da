"""Slow prefill and queueing: streams that stay silent for several keep-alive intervals.

Six users share two slots (``--max-num-seqs 2``); each prompt of 1500 tokens takes 1.5 s to
prefill, so a stream waits up to several seconds before its first token, through the embedded
proxy (read timeout 10 s). Gates: every stream ``ok``; every stream silent for longer than the
keep-alive interval (plus ``SLACK_S``) before its first token got keep-alive comments; and no silence anywhere in a
stream exceeded the interval by more than ``SLACK_S``. ``--keep-alive-interval 0`` is the
negative control: the run fails and its gate lines say which streams went uncovered.
``scenarios/soak.py`` reuses ``mix``.

Against a server given with ``--host`` (real vLLM prefills 1500 tokens in milliseconds) the silence
comes from queueing instead: the run finds the server's concurrency and holds its slots with
streams of its own, releasing one every ``HOLD_S``, so the run's streams wait, silent, however few
users it has (``loadtests.load.slot_holders``, docs/scenarios.md). A run where no stream was silent
longer than the interval (a bound on the holders reached, said in one line) is INCONCLUSIVE, never
a PASS.

    locust -f scenarios/slow_prefill.py --headless -u 6 -r 6 -t 15s
"""

from __future__ import annotations

from locust import run_single_user

from loadtests import (
    QUEUE_FOR_SILENCE,
    Expect,
    Gate,
    RequestMix,
    RequestSpec,
    RunSettings,
    Scenario,
    SSEUser,
    Unjudgeable,
)

SLACK_S = 0.25
"""How late a keep-alive may arrive: event-loop and scheduling jitter on a loaded 2-core machine."""
HOLD_S = 3.0
"""How long a stream waits in the queue of a ``--host`` server with fast prefill (the slot holders'
release period, at least): several intervals of a keep-alive of 1 s (vLLM takes whole seconds)."""


def mix(prompt_tokens: int) -> RequestMix:
    """Streams on both routes whose prompts take long to prefill (or, at a fast ``--host``, that
    stream long enough to make the others queue)."""
    return RequestMix(
        [
            RequestSpec("slow-prefill", route, prompt_tokens, max_tokens=8, hold_s=HOLD_S)
            for route in ("completions", "chat")
        ]
    )


def gates(settings: RunSettings) -> list[Gate]:
    """The keep-alive gates are written in the run's keep-alive interval (0: off, the negative
    control); a ``--host`` run that was not told the server's interval forms them at the interval
    inferred from its comments when it is judged, and cannot form them when no comment showed it."""
    interval = settings.keep_alive_interval
    every_stream_ok = Expect("every_stream_ok", where=None, require="outcome == 'ok'")
    if interval is None:
        unknown = (
            "the server's keep-alive interval is unknown and no stream's comments showed it: pass "
            "--keep-alive-interval S to judge keep-alive"
        )
        names = ("keepalive_through_silence", f"max_gap_within_interval_plus_{SLACK_S:g}s")
        return [every_stream_ok, *(Unjudgeable(name, unknown) for name in names)]
    return [
        every_stream_ok,
        Expect(
            "keepalive_through_silence",
            where=f"client == 'raw' and silence_before_first_token_s > {interval + SLACK_S}",
            require="keepalive_frames >= 1",
            unexercised=f"no stream was silent for the keep-alive interval: {QUEUE_FOR_SILENCE}",
            resolution_s=SLACK_S,  # a stall that long may have made a shorter silence look this long
        ),
        Expect(
            f"max_gap_within_interval_plus_{SLACK_S:g}s",
            where="client == 'raw' and status == 200",
            require=f"max_gap_s <= {interval + SLACK_S}",
            resolution_s=SLACK_S,
        ),
    ]


scenario = Scenario(
    name="slow_prefill",
    server_args="--max-num-seqs 2 --prefill-time-per-token 1 --inter-token-latency 20",
    gates=gates,
    keep_alive_interval=0.5,
    proxy="embedded",
    proxy_read_timeout=10.0,
)


class SlowPrefillUser(SSEUser):
    mix = mix(1500)


if __name__ == "__main__":
    run_single_user(SlowPrefillUser)
