"""The nightly soak mix: mixed truncation, slow prefill and a proxy read timeout, all at once.

One bundled server with ``max_model_len`` 8192, prefill of 1 ms per token and few slots, behind the
embedded proxy that cuts streams silent for 2 s; the server's keep-alive every 0.5 s must keep
every queued or prefilling stream alive. Three kinds of users share it: truncated and untruncated
10,000-token prompts (mixed_truncate's mix), longer prompts that wait in the queue (slow_prefill's,
at 3000 tokens), and short prompts through the proxy (proxy_timeout's, at 100 tokens). Run it for
hours with ``python -m loadtests soak --duration 8h``; gates: no 500 of either kind, truncation
honoured (mixed_truncate's gates), no proxy timeout, everything else ``ok``.

The other scenarios are imported as plain modules (Locust puts a locustfile's directory on the
path while it loads it) for their mixes and gates; their own ``Scenario`` is not this run's.

    locust -f scenarios/soak.py --headless -u 12 -r 12 -t 60s
"""

from __future__ import annotations

import mixed_truncate
import proxy_timeout
import slow_prefill
from locust import run_single_user

from loadtests import Expect, NoProxyTimeouts, Scenario, SSEUser

scenario = Scenario(
    name="soak",
    server_args="--max-model-len 8192 --max-num-seqs 4 --prefill-time-per-token 1 --inter-token-latency 10",
    gates=[
        NoProxyTimeouts(),
        *mixed_truncate.TRUNCATION_GATES,
        Expect("everything_else_ok", where="expected == 'ok'", require="outcome == 'ok'"),
    ],
    keep_alive_interval=0.5,
    proxy="embedded",
    proxy_read_timeout=2.0,
)


class TruncationUser(SSEUser):
    weight = 2
    mix = mixed_truncate.MIX


class SlowPrefillUser(SSEUser):
    weight = 1
    mix = slow_prefill.mix(3000)


class ProxyUser(SSEUser):
    weight = 1
    mix = proxy_timeout.mix(100, max_tokens=32)


if __name__ == "__main__":
    run_single_user(TruncationUser)
