"""Slow prefill and queueing: streams that stay silent for several keep-alive intervals.

Six users share two slots (``--max-num-seqs 2``); each prompt of 1500 tokens takes 1.5 s to
prefill, so a stream waits up to several seconds before its first token, through the embedded
proxy (read timeout 10 s). Gates: every stream ``ok``; every stream silent for longer than the
keep-alive interval before its first token got keep-alive comments; and no silence anywhere in a
stream exceeded the interval by more than ``SLACK_S``. ``--keep-alive-interval 0`` is the
negative control: the run fails and its gate lines say which streams went uncovered.

    locust -f scenarios/slow_prefill.py --headless -u 6 -r 6 -t 15s
"""

from __future__ import annotations

from locust import run_single_user, task

from loadtests import Expect, RequestMix, RequestSpec, Scenario, SSEUser
from loadtests.scenario import RunSettings

SLACK_S = 0.25
"""How late a keep-alive may arrive: event-loop and scheduling jitter on a loaded 2-core machine."""


def gates(settings: RunSettings) -> list[Expect]:
    interval = settings.keep_alive_interval or 0.0
    return [
        Expect("every_stream_ok", where=None, require="outcome == 'ok'"),
        Expect("keepalive_through_silence", where=f"client == 'raw' and silence_before_first_token_s > {interval}",
               require="keepalive_frames >= 1"),
        Expect(f"max_gap_within_interval_plus_{SLACK_S:g}s", where="client == 'raw' and status == 200",
               require=f"max_gap_s <= {interval + SLACK_S}"),
    ]  # fmt: skip


scenario = Scenario(
    name="slow_prefill",
    server_args=["--max-num-seqs", "2", "--prefill-time-per-token", "1", "--inter-token-latency", "20"],
    gates=gates,
    keep_alive_interval=0.5,
    proxy="embedded",
    proxy_read_timeout=10.0,
).install()

MIX = RequestMix([RequestSpec("slow-prefill", "completions", 1500, max_tokens=8),
                  RequestSpec("slow-prefill", "chat", 1500, max_tokens=8)])  # fmt: skip


class SlowPrefillUser(SSEUser):
    mix = MIX

    @task
    def slow_stream(self) -> None:
        self.send_next()


if __name__ == "__main__":
    run_single_user(SlowPrefillUser)
