"""SSE keep-alive: a ``: keep-alive`` comment whenever a stream has been silent for one interval.

Same contract as vLLM's ``sse_keep_alive``: an interval outside (0, inf), NaN included, returns
the very same stream object; otherwise a comment is sent each time no chunk has been sent for
one interval, the idle clock restarting after every chunk (so it covers queueing, prefill and
token gaps alike); chunks are never dropped or reordered; upstream exceptions and cancellation
propagate; closing the stream or cancelling its consumer finalizes upstream and leaves no task.

Why not vLLM's design: it wraps every ``__anext__`` in a new task raced against a timer, so each
chunk costs a task, a timer and a trip through the event loop. Here upstream's ``__anext__()``
is stepped inline, in the consumer's own task, the way a task steps a coroutine: a chunk that is
ready costs one ``send()``, no task switch. Only when upstream blocks on a future does the
consumer wait, on that future or the watchdog, whichever comes first; and if the watchdog comes
first it yields a comment while upstream stays suspended, untouched, on its future. One watchdog
timer is armed per interval, not per chunk. To upstream this is exactly ``await``: same task,
same context, cancellation delivered at its own await point.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from typing import Any, TypeVar

KEEP_ALIVE_COMMENT = b": keep-alive\n\n"

T = TypeVar("T")


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
    last_sent = loop.time()
    keep_alive_due = False
    waiter: asyncio.Future[None] | None = None

    def wake(_: object = None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_watchdog(scheduled_for: float) -> None:
        nonlocal watchdog, keep_alive_due
        due_at = last_sent + interval
        if due_at <= scheduled_for:
            keep_alive_due = True
            watchdog = None
            wake()
        else:  # a chunk went out since this timer was armed: re-arm for the new deadline
            watchdog = loop.call_at(due_at, on_watchdog, due_at)

    watchdog: asyncio.TimerHandle | None = loop.call_at(last_sent + interval, on_watchdog, last_sent + interval)
    step: Generator[Any, None, T] | None = None  # upstream's __anext__() while it is in flight
    blocked_on: asyncio.Future[Any] | None = None
    next_step = _step_factory(upstream)
    now = loop.time
    try:
        while True:
            step = next_step()
            while True:  # drive the step until upstream hands over a chunk
                try:
                    yielded = step.send(None)
                except StopIteration as finished:
                    step = None
                    chunk = finished.value
                    break
                except StopAsyncIteration:
                    step = None
                    return
                except BaseException:
                    step = None
                    raise
                if yielded is None:  # a bare yield (asyncio.sleep(0)): let the loop run once
                    await asyncio.sleep(0)
                    continue
                blocked_on = _as_awaited_future(yielded)
                blocked_on.add_done_callback(wake)
                while not blocked_on.done():
                    if keep_alive_due:
                        keep_alive_due = False
                        if on_keep_alive is not None:
                            on_keep_alive()
                        yield KEEP_ALIVE_COMMENT
                        last_sent = loop.time()
                        watchdog = loop.call_at(last_sent + interval, on_watchdog, last_sent + interval)
                        continue
                    waiter = loop.create_future()
                    await waiter
                    waiter = None
                blocked_on = None
            yield chunk
            last_sent = now()
            if keep_alive_due:  # due while the chunk was being produced: the chunk broke the silence
                keep_alive_due = False
                watchdog = loop.call_at(last_sent + interval, on_watchdog, last_sent + interval)
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if step is not None:  # we are being closed or cancelled while upstream is mid-step
            await _cancel_step(step, blocked_on)
        aclose = getattr(upstream, "aclose", None)
        if aclose is not None:
            await aclose()


def _step_factory(upstream: AsyncIterator[T]) -> Callable[[], Generator[Any, None, T]]:
    """A callable that starts one ``__anext__`` step as something with ``send``/``throw``. An async
    generator's ``__anext__()`` already is one; any other awaitable goes through ``__await__``."""
    anext = upstream.__anext__
    if isinstance(upstream, AsyncGenerator):
        return anext  # type: ignore[return-value]
    return lambda: anext().__await__()


def _as_awaited_future(yielded: Any) -> asyncio.Future[Any]:
    """The future an awaiting coroutine handed up, checked and claimed as a task would claim it."""
    if getattr(yielded, "_asyncio_future_blocking", None) is None:
        raise RuntimeError(f"keep-alive upstream yielded {yielded!r}, which is not an asyncio future")
    yielded._asyncio_future_blocking = False
    return yielded


async def _cancel_step(step: Generator[Any, None, Any], blocked_on: asyncio.Future[Any] | None) -> None:
    """Deliver cancellation into a suspended step, as ``Task.cancel()`` would, and drive it to its end."""
    if blocked_on is not None and blocked_on.cancel():
        resume = step.send  # the cancelled future raises CancelledError at upstream's await
        argument: Any = None
    else:
        resume = step.throw
        argument = asyncio.CancelledError()
    while True:
        try:
            yielded = resume(argument)
        except (StopIteration, StopAsyncIteration, asyncio.CancelledError):
            return
        # upstream awaits something in its cleanup: wait for it, then step on
        if yielded is None:
            await asyncio.sleep(0)
        else:
            future = _as_awaited_future(yielded)
            await asyncio.wait([future])
        resume, argument = step.send, None
