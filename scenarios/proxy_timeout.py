"""Streams behind a proxy whose read timeout is shorter than prefill plus queueing.

The bundled server takes 5 s to prefill and has two slots for four users, so every stream is
silent for 5 s or more before its first token; the proxy (embedded by default; ``--proxy nginx``,
``haproxy``, ``caddy``, ``apache`` or ``squid`` for a real one) cuts any stream silent for 2 s.
The server's keep-alive every 0.5 s keeps the streams alive. Gates: no proxy timeout (no 504, no
cut) and every stream ``ok``. ``--keep-alive-interval 0`` is the negative control: every stream is
cut, the run fails, and the gate line says why. ``scenarios/soak.py`` reuses ``mix``.

Against a server given with ``--host`` whose first token comes within ``HOLD_S``, the silence comes
from queueing: the run finds the server's concurrency and holds its slots with streams of its own,
releasing one every ``HOLD_S`` (at least 1.5 times the read timeout), so the run's streams wait
behind them, silent, through the proxy (``loadtests.load.slot_holders``). A run where no stream was
silent for the read timeout is INCONCLUSIVE, saying so.

    locust -f scenarios/proxy_timeout.py --headless -u 4 -r 4 -t 20s [--proxy nginx]
"""

from __future__ import annotations

from locust import run_single_user

from loadtests import Expect, NoProxyTimeouts, RequestMix, RequestSpec, Scenario, SSEUser

HOLD_S = 3.0
"""How long a stream waits in the queue of a ``--host`` server with fast prefill (the slot holders'
release period, at least): 1.5 times the scenario's read timeout of 2 s, so it outlasts the timeout."""


def mix(prompt_tokens: int, max_tokens: int) -> RequestMix:
    """Short streams on both routes, behind the proxy (long enough to queue others at a fast ``--host``)."""
    return RequestMix(
        [
            RequestSpec("behind-proxy", route, prompt_tokens, max_tokens=max_tokens, hold_s=HOLD_S)
            for route in ("completions", "chat")
        ]
    )


scenario = Scenario(
    name="proxy_timeout",
    server_args="--max-num-seqs 2 --time-to-first-token 5000 --inter-token-latency 20",
    gates=[NoProxyTimeouts(), Expect("every_stream_ok", where=None, require="outcome == 'ok'")],
    keep_alive_interval=0.5,
    proxy="embedded",
    proxy_read_timeout=2.0,
)


class ProxyTimeoutUser(SSEUser):
    mix = mix(200, max_tokens=8)


if __name__ == "__main__":
    run_single_user(ProxyTimeoutUser)
