"""Both clients, raw and openai SDK, in one process patched as Locust's are, sending requests whose
answers a test wrote byte for byte (``tests/misbehaving_server.py``'s ``WIRE_FIELD``).

    python -m tests.loadtests.wire_clients URL IDLE_TIMEOUT_S   # prints its ready line, then serves stdin

Each stdin line is a JSON wire script; for it, the raw user and then the SDK user each send one
request that gets it, and one stdout line holds their two rows (``RequestRow.as_dict``). The users
live as long as the process, each with its own connections, as in a run: a connection left in a
user's pool by one request serves its next one. Started and read by
``tests/loadtests/load/test_framing_parity.py``; exits at the end of stdin.
"""

from __future__ import annotations

import gevent.monkey

gevent.monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from locust.env import Environment  # noqa: E402

from loadtests.client import framing  # noqa: E402
from loadtests.declare.workload import PreparedRequest, RequestMix, RequestSpec, ServerFacts  # noqa: E402
from loadtests.load.state import run_state  # noqa: E402
from loadtests.load.users import OpenAISDKUser, SSEUser  # noqa: E402
from tests.loadtests.misbehaving import WIRE_CLIENTS_READY  # noqa: E402
from tests.misbehaving_server import MODEL, WIRE_FIELD  # noqa: E402

SPEC = RequestSpec("wire", "completions", 4, max_tokens=4)
MIX = RequestMix([SPEC])


class WireRawUser(SSEUser):
    abstract = True
    mix = MIX


class WireSDKUser(OpenAISDKUser):
    abstract = True
    mix = MIX


def main(url: str, idle_timeout: float) -> None:
    environment = Environment()
    state = run_state(environment)
    state.facts = ServerFacts(model=MODEL)
    state.client_idle_timeout = idle_timeout
    state.stream_deadline = 60.0
    WireRawUser.host = WireSDKUser.host = url
    WireRawUser.network_timeout = idle_timeout  # as the run sets it from --client-idle-timeout
    raw, sdk = WireRawUser(environment), WireSDKUser(environment)
    if not framing.install():  # users.py installed it as it loaded: this h11 must still have the rule
        raise SystemExit("h11 has no chunk header rule to replace: the clients cannot agree on chunks")
    sdk.on_start()
    print(WIRE_CLIENTS_READY, flush=True)
    for line in sys.stdin:
        wire: dict[str, Any] = json.loads(line)
        request = PreparedRequest(SPEC, {"prompt": "wire", "max_tokens": 4, WIRE_FIELD: wire}, None)
        rows = [raw.send(request).as_dict(), sdk.send(request).as_dict()]
        print(json.dumps(rows), flush=True)
    sdk.on_stop()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
