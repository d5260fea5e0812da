"""Which rows a user paces after, how long, and the run's count of them: one rule, two readers."""

from __future__ import annotations

import email.utils

import pandas as pd
import pytest

from loadtests.client.outcome import Outcome, RequestRow
from loadtests.load.open_loop import Ticket, not_sent_row
from loadtests.load.pacing import (
    CONNECT_ERROR_PAUSE_S,
    ERROR_ANSWER_PAUSE_S,
    INSTANT_ANSWER_S,
    RETRY_AFTER_MAX_S,
    paced_answers,
    pacing_line,
    pause_after,
    retry_after_s,
)

pytestmark = pytest.mark.fast


def row(status: int | None, outcome: str, duration_s: float = 0.002, expected: str | None = Outcome.OK) -> RequestRow:
    """A finished row of a request (the rest of its fields as a not-sent one's: they play no part)."""
    base = not_sent_row(Ticket(1, 0.0, 0.0), "local")
    base.status, base.outcome, base.duration_s, base.expected = status, outcome, duration_s, expected
    return base


HEALTHY = [
    row(200, Outcome.OK, 0.001),  # a fast stream
    row(200, Outcome.CUT, 0.001),  # a cut stream: read, not an error answer
    row(400, Outcome.REJECTED, 0.001, expected=Outcome.REJECTED),  # mixed_truncate's overlong prompt, as expected
    row(500, Outcome.HTTP_5XX, INSTANT_ANSWER_S),  # a 500 after work: not at once
    row(502, Outcome.HTTP_5XX, 3.0),
    row(None, Outcome.TIMEOUT, 2.0),
    row(None, Outcome.NOT_SENT, 0.0),
    row(200, Outcome.STOPPED, 0.0),
]
INSTANT = [
    row(502, Outcome.HTTP_5XX),  # nginx, Caddy for a dead server
    row(503, Outcome.HTTP_5XX),  # Apache, Squid
    row(500, Outcome.HTTP_5XX, INSTANT_ANSWER_S - 0.01),
    row(429, Outcome.REJECTED),
    row(429, Outcome.REJECTED, expected=Outcome.REJECTED),  # a back-off status is paced whatever was expected
    row(404, Outcome.REJECTED),  # not what was expected
    row(502, Outcome.HTTP_5XX, expected=Outcome.REJECTED),
    row(504, Outcome.GATEWAY_TIMEOUT),
]


@pytest.mark.parametrize("healthy", HEALTHY, ids=lambda r: f"{r.status}-{r.outcome}-{r.duration_s}")
def test_a_healthy_answer_costs_no_pause(healthy: RequestRow) -> None:
    assert pause_after(healthy, "5") == 0.0


@pytest.mark.parametrize("instant", INSTANT, ids=lambda r: f"{r.status}-{r.outcome}-{r.expected}")
def test_an_instant_error_answer_is_paced_as_a_connect_error_is(instant: RequestRow) -> None:
    assert pause_after(instant) == ERROR_ANSWER_PAUSE_S == CONNECT_ERROR_PAUSE_S
    assert pause_after(row(None, Outcome.CONNECT_ERROR, 0.001)) == CONNECT_ERROR_PAUSE_S


def test_retry_after_is_honoured_on_429_and_503_only_and_bounded() -> None:
    assert pause_after(row(429, Outcome.REJECTED), "3") == 3.0
    assert pause_after(row(503, Outcome.HTTP_5XX), "2") == 2.0
    assert pause_after(row(503, Outcome.HTTP_5XX), "0") == ERROR_ANSWER_PAUSE_S  # never shorter than the pace
    assert pause_after(row(429, Outcome.REJECTED), "86400") == RETRY_AFTER_MAX_S
    assert pause_after(row(502, Outcome.HTTP_5XX), "3") == ERROR_ANSWER_PAUSE_S  # a 502 asks nothing
    assert pause_after(row(429, Outcome.REJECTED), "soon") == ERROR_ANSWER_PAUSE_S


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_800_000_000.0
    assert retry_after_s(" 7 ", now) == 7.0
    assert retry_after_s(email.utils.formatdate(now + 4, usegmt=True), now) == 4.0
    assert retry_after_s(email.utils.formatdate(now - 60, usegmt=True), now) == 0.0  # a date gone by
    assert retry_after_s("Sun, 06 Nov 1994 08:49:37", now) is None  # no zone: no HTTP date
    for unreadable in (None, "", "-1", "1.5", "later"):
        assert retry_after_s(unreadable, now) is None


def test_the_runs_count_is_the_users_rule() -> None:
    rows = HEALTHY + INSTANT + [row(None, Outcome.CONNECT_ERROR)]
    table = pd.DataFrame([r.as_dict() for r in rows])
    counted = paced_answers(table)
    by_rule: dict[int, int] = {}
    for each in rows:
        if each.status is not None and pause_after(each):
            by_rule[each.status] = by_rule.get(each.status, 0) + 1
    assert counted == by_rule == {404: 1, 429: 2, 500: 1, 502: 2, 503: 1, 504: 1}
    assert paced_answers(table.iloc[:0]) == {} and paced_answers(pd.DataFrame([r.as_dict() for r in HEALTHY])) == {}


def test_the_line_says_the_counts_once_and_nothing_without_any() -> None:
    assert pacing_line({}) is None
    line = pacing_line({502: 38089, 429: 2})
    assert line is not None and line.startswith("sse-soak: 38,091 error answers came back at once")
    assert "(HTTP 429: 2, HTTP 502: 38,089)" in line and "\n" not in line
