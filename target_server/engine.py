"""The simulated engine: a FIFO scheduler with ``max_num_seqs`` slots, prefill and decode timing.

A request waits for a slot (first come, first served), holds it through prefill
(``time_to_first_token + prompt_tokens * prefill_time_per_token``) and decode (one token every
``inter_token_latency``), and gives it back the moment its generator is closed or cancelled, so a
client that disconnects frees its slot at once. Token times are scheduled against absolute
deadlines, so delays do not accumulate drift. Invariant: ``running + free == max_num_seqs``,
``waiting`` counts exactly the requests blocked in ``acquire``, and ``kv_tokens_held`` is the prompt
and generated tokens of the requests holding a slot (the simulated KV cache, vLLM's
``kv_cache_usage_perc`` as ``kv_cache_usage``: at most 1, since a request fits in ``max_model_len``).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from target_server import tokenizer
from target_server.config import ServerConfig
from target_server.faults import Fault, InjectedDisconnect, InjectedEngineError, strike_index


class SlotScheduler:
    """``max_num_seqs`` slots handed out strictly in arrival order."""

    def __init__(self, slots: int) -> None:
        self.capacity = slots
        self._free = slots
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def running(self) -> int:
        return self.capacity - self._free

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted and cancelled in the same tick: pass the slot on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the next waiter, never through _free
                return
        self._free += 1


@dataclass(frozen=True)
class Generation:
    """What the engine is asked to do for one request."""

    prompt_tokens: int
    max_tokens: int
    fault: Fault | None = None


class Engine:
    """Turns a ``Generation`` into timed tokens. One per server process; shared by its requests.
    ``slots`` is this process's share of ``max_num_seqs`` (all of it by default)."""

    def __init__(self, config: ServerConfig, slots: int | None = None) -> None:
        self.config = config
        self.scheduler = SlotScheduler(config.max_num_seqs if slots is None else slots)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self._first_request: float | None = None
        self.kv_tokens_held = 0

    def pace(self) -> float:
        """How many times slower than configured the engine runs now: ``--slowdown-factor`` from
        ``--slowdown-after`` seconds after the first generation request, else 1."""
        after, first = self.config.slowdown_after, self._first_request
        slowed = after is not None and first is not None and time.monotonic() - first >= after
        return self.config.slowdown_factor if slowed else 1.0

    @property
    def kv_cache_usage(self) -> float:
        """Share of the simulated KV cache (this process's slots * ``max_model_len`` tokens) in use, 0 to 1."""
        return self.kv_tokens_held / (self.scheduler.capacity * self.config.max_model_len)

    def prefill_seconds(self, prompt_tokens: int) -> float:
        fixed, per_token = self.config.time_to_first_token, self.config.prefill_time_per_token
        return (fixed + prompt_tokens * per_token) * self.pace() / 1000.0

    async def generate(self, job: Generation) -> AsyncIterator[str]:
        """Yield the text of each generated token, exactly ``job.max_tokens`` of them unless a
        fault strikes. Holds a slot from the first token's prefill until the generator ends."""
        loop = asyncio.get_running_loop()
        if self._first_request is None:
            self._first_request = time.monotonic()
        await self.scheduler.acquire()
        held = job.prompt_tokens  # no await before the try: the finally always gives these back
        self.kv_tokens_held += held
        try:
            self.prompt_tokens_total += job.prompt_tokens
            deadline = loop.time() + self.prefill_seconds(job.prompt_tokens)
            await _sleep_until(loop, deadline)
            strike = strike_index(job.max_tokens) if job.fault and job.fault.strikes_mid_stream else -1
            step = self.config.inter_token_latency * self.pace() / 1000.0
            seed = self.config.seed
            for index in range(job.max_tokens):
                if index == strike:
                    await self._strike(job.fault)
                    deadline = loop.time()
                if index and step:
                    deadline += step
                    await _sleep_until(loop, deadline)
                self.generation_tokens_total += 1
                self.kv_tokens_held += 1
                held += 1
                yield tokenizer.output_token(seed, index)
            if strike == job.max_tokens:
                await self._strike(job.fault)
        finally:
            self.kv_tokens_held -= held
            self.scheduler.release()

    async def _strike(self, fault: Fault | None) -> None:
        if fault is Fault.STALL:
            await asyncio.sleep(self.config.stall_seconds)
        elif fault is Fault.INBAND_ERROR:
            raise InjectedEngineError("injected fault: the engine failed mid-generation")
        elif fault is Fault.DISCONNECT:
            raise InjectedDisconnect("injected fault: connection dropped mid-stream")


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
