"""Failed requests must not leave reference cycles: each one is freed only by a full garbage
collection, which stalls every stream of the process (``loadtests.load.loop_hygiene``).

Locust's raw client keeps the exception of a non-2xx or unreachable request on the response
(``error``) and the exception keeps the response; every handled exception keeps its traceback,
whose frames' locals keep the exception or what holds it (the openai SDK's ``APIStatusError`` for
each 4xx, and what it chains). Once a stream is judged nothing reads them, so the users drop
those links and reference counting frees the lot.
"""

from __future__ import annotations

from typing import Any


def forget_failure(response: Any) -> None:
    """Break the cycle Locust makes for each raw response it took for a failure (a non-2xx status,
    an unreachable server): the response holds the exception as ``error`` and the exception holds
    the response, and its traceback. Nothing reads them once the stream is judged."""
    error = getattr(response, "error", None)
    if error is not None:
        forget_traceback(error)
        error.response = None
        response.error = None


def forget_traceback(exc: BaseException | None) -> None:
    """Drop the tracebacks of a handled ``exc`` and of every exception it chains. A traceback holds
    the frames the exception passed through, and their locals hold the exception (or the response
    that holds it): a reference cycle per failed request, which only the cyclic garbage collector
    frees, in full collections that stall every stream (mixed_truncate at 200 users: 110,000 such
    objects in 20 s, seven full collections of 25-35 ms)."""
    pending = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.__traceback__ = None
        pending += [current.__cause__, current.__context__]
