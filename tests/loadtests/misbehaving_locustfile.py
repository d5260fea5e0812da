"""Small requests on both routes, raw and through the openai SDK, against a misbehaving server.

A test fixture for ``tests/misbehaving_server.py`` (started by the test, given with ``--host``):
each stream must end in the one outcome its misbehaviour calls for, with no traceback and no
request lost from the record. No gates beyond the always-on ones; the verdict is not the point.

    python -m tests.misbehaving_server --log /tmp/modes.jsonl   # prints: listening on http://...
    locust -f tests/loadtests/misbehaving_locustfile.py --headless -u 6 -t 12s --host http://...
"""

from __future__ import annotations

from locust import run_single_user

from loadtests import OpenAISDKUser, RequestMix, RequestSpec, Scenario, SSEUser

scenario = Scenario(name="misbehaving")

MIX = RequestMix([RequestSpec("small", route, 8, max_tokens=4) for route in ("completions", "chat")])


class MisbehavingRawUser(SSEUser):
    """Raw SSE: every byte the server sent, judged by the harness's own parser."""

    weight = 1
    mix = MIX


class MisbehavingSDKUser(OpenAISDKUser):
    """The same requests through the official openai client."""

    weight = 1
    mix = MIX


if __name__ == "__main__":
    run_single_user(MisbehavingRawUser)
