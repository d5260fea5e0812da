"""The nightly soak mix: mixed truncation, slow prefill and a proxy read timeout, all at once.

One bundled server with ``max_model_len`` 8192, prefill of 1 ms per token and few slots, behind the
embedded proxy that cuts streams silent for 2 s; the server's keep-alive every 0.5 s must keep
every queued or prefilling stream alive. Three kinds of users share it: truncated and untruncated
10,000-token prompts (mixed_truncate), long prompts that wait in the queue (slow_prefill), and
short prompts through the proxy (proxy_timeout). Run it for hours with
``python -m loadtests soak --duration 8h``; gates: no 500 of either kind, truncation honoured,
over-long prompts rejected with 400, no proxy timeout, everything else ``ok``.

    locust -f scenarios/soak.py --headless -u 12 -r 12 -t 60s
"""

from __future__ import annotations

from locust import run_single_user, task

from loadtests import Expect, RequestMix, RequestSpec, Scenario, SSEUser
from loadtests.gates import Gate, NoProxyTimeouts
from loadtests.scenario import RunSettings

ROUTES = ("completions", "chat")


def gates(settings: RunSettings) -> list[Gate]:
    return [
        NoProxyTimeouts(settings.proxy_read_timeout, settings.keep_alive_interval),
        Expect("truncated_ok_at_1000", where="truncate_prompt_tokens == 1000",
               require="outcome == 'ok' and usage_prompt_tokens == 1000"),
        Expect("overlong_rejected_400_input_tokens", where="expected == 'rejected'",
               require="outcome == 'rejected' and status == 400 and error_param == 'input_tokens'"),
        Expect("everything_else_ok", where="expected == 'ok'", require="outcome == 'ok'"),
    ]  # fmt: skip


scenario = Scenario(
    name="soak",
    server_args=["--max-model-len", "8192", "--max-num-seqs", "4", "--prefill-time-per-token", "1",
                 "--inter-token-latency", "10"],
    gates=gates,
    keep_alive_interval=0.5,
    proxy="embedded",
    proxy_read_timeout=2.0,
).install()  # fmt: skip

TRUNCATION_MIX = RequestMix(
    [RequestSpec("long-truncated", route, 10_000, truncate_prompt_tokens=1000, weight=2) for route in ROUTES]
    + [RequestSpec("long-untruncated", route, 10_000, expected="rejected", weight=2) for route in ROUTES]
    + [RequestSpec("fits-untruncated", route, 2000, weight=1) for route in ROUTES]
)
SLOW_PREFILL_MIX = RequestMix([RequestSpec("slow-prefill", route, 3000, max_tokens=8) for route in ROUTES])
PROXY_MIX = RequestMix([RequestSpec("behind-proxy", route, 100, max_tokens=32) for route in ROUTES])


class TruncationUser(SSEUser):
    weight = 2
    mix = TRUNCATION_MIX

    @task
    def truncation(self) -> None:
        self.send_next()


class SlowPrefillUser(SSEUser):
    weight = 1
    mix = SLOW_PREFILL_MIX

    @task
    def slow_prefill(self) -> None:
        self.send_next()


class ProxyUser(SSEUser):
    weight = 1
    mix = PROXY_MIX

    @task
    def through_proxy(self) -> None:
        self.send_next()


if __name__ == "__main__":
    run_single_user(TruncationUser)
