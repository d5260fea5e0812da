"""Mixed truncated and untruncated long prompts, streamed concurrently on both routes.

The coverage of vLLM's deleted ``test_async_tokenization.py``, made stronger: prompts of about
10,000 tokens against ``max_model_len`` 8192, shuffled, half with ``truncate_prompt_tokens=1000``
and half without, plus untruncated prompts that fit. Gates: no 500 of either kind; every
truncated request ``ok`` with ``usage.prompt_tokens == 1000``; every over-long untruncated
request rejected with 400 and ``param: input_tokens``; every fitting one ``ok``; and, since most
streams wait in the queue or in prefill longer than the keep-alive interval, keep-alive covering
every such silence (``keepalive_covered``). ``scenarios/soak.py`` reuses ``MIX`` and ``TRUNCATION_GATES``.

    locust -f scenarios/mixed_truncate.py --headless -u 8 -r 8 -t 20s
"""

from __future__ import annotations

from locust import run_single_user

from loadtests import Expect, OpenAISDKUser, RequestMix, RequestSpec, Route, Scenario, SSEUser

LONG, KEEP, FITS = 10_000, 1000, 2000
ROUTES: tuple[Route, ...] = ("completions", "chat")

MIX = RequestMix(
    [RequestSpec("long-truncated", route, LONG, truncate_prompt_tokens=KEEP, weight=2) for route in ROUTES]
    + [RequestSpec("long-untruncated", route, LONG, expected="rejected", weight=2) for route in ROUTES]
    + [RequestSpec("fits-untruncated", route, FITS, weight=1) for route in ROUTES]
)

TRUNCATION_GATES = [
    Expect(
        "truncated_ok_at_1000",
        where="truncate_prompt_tokens == 1000",
        require="outcome == 'ok' and usage_prompt_tokens == 1000",
    ),
    Expect(
        "overlong_rejected_400_input_tokens",
        where="expected == 'rejected'",
        require="outcome == 'rejected' and status == 400 and error_param == 'input_tokens'",
    ),
]
"""What truncation must do, whatever else the server is running."""

scenario = Scenario(
    name="mixed_truncate",
    # Prefill grows with the prompt (0.2 ms a token) and 8 users share 4 slots, so many streams wait
    # longer than the keep-alive interval before their first token: keep-alive is exercised.
    server_args="--max-model-len 8192 --max-num-seqs 4 --prefill-time-per-token 0.2 --inter-token-latency 5 "
    "--sse-keep-alive-interval 0.25",
    gates=[
        *TRUNCATION_GATES,
        Expect(
            "fitting_untruncated_ok",
            where="truncate_prompt_tokens.isna() and expected == 'ok'",
            require="outcome == 'ok'",
        ),
    ],
)


class MixedTruncateUser(SSEUser):
    """Raw SSE: every frame, keep-alive comments included, timed as it arrives."""

    weight = 3
    mix = MIX


class MixedTruncateSDKUser(OpenAISDKUser):
    """The same mix through the official openai client: a real client must survive it too."""

    weight = 1
    mix = MIX


if __name__ == "__main__":
    run_single_user(MixedTruncateUser)
