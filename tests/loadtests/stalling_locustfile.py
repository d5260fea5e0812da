"""Raw streams read by a load generator whose event loop is blocked, on purpose, over and over.

A test fixture for ``test_arrival_clock_smoke.py``: one ``SSEUser`` streams small completions while
a ``LoopBlocker`` holds the event loop in a busy wait (no greenlet runs, as in a blocking call or
a long collection) for ``STALL_BLOCK_S`` out of every ``STALL_PERIOD_S`` seconds (environment
variables, set by the test; ``STALL_MAX_TOKENS``, default 8, sizes the streams; ``STALL_CLIENT=openai``
streams through the SDK instead). Frames that arrive meanwhile wait in the kernel until the loop is free.
"""

from __future__ import annotations

import os
import time

import gevent
from locust import User, task

from loadtests import OpenAISDKUser, RequestMix, RequestSpec, Scenario, SSEUser

BLOCK_S = float(os.environ["STALL_BLOCK_S"])
PERIOD_S = float(os.environ["STALL_PERIOD_S"])
MAX_TOKENS = int(os.environ.get("STALL_MAX_TOKENS", "8"))

scenario = Scenario(name="stalling")


CLIENT = OpenAISDKUser if os.environ.get("STALL_CLIENT") == "openai" else SSEUser


class StreamingUser(CLIENT):  # type: ignore[valid-type, misc]
    fixed_count = 1
    mix = RequestMix([RequestSpec("small", "completions", 8, max_tokens=MAX_TOKENS)])


class LoopBlocker(User):
    fixed_count = 1

    @task
    def block(self) -> None:
        until = time.monotonic() + BLOCK_S
        while time.monotonic() < until:
            pass  # holds the loop: no other greenlet runs
        gevent.sleep(PERIOD_S - BLOCK_S)
