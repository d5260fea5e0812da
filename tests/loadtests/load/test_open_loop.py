"""Open-loop schedules: their shape, their split across processes, their tickets, and their figures."""

from __future__ import annotations

import itertools
import time

import gevent
import pandas as pd
import pyarrow as pa
import pytest

from loadtests.errors import ScheduleClosed
from loadtests.judge.summary import arrival, arrival_line
from loadtests.load.open_loop import ArrivalPlan, ArrivalSchedule, not_sent_row, share
from loadtests.record.recorder import REQUEST_SCHEMA, Recorder

pytestmark = pytest.mark.fast


def first(plan: ArrivalPlan, count: int) -> list[float]:
    return list(itertools.islice(plan.offsets(), count))


def test_constant_processes_interleave_into_exactly_the_rate_asked() -> None:
    together = sorted(
        offset for index in range(3) for offset in first(ArrivalPlan(12.0, "constant", processes=3, index=index), 20)
    )
    assert together == pytest.approx([k / 12.0 for k in range(60)])


def test_a_poisson_schedule_is_its_seed_and_each_process_has_its_own_stream() -> None:
    plan = ArrivalPlan(10.0, "poisson", seed=7, processes=2, index=0)
    assert first(plan, 50) == first(ArrivalPlan(10.0, "poisson", seed=7, processes=2, index=0), 50)
    assert first(plan, 50) != first(ArrivalPlan(10.0, "poisson", seed=8, processes=2, index=0), 50)
    assert first(plan, 50) != first(ArrivalPlan(10.0, "poisson", seed=7, processes=2, index=1), 50)
    offsets = first(plan, 20_000)  # this process's half: 5 a second on average
    assert 20_000 / offsets[-1] == pytest.approx(5.0, rel=0.03)
    gaps = pd.Series(offsets).diff().dropna()
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential gaps: as variable as their mean


def test_shares_of_the_in_flight_limit_add_up() -> None:
    for total, processes in [(1, 1), (5, 2), (7, 3), (2, 4)]:
        assert sum(share(total, processes, index) for index in range(processes)) == total
    assert ArrivalPlan(1.0, max_in_flight=5, processes=2, index=0).own_max_in_flight() == 3
    assert ArrivalPlan(1.0).own_max_in_flight() is None


def test_tickets_come_in_order_overdue_ones_at_once_and_the_untaken_ones_are_unsent() -> None:
    started = time.time() - 1.0  # ten tickets at 10 a second are already due
    schedule = ArrivalSchedule(ArrivalPlan(10.0, "constant"), started)
    taken = [schedule.acquire() for _ in range(3)]
    assert [ticket.number for ticket in taken] == [1, 2, 3]
    assert [ticket.due_epoch - started for ticket in taken] == pytest.approx([0.0, 0.1, 0.2])
    left = schedule.unsent()
    assert [ticket.number for ticket in left][:1] == [4] and 6 <= len(left) <= 8  # due by now, never taken
    assert schedule.closed
    with pytest.raises(ScheduleClosed):
        schedule.acquire()  # the test is stopping: a user that asks now sends nothing, on no schedule


def test_a_ticket_waits_for_its_time_and_for_a_free_slot() -> None:
    schedule = ArrivalSchedule(ArrivalPlan(10.0, "constant", max_in_flight=1), time.time() + 0.2)
    first_ticket = schedule.acquire()
    assert first_ticket.due <= time.monotonic()  # it slept until due
    second = gevent.spawn(schedule.acquire)
    gevent.sleep(0.3)
    assert not second.ready()  # the one slot is in use
    schedule.release()
    assert second.get(timeout=5).number == 2


def test_a_not_sent_row_fits_the_request_table() -> None:
    schedule = ArrivalSchedule(ArrivalPlan(5.0, "constant"), time.time() - 1.0)
    (ticket, *_) = schedule.unsent()
    recorder = Recorder()
    recorder.add(not_sent_row(ticket, "worker-1"), None)
    table = pa.Table.from_pylist(recorder.take_batch()["rows"], schema=REQUEST_SCHEMA)
    row = table.to_pylist()[0]
    assert (row["outcome"], row["scheduled_time"], row["status"], row["start_lateness_s"]) == (
        "not_sent",
        ticket.due_epoch,
        None,
        None,
    )


def test_the_arrival_section_counts_the_schedule_against_what_was_sent() -> None:
    base = 1_000.0
    rows = pd.DataFrame(
        {
            "scheduled_time": [base, base + 0.5, base + 1.0, base + 1.5, None],
            "outcome": ["ok", "ok", "ok", "not_sent", "ok"],
            "start_lateness_s": [0.0, 0.002, 0.4, None, None],
            "ttft_s": [0.1, 0.1, 0.2, None, 0.1],
        }
    )
    section = arrival({"rate": 2.0, "arrival": "constant", "seed": 0, "max_in_flight": 1}, rows)
    assert section is not None
    assert (section["scheduled"], section["sent"], section["not_sent"], section["late"]) == (4, 3, 1, 1)
    assert section["span_s"] == 2.0 and section["rate_achieved"] == 1.5
    assert section["start_lateness_s"]["max"] == 0.4 and section["ttft_from_schedule_s"]["max"] == pytest.approx(0.6)
    assert section["ttft_from_send_s"]["max"] == 0.2
    assert arrival_line(section) == (
        "arrivals: asked 2/s (constant), 4 scheduled, 3 sent (1.5/s), 1 not sent; "
        "1 started over 10 ms late (p99 0.392 s, max 0.400 s)"
    )
    assert arrival(None, rows) is None
