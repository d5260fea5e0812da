"""Short raw streams whose users say the timing resolution their process reads them at.

A test fixture for ``test_timing_resolution_smoke.py``: the bundled server streams short
completions (a token every 5 ms, keep-alive every 0.2 s); each user, as it starts, appends
``<pid> <BodyMux.resolution_s>`` to the file ``RESOLUTION_SEEN`` names (set by the test), so the
test sees what every process that ran users (one alone, or each worker) was told.

    RESOLUTION_SEEN=/tmp/seen locust -f tests/loadtests/resolution_locustfile.py --headless -u 2 -t 3s
"""

from __future__ import annotations

import os

from loadtests import RequestMix, RequestSpec, Scenario, SSEUser
from loadtests.client.body_mux import body_mux

scenario = Scenario(name="resolution", server_args="--inter-token-latency 5 --sse-keep-alive-interval 0.2")


class ResolutionUser(SSEUser):
    mix = RequestMix([RequestSpec("short", "completions", 8, max_tokens=16)])

    def on_start(self) -> None:
        super().on_start()
        with open(os.environ["RESOLUTION_SEEN"], "a", encoding="utf-8") as seen:
            seen.write(f"{os.getpid()} {body_mux().resolution_s!r}\n")
