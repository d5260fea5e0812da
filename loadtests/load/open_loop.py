"""Open-loop arrivals: request start times that follow a schedule, not the previous response.

With ``--rate R`` a run asks for R requests a second in total, whatever the server does. The
schedule is made of tickets, each a time to start one request. Locust's users send them: a user
that is free takes the earliest ticket nobody took, waits until it is due and sends it at once,
so a slow server makes requests start late (``start_lateness_s``), never makes the run ask for
less. At most ``--max-in-flight`` requests are open at once (default: the user count); a ticket
that came due and was still waiting for a free sender when the run ended is a ``not_sent`` row.

Distributed runs split the rate, not the schedule's shape: process ``index`` of ``processes``
takes every ``processes``-th ticket of the constant schedule (so the interleaved total is exactly
R a second from a shared start), or runs its own Poisson stream at R / processes with a seed of
its own (the superposition of independent Poisson streams is a Poisson stream at the sum of their
rates). ``--arrival-seed`` makes a Poisson schedule repeatable.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import gevent
from gevent.lock import Semaphore

from loadtests.client.outcome import Outcome, RequestRow
from loadtests.errors import ScheduleClosed

ARRIVAL_KINDS = ("poisson", "constant")
NOT_SENT = Outcome.NOT_SENT.value
"""The name, as well as the outcome, of the row of a scheduled request never sent."""
START_DELAY_S = 0.5
"""How far ahead of the master's test start the shared schedule begins: the time the spawn messages
take to reach the workers, so that none finds its first tickets already late."""


def share(total: int, processes: int, index: int) -> int:
    """Process ``index``'s share of ``total`` (the shares of all ``processes`` sum to ``total``)."""
    return total // processes + (1 if index < total % processes else 0)


@dataclass(frozen=True)
class ArrivalPlan:
    """The schedule a run asked for, and this process's part of it."""

    rate: float
    """Requests a second, all processes together."""
    kind: str = "poisson"
    seed: int = 0
    max_in_flight: int | None = None
    """Requests open at once, all processes together; None: as many as there are users."""
    processes: int = 1
    index: int = 0

    def offsets(self) -> Iterator[float]:
        """Seconds after the schedule's start of this process's tickets, in order, without end."""
        if self.kind == "constant":
            return ((self.index + k * self.processes) / self.rate for k in itertools.count())
        draws = random.Random(f"{self.seed}/{self.index}")  # its own stream per process, the same every run
        own_rate = self.rate / self.processes
        return itertools.accumulate(draws.expovariate(own_rate) for _ in itertools.count())

    def own_max_in_flight(self) -> int | None:
        if self.max_in_flight is None:
            return None
        return share(self.max_in_flight, self.processes, self.index)


@dataclass(frozen=True)
class Ticket:
    """One scheduled start: ``due`` on this process's monotonic clock, ``due_epoch`` on the wall clock."""

    number: int
    due: float
    due_epoch: float


class ArrivalSchedule:
    """This process's tickets from ``start_epoch`` on, handed out in order. Not thread-safe: the
    users are greenlets on one thread, and nothing here blocks between reading and advancing."""

    def __init__(self, plan: ArrivalPlan, start_epoch: float) -> None:
        self.plan = plan
        self.start_epoch = start_epoch
        self._start = time.monotonic() + (start_epoch - time.time())
        self._offsets = plan.offsets()
        self._taken = 0
        self._next_offset = next(self._offsets)
        limit = plan.own_max_in_flight()
        self._slots = Semaphore(limit) if limit is not None else None
        self.closed = False

    def _take(self) -> Ticket:
        offset = self._next_offset
        self._next_offset = next(self._offsets)
        self._taken += 1
        return Ticket(self._taken, self._start + offset, self.start_epoch + offset)

    def acquire(self) -> Ticket:
        """Wait for a free in-flight slot, take the earliest ticket nobody took and wait until it is
        due (not at all when it is overdue: its request then starts late). Call ``release()`` when
        its request is over. Raises ``ScheduleClosed`` once ``unsent()`` closed the schedule: a
        request sent then would follow no schedule."""
        if self.closed:
            raise ScheduleClosed
        if self._slots is not None:
            self._slots.acquire()
        try:
            ticket = self._take()
            gevent.sleep(max(0.0, ticket.due - time.monotonic()))
        except BaseException:
            self.release()
            raise
        return ticket

    def release(self) -> None:
        if self._slots is not None:
            self._slots.release()

    def unsent(self, until: float | None = None) -> list[Ticket]:
        """Close the schedule and return the tickets due by ``until`` (monotonic; default now) that no
        user took: requests the schedule asked for and the run never sent."""
        until = time.monotonic() if until is None else until
        self.closed = True
        left = []
        while self._start + self._next_offset <= until:
            left.append(self._take())
        return left


def not_sent_row(ticket: Ticket, worker: str) -> RequestRow:
    """The row of a scheduled request that never started: its scheduled time, no response."""
    return RequestRow(
        request_id=uuid.uuid4().hex,
        name=NOT_SENT,
        route="",
        client="",
        worker=worker,
        start_time=ticket.due_epoch,
        prompt_tokens=None,
        max_tokens=None,
        truncate_prompt_tokens=None,
        expected=None,
        status=None,
        outcome=Outcome.NOT_SENT,
        error_code=None,
        error_param=None,
        error_message=None,
        usage_prompt_tokens=None,
        usage_completion_tokens=None,
        raw_usage=None,
        ttfb_s=None,
        ttft_s=None,
        duration_s=0.0,
        data_frames=0,
        keepalive_frames=None,
        comment_frames=None,
        bytes=0,
        max_gap_s=None,
        max_data_gap_s=None,
        silence_before_first_token_s=None,
        silence_from_send_s=None,
        done=False,
        scheduled_time=ticket.due_epoch,
    )
