"""A user that gets an answer it cannot use at once waits before its next request.

A server that died behind a proxy is answered for by the proxy: an instant 502 or 503, thousands a
second per user were the user to send its next request at once (nginx: 38,089 rows in 8 s). A
server that refuses (429) does the same. So a user paces itself after:

- a ``connect_error`` (no answer at all): ``CONNECT_ERROR_PAUSE_S``;
- an *instant error answer*: a status that is not 2xx (so no stream to read), its whole answer in
  under ``INSTANT_ANSWER_S``, that is not what its request expected (a 400 a spec expects, as
  mixed_truncate's overlong prompts, is a healthy answer and never paced) or that asks the client
  to back off whatever was expected (``BACK_OFF_STATUSES``): ``ERROR_ANSWER_PAUSE_S``, or the
  answer's ``Retry-After`` on a 429 or 503 when longer, up to ``RETRY_AFTER_MAX_S``.

Invariants: every answer is still one row with its true outcome (the pause comes after the row is
recorded); an answer that is none of these costs no pause (no sleep call at all), so a healthy run
is unchanged; per user, rows that are paced or take ``INSTANT_ANSWER_S`` or more come at most
``1 / ERROR_ANSWER_PAUSE_S`` a second. In open loop a paced user holds its in-flight slot while it
waits, so the tickets that come due meanwhile start late or, still untaken at the end, are
``not_sent`` rows (``loadtests.load.open_loop``): never counted as sent.

The rule is stated twice, for one row (``pause_after``, on the loop) and for a run's table
(``paced_answers``, which the run's closing line counts), from the same constants; a test holds
them to each other.
"""

from __future__ import annotations

import email.utils
import math
import time
from typing import TYPE_CHECKING

from loadtests.client.outcome import Outcome, RequestRow

if TYPE_CHECKING:
    import pandas as pd  # a table the caller read; the Locust process never imports pandas for this

CONNECT_ERROR_PAUSE_S = 0.5
"""A user that got no HTTP response at all (the server died or refuses connections) waits this long
before its next request: one row per user per pause says the server is gone, without a loop of
thousands of refused connections a second burning the load generator's CPU."""
INSTANT_ANSWER_S = 0.5
"""An error answer whose whole exchange took less than this came back at once: nothing was
generated, and retrying at once would be a flood."""
ERROR_ANSWER_PAUSE_S = 0.5
"""The wait after an instant error answer, as after a connect error."""
BACK_OFF_STATUSES = frozenset({429, 503})
"""Statuses that ask the client to come back later (``Retry-After``, RFC 9110 10.2.3): always paced."""
RETRY_AFTER_MAX_S = 10.0
"""The longest ``Retry-After`` a user honours: a server's day-long ask must not stall a run."""


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds up to ``RETRY_AFTER_MAX_S``: delta
    seconds or an HTTP date (``now``: the wall clock, epoch seconds); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        seconds = float(text)
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None  # an HTTP date is GMT; one without a zone is no HTTP date
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def instant_error(status: int | None, duration_s: float, outcome: str, expected: str | None) -> bool:
    """An error answer that came back at once and is paced (module docstring)."""
    if status is None or 200 <= status < 300 or duration_s >= INSTANT_ANSWER_S:
        return False
    return status in BACK_OFF_STATUSES or outcome != (expected or Outcome.OK)


def pause_after(row: RequestRow, retry_after: str | None = None) -> float:
    """How long the user that recorded ``row`` waits before its next request (0: not at all);
    ``retry_after`` is the answer's ``Retry-After`` header, if any."""
    if row.outcome == Outcome.CONNECT_ERROR:
        return CONNECT_ERROR_PAUSE_S
    if not instant_error(row.status, row.duration_s, row.outcome, row.expected):
        return 0.0
    asked = retry_after_s(retry_after) if row.status in BACK_OFF_STATUSES else None
    return max(ERROR_ANSWER_PAUSE_S, asked or 0.0)


def paced_answers(requests: pd.DataFrame) -> dict[int, int]:
    """How many rows of a run's requests table were instant error answers (so paced), by status."""
    if requests.empty:
        return {}
    status = requests["status"]
    answered = status.notna() & ~status.between(200, 299)
    fast = requests["duration_s"] < INSTANT_ANSWER_S
    unexpected = requests["outcome"].astype(str) != requests["expected"].fillna(Outcome.OK.value).astype(str)
    paced = answered & fast & (unexpected | status.isin(list(BACK_OFF_STATUSES)))
    counts = status[paced].astype(int).value_counts().sort_index()
    return dict(zip(map(int, counts.index.tolist()), map(int, counts.tolist()), strict=True))


def pacing_line(counts: dict[int, int]) -> str | None:
    """The run's one line on its paced answers, with their counts by status; None when none was."""
    if not counts:
        return None
    total = sum(counts.values())
    by_status = ", ".join(f"HTTP {code}: {count:,}" for code, count in sorted(counts.items()))
    return (
        f"sse-soak: {total:,} error answers came back at once ({by_status}): each user paused "
        f"{ERROR_ANSWER_PAUSE_S:g} s after each (a 429's or 503's Retry-After, up to {RETRY_AFTER_MAX_S:g} s), "
        "rather than flood the server; every one is a row"
    )
