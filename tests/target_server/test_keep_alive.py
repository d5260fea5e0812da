"""The keep-alive wrapper's contract, one behaviour per test (vLLM's semantics, our design)."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from target_server.keep_alive import KEEP_ALIVE_COMMENT, with_keep_alive

pytestmark = pytest.mark.fast

INTERVAL = 0.05


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``scenario`` on a fresh loop and check it left no task behind."""

    async def checked() -> Any:
        result = await scenario()
        leftover = asyncio.all_tasks() - {asyncio.current_task()}
        assert not leftover, f"tasks left pending: {leftover}"
        return result

    return asyncio.run(checked())


async def items(values: list[Any]) -> AsyncGenerator[Any, None]:
    for value in values:
        yield value


@pytest.mark.parametrize("interval", [0, -1.0, math.nan, math.inf, -math.inf])
def test_disabled_interval_returns_the_same_stream_object(interval: float) -> None:
    stream = items([1])
    assert with_keep_alive(stream, interval) is stream
    run(stream.aclose)


def test_enabled_interval_wraps_the_stream() -> None:
    stream = items([1])
    wrapped = with_keep_alive(stream, INTERVAL)
    assert wrapped is not stream

    async def drain() -> list[Any]:
        return [value async for value in wrapped]

    assert run(drain) == [1]


def test_one_comment_per_idle_interval_while_upstream_is_silent() -> None:
    async def scenario() -> list[Any]:
        release = asyncio.Event()

        async def upstream() -> AsyncIterator[str]:
            yield "first"
            await release.wait()  # silent until the consumer has seen three comments
            yield "last"

        received: list[Any] = []
        async for frame in with_keep_alive(upstream(), INTERVAL):
            received.append(frame)
            if received.count(KEEP_ALIVE_COMMENT) == 3:
                release.set()
        return received

    assert run(scenario) == ["first", KEEP_ALIVE_COMMENT, KEEP_ALIVE_COMMENT, KEEP_ALIVE_COMMENT, "last"]


def test_comments_cover_silence_before_the_first_chunk() -> None:
    """Queueing and prefill happen before any chunk: the idle clock starts with the stream."""

    async def scenario() -> list[Any]:
        release = asyncio.Event()

        async def upstream() -> AsyncIterator[str]:
            await release.wait()
            yield "first token"

        received: list[Any] = []
        async for frame in with_keep_alive(upstream(), INTERVAL):
            received.append(frame)
            release.set()
        return received

    assert run(scenario) == [KEEP_ALIVE_COMMENT, "first token"]


def test_each_comment_comes_a_full_interval_after_the_last_frame() -> None:
    async def scenario() -> list[tuple[Any, float]]:
        loop = asyncio.get_running_loop()
        release = asyncio.Event()

        async def upstream() -> AsyncIterator[str]:
            yield "a"
            await release.wait()
            yield "b"

        timed: list[tuple[Any, float]] = []
        async for frame in with_keep_alive(upstream(), INTERVAL):
            timed.append((frame, loop.time()))
            if len(timed) == 3:
                release.set()
        return timed

    timed = run(scenario)
    assert [frame for frame, _ in timed] == ["a", KEEP_ALIVE_COMMENT, KEEP_ALIVE_COMMENT, "b"]
    gaps = [later - earlier for (_, earlier), (_, later) in itertools.pairwise(timed[:3])]
    assert all(gap >= INTERVAL * 0.99 for gap in gaps), gaps


def test_idle_clock_restarts_after_every_chunk() -> None:
    """Chunks every 40% of the interval, for four intervals: never silent long enough for a comment."""
    interval = 0.25

    async def scenario() -> list[Any]:
        async def upstream() -> AsyncIterator[int]:
            for index in range(10):
                await asyncio.sleep(interval * 0.4)
                yield index

        return [frame async for frame in with_keep_alive(upstream(), interval)]

    assert run(scenario) == list(range(10))


def test_data_is_never_dropped_or_reordered_among_comments() -> None:
    count = 2000

    async def scenario() -> list[Any]:
        async def upstream() -> AsyncIterator[int]:
            for index in range(count):
                if index % 97 == 0:
                    await asyncio.sleep(0.003)  # long enough for a comment at a 1 ms interval
                elif index % 3 == 0:
                    await asyncio.sleep(0)
                yield index

        return [frame async for frame in with_keep_alive(upstream(), 0.001)]

    received = run(scenario)
    assert [frame for frame in received if frame != KEEP_ALIVE_COMMENT] == list(range(count))
    assert KEEP_ALIVE_COMMENT in received


def test_upstream_is_pulled_only_when_the_consumer_asks() -> None:
    async def scenario() -> int:
        pulled = 0

        async def upstream() -> AsyncIterator[int]:
            nonlocal pulled
            for index in range(100):
                pulled += 1
                yield index

        stream = with_keep_alive(upstream(), 10.0)
        assert isinstance(stream, AsyncGenerator)
        await stream.__anext__()
        for _ in range(5):
            await asyncio.sleep(0)  # give anything running behind the consumer's back a chance
        pulled_while_consumer_idle = pulled
        await stream.aclose()
        return pulled_while_consumer_idle

    assert run(scenario) == 1


def test_upstream_runs_in_the_consumers_task_and_context() -> None:
    """To upstream, the wrapper is a plain ``await``: no task of its own, the caller's context."""
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker")

    async def scenario() -> tuple[bool, str]:
        release = asyncio.Event()
        consumer = asyncio.current_task()
        seen: list[tuple[bool, str]] = []

        async def upstream() -> AsyncIterator[str]:
            await release.wait()
            seen.append((asyncio.current_task() is consumer, marker.get()))
            yield "token"

        marker.set("consumer's")
        async for frame in with_keep_alive(upstream(), INTERVAL):
            release.set()
            assert frame in (KEEP_ALIVE_COMMENT, "token")
        return seen[0]

    assert run(scenario) == (True, "consumer's")


def test_a_future_resolved_during_a_comment_is_not_lost() -> None:
    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        handoff: asyncio.Future[str] = loop.create_future()

        async def upstream() -> AsyncIterator[str]:
            yield await handoff
            yield "after"

        received: list[Any] = []
        async for frame in with_keep_alive(upstream(), INTERVAL):
            received.append(frame)
            if frame == KEEP_ALIVE_COMMENT and not handoff.done():
                handoff.set_result("resolved while the comment was out")
        return received

    assert run(scenario) == [KEEP_ALIVE_COMMENT, "resolved while the comment was out", "after"]


def test_upstream_cleanup_that_awaits_completes_on_cancellation() -> None:
    async def scenario() -> list[str]:
        events: list[str] = []
        started = asyncio.Event()

        async def upstream() -> AsyncIterator[int]:
            try:
                started.set()
                await asyncio.Event().wait()
                yield 1
            finally:
                await asyncio.sleep(0.01)  # e.g. telling an engine to abort
                events.append("cleanup finished")

        commented = asyncio.Event()

        async def consume() -> None:
            async for frame in with_keep_alive(upstream(), INTERVAL):
                if frame == KEEP_ALIVE_COMMENT:
                    commented.set()

        consumer = asyncio.create_task(consume())
        await started.wait()
        await commented.wait()  # a comment went out while upstream was suspended mid-step
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        return events

    assert run(scenario) == ["cleanup finished"]


def test_upstream_exception_propagates_after_the_chunks_before_it() -> None:
    async def scenario() -> list[Any]:
        async def upstream() -> AsyncIterator[int]:
            yield 1
            yield 2
            raise ValueError("engine broke")

        received: list[Any] = []
        with pytest.raises(ValueError, match="engine broke"):
            async for frame in with_keep_alive(upstream(), INTERVAL):
                received.append(frame)
        return received

    assert run(scenario) == [1, 2]


def test_upstream_cancellation_propagates() -> None:
    async def scenario() -> None:
        async def upstream() -> AsyncIterator[int]:
            yield 1
            raise asyncio.CancelledError()

        stream = with_keep_alive(upstream(), INTERVAL)
        assert await stream.__anext__() == 1
        with pytest.raises(asyncio.CancelledError):
            await stream.__anext__()

    run(scenario)


def test_cancelling_the_consumer_finalizes_upstream() -> None:
    async def scenario() -> list[str]:
        events: list[str] = []
        started = asyncio.Event()

        async def upstream() -> AsyncIterator[int]:
            try:
                yield 1
                started.set()
                await asyncio.Event().wait()  # a prefill that never ends
                yield 2
            finally:
                events.append("upstream finalized")

        async def consume() -> None:
            async for _ in with_keep_alive(upstream(), INTERVAL):
                pass

        consumer = asyncio.create_task(consume())
        await started.wait()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        return events

    assert run(scenario) == ["upstream finalized"]


def test_closing_the_stream_finalizes_upstream_and_leaves_no_task() -> None:
    async def scenario() -> list[str]:
        events: list[str] = []

        async def upstream() -> AsyncIterator[int]:
            try:
                for index in range(100):
                    yield index
            finally:
                events.append("upstream finalized")

        stream = with_keep_alive(upstream(), INTERVAL)
        assert isinstance(stream, AsyncGenerator)
        assert await stream.__anext__() == 0
        await stream.aclose()
        return events

    assert run(scenario) == ["upstream finalized"]


def test_on_keep_alive_is_called_once_per_comment() -> None:
    async def scenario() -> tuple[int, int]:
        calls = 0
        release = asyncio.Event()

        def count() -> None:
            nonlocal calls
            calls += 1

        async def upstream() -> AsyncIterator[str]:
            await release.wait()
            yield "done"

        comments = 0
        async for frame in with_keep_alive(upstream(), INTERVAL, count):
            if frame == KEEP_ALIVE_COMMENT:
                comments += 1
                if comments == 2:
                    release.set()
        return calls, comments

    assert run(scenario) == (2, 2)


def test_a_class_based_async_iterator_works_like_a_generator() -> None:
    class Countdown:
        def __init__(self) -> None:
            self.left = 3
            self.release = asyncio.Event()

        def __aiter__(self) -> Countdown:
            return self

        async def __anext__(self) -> int:
            if self.left == 1:
                await self.release.wait()
            if not self.left:
                raise StopAsyncIteration
            self.left -= 1
            return self.left

    async def scenario() -> list[Any]:
        source = Countdown()
        received: list[Any] = []
        async for frame in with_keep_alive(source, INTERVAL):
            received.append(frame)
            if frame == KEEP_ALIVE_COMMENT:
                source.release.set()
        return received

    assert run(scenario) == [2, 1, KEEP_ALIVE_COMMENT, 0]
