"""SSE keep-alive: a ``: keep-alive`` comment whenever a stream has been silent for one interval.

Same contract as vLLM's ``sse_keep_alive``: an interval outside (0, inf), NaN included, returns
the very same stream object; otherwise a comment is sent each time no chunk has been sent for
one interval, the idle clock restarting after every chunk (so it covers queueing, prefill and
token gaps alike); chunks are never dropped or reordered; upstream exceptions and cancellation
propagate; closing the stream or cancelling its consumer finalizes upstream and leaves no task.

Why not vLLM's design: it wraps every ``__anext__`` in a new task raced against a timer, which
costs a task and a timer per chunk. Here one pump task per stream pulls upstream ahead of the
consumer by at most ``READ_AHEAD`` chunks, and one watchdog timer per interval (not per chunk)
decides when a comment is due. The hot path per chunk is a deque hand-off.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

KEEP_ALIVE_COMMENT = b": keep-alive\n\n"
READ_AHEAD = 8
"""Chunks the pump may pull before the consumer takes them. Bounds memory per stream; an engine
also runs ahead of a slow client, so this changes no timing a client can see."""

T = TypeVar("T")

_ITEM, _ERROR, _END = range(3)


def with_keep_alive(
    stream: AsyncIterator[T],
    interval: float,
    on_keep_alive: Callable[[], None] | None = None,
) -> AsyncIterator[T | bytes]:
    """Wrap ``stream`` so it yields ``KEEP_ALIVE_COMMENT`` after each ``interval`` seconds of
    silence. ``on_keep_alive`` is called once per comment, before it is yielded."""
    if not 0 < interval < math.inf:  # NaN fails both comparisons, so it disables too
        return stream
    return _keep_alive_stream(stream, interval, on_keep_alive)


async def _keep_alive_stream(
    upstream: AsyncIterator[T],
    interval: float,
    on_keep_alive: Callable[[], None] | None,
) -> AsyncIterator[T | bytes]:
    loop = asyncio.get_running_loop()
    ready: collections.deque[tuple[int, Any]] = collections.deque()
    consumer_waiting: asyncio.Future[None] | None = None
    pump_waiting: asyncio.Future[None] | None = None
    keep_alive_due = False
    last_sent = loop.time()

    def wake(future: asyncio.Future[None] | None) -> None:
        if future is not None and not future.done():
            future.set_result(None)

    async def pump() -> None:
        nonlocal pump_waiting
        try:
            async for item in upstream:
                ready.append((_ITEM, item))
                wake(consumer_waiting)
                if len(ready) >= READ_AHEAD:
                    pump_waiting = loop.create_future()
                    await pump_waiting
        except BaseException as exc:
            ready.append((_ERROR, exc))
        else:
            ready.append((_END, None))
        finally:
            wake(consumer_waiting)
            aclose = getattr(upstream, "aclose", None)
            if aclose is not None:
                await aclose()

    def on_watchdog(scheduled_for: float) -> None:
        nonlocal watchdog, keep_alive_due
        due_at = last_sent + interval
        if due_at <= scheduled_for:
            keep_alive_due = True
            watchdog = None
            wake(consumer_waiting)
        else:  # a chunk went out since this timer was set: re-arm for the new deadline
            watchdog = loop.call_at(due_at, on_watchdog, due_at)

    pump_task = loop.create_task(pump())
    watchdog: asyncio.TimerHandle | None = loop.call_at(last_sent + interval, on_watchdog, last_sent + interval)
    try:
        while True:
            if ready:
                kind, value = ready.popleft()
                wake(pump_waiting)
                if kind == _END:
                    return
                if kind == _ERROR:
                    raise value
                yield value
                last_sent = loop.time()
                if keep_alive_due:  # the chunk itself broke the silence: no comment owed
                    keep_alive_due = False
                    watchdog = loop.call_at(last_sent + interval, on_watchdog, last_sent + interval)
            elif keep_alive_due:
                keep_alive_due = False
                if on_keep_alive is not None:
                    on_keep_alive()
                yield KEEP_ALIVE_COMMENT
                last_sent = loop.time()
                watchdog = loop.call_at(last_sent + interval, on_watchdog, last_sent + interval)
            else:
                consumer_waiting = loop.create_future()
                await consumer_waiting
                consumer_waiting = None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if not pump_task.done():
            pump_task.cancel()
        # Wait for the pump (and upstream's finalizer) even if we are being cancelled ourselves.
        await asyncio.gather(pump_task, return_exceptions=True)
