"""Streams with a sampling parameter real vLLM refuses only once the stream is under way (a
``logit_bias`` token id outside the vocabulary; ``temperature: -1``, by contrast, is refused with an
HTTP 400 before the stream): with ``stream: true`` vLLM answers HTTP 200, then
``data: {"error": {..., "code": 400}}`` and ``[DONE]``. Both clients
must record it as ``inband_error`` with code 400, which the spec expects (so Locust counts it a
success and the verdict turns on the classification alone).

    locust -f tests/loadtests/inband_400_locustfile.py --headless -u 2 -t 6s --host http://...
"""

from __future__ import annotations

from loadtests import OpenAISDKUser, Outcome, RequestMix, RequestSpec, Scenario, SSEUser

scenario = Scenario(name="inband_400")

MIX = RequestMix(
    [
        RequestSpec(
            "bad-logit-bias",
            route,
            8,
            max_tokens=4,
            extra_body={"logit_bias": {"999999": 1}},
            expected=Outcome.INBAND_ERROR,
        )
        for route in ("completions", "chat")
    ]
)


class RawUser(SSEUser):
    mix = MIX


class SDKUser(OpenAISDKUser):
    mix = MIX
