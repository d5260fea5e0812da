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

Why this leans on asyncio's private task/future handshake (a future's ``__await__`` hands itself
up flagged ``_asyncio_future_blocking``, and ``_as_awaited_future`` claims it as ``Task`` does):
public asyncio has no way for one task to wait on a suspended step and a timer at once without
cancelling the step (``asyncio.timeout`` and ``wait_for`` cancel it, which ends an async
generator), so a public-API version must run each ``__anext__`` as a task of its own, carried
across intervals. That version was measured with ``bench/keepalive_overhead.py`` (full runs,
interleaved, this 2-core VM): 49.7% and 48.9% of throughput, missing the 15% target, against
10.4% and 8.8% for this one (5.1% and -0.5% for the same stepping before it was split into
short functions: the split may cost a few points; runs vary by +-10% here). It also runs
upstream outside the consumer's task, which the contract
(``test_upstream_runs_in_the_consumers_task_and_context``) rules out.
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
    """Invariant: at most one step of upstream is in flight, driven only from here, and it is
    finished (or cancelled into its cleanup) before upstream is closed."""
    idle = _IdleClock(interval)
    step = _InlineStep(upstream)
    try:
        while True:
            blocker = step.start()
            while blocker is not None:
                if blocker is _BARE_YIELD:  # asyncio.sleep(0): let the loop run once
                    await asyncio.sleep(0)
                else:
                    idle.watch(blocker)
                    while await idle.comment_due(blocker):
                        if on_keep_alive is not None:
                            on_keep_alive()
                        yield KEEP_ALIVE_COMMENT
                        idle.sent()
                blocker = step.resume()
            if step.exhausted:
                return
            yield step.chunk
            idle.sent()
    finally:
        idle.stop()
        await step.cancel()
        aclose = getattr(upstream, "aclose", None)
        if aclose is not None:
            await aclose()


class _IdleClock:
    """The watchdog of one stream: ``due`` turns true once ``interval`` has passed since the last
    frame went out. Invariant: at most one timer is armed, and only one per interval however many
    chunks go out in it (a chunk only moves ``_last_sent``; a timer that fires early re-arms)."""

    def __init__(self, interval: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._interval = interval
        self._last_sent = self._loop.time()
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.due = False
        self._arm()

    def _arm(self) -> None:
        deadline = self._last_sent + self._interval
        self._timer = self._loop.call_at(deadline, self._fire, deadline)

    def _fire(self, scheduled_for: float) -> None:
        if self._last_sent + self._interval > scheduled_for:  # a frame went out since: wait on
            self._arm()
            return
        self._timer = None
        self.due = True
        self._wake()

    def _wake(self, _: object = None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def watch(self, future: asyncio.Future[Any]) -> None:
        """Let ``future``'s completion end a ``comment_due`` wait; call once per future."""
        future.add_done_callback(self._wake)

    async def comment_due(self, future: asyncio.Future[Any]) -> bool:
        """Wait until ``future`` is done (False) or a comment is due (True), whichever comes first;
        when both are, ``future`` wins: its chunk will break the silence anyway."""
        while not future.done() and not self.due:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return not future.done()

    def sent(self) -> None:
        """A frame went out: the silence restarts now (re-arming only if the timer had fired)."""
        self._last_sent = self._loop.time()
        if self.due:
            self.due = False
            self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


_BARE_YIELD: Any = object()
"""What ``_InlineStep`` reports for a bare ``yield`` (``asyncio.sleep(0)``) rather than a future."""


class _InlineStep:
    """Upstream's ``__anext__()`` driven by hand, as a task drives a coroutine. ``start`` and
    ``resume`` run it until it blocks, returning the future it awaits (claimed as a task claims
    it) or ``_BARE_YIELD``; or until it ends, returning None, with ``chunk`` or ``exhausted`` set.
    Invariant: ``_coro`` is not None exactly while a step is in flight."""

    def __init__(self, upstream: AsyncIterator[Any]) -> None:
        self._next = _step_factory(upstream)
        self._coro: Generator[Any, None, Any] | None = None
        self._blocked_on: asyncio.Future[Any] | None = None
        self.chunk: Any = None
        self.exhausted = False

    def start(self) -> Any:
        self._coro = self._next()
        return self.resume()

    def resume(self) -> Any:
        assert self._coro is not None
        try:
            yielded = self._coro.send(None)
        except StopIteration as finished:
            self._coro, self.chunk = None, finished.value
            return None
        except StopAsyncIteration:
            self._coro, self.exhausted = None, True
            return None
        except BaseException:
            self._coro = None
            raise
        if yielded is None:
            self._blocked_on = None
            return _BARE_YIELD
        self._blocked_on = _as_awaited_future(yielded)
        return self._blocked_on

    async def cancel(self) -> None:
        """Deliver cancellation into a step in flight, as ``Task.cancel()`` would, and drive it to
        its end (its cleanup may await); nothing to do when no step is in flight."""
        if self._coro is None:
            return
        coro, self._coro = self._coro, None
        # A future that takes the cancel raises it at upstream's await once resumed; else it is thrown in.
        thrown: asyncio.CancelledError | None = None
        if self._blocked_on is None or not self._blocked_on.cancel():
            thrown = asyncio.CancelledError()
        while True:
            try:
                yielded = coro.send(None) if thrown is None else coro.throw(thrown)
            except (StopIteration, StopAsyncIteration, asyncio.CancelledError):
                return
            if yielded is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait([_as_awaited_future(yielded)])
            thrown = None  # delivered once; its cleanup's awaits resume normally


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
