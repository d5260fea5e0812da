"""How long the slot holders make a stream wait: long enough for every gate that judges silence."""

from __future__ import annotations

import pytest

from loadtests.load.slot_holders import release_period

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("hold_s", "read_timeout", "interval", "period"),
    [
        (3.0, None, None, 3.0),  # the scenario's own wait
        (3.0, 2.0, 0.5, 3.0),  # proxy_timeout at its defaults: 1.5 x 2 s is 3 s
        (3.0, 5.0, 1.0, 7.5),  # a user's proxy with a longer read timeout: outlast it
        (3.0, None, 2.0, 6.0),  # a keep-alive of 2 s: three intervals of silence
        (3.0, 2.02, None, 3.1),  # in whole tenths, rounded up: never shorter than asked
    ],
)
def test_a_waiting_stream_outlasts_the_read_timeout_and_several_keepalive_intervals(
    hold_s: float, read_timeout: float | None, interval: float | None, period: float
) -> None:
    assert release_period(hold_s, read_timeout, interval) == pytest.approx(period)
