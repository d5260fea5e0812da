"""How a Locust test ended, in the words ``ended:`` prints and summary.json keeps.

A test ends by a signal (Ctrl-C, SIGTERM), by its run time (``-t``), or by a stop (the web UI's Stop,
every worker gone). Locust arms its ``-t`` timer as it spawns the greenlet that fires test_start, so
the run time counts from there: a test whose start-up hooks took part of it says how long its load
phase really ran. A signal during a test with a planned duration interrupts it (its verdict fails);
a service of the run that died (``loadtests.run.stack_watch``) interrupts it whatever its duration.
"""

from __future__ import annotations

from collections.abc import Sequence

EARLY_S = 1.0
"""A test stopped this long before its planned duration, by no signal, says so in ``ended`` (say,
every worker gone); it is no interruption: only a signal is known to be one."""
START_UP_NOTED_S = 0.5
"""A test whose start-up (its test_start hooks) took this long says how long its load phase really was."""


def how_it_ended(
    started: float,
    load_started: float | None,
    end: float,
    duration_s: float | None,
    signals: Sequence[tuple[str, float]],
) -> tuple[str, str | None]:
    """``(ended, interrupted)`` of a test that started (test_start fired) at ``started``, spawned its
    users at ``load_started`` and stopped at ``end`` (``time.monotonic()`` each): the first signal
    received while it ran, else the run time reached, else the stop; ``interrupted`` repeats the words
    when a signal ended a test that had a planned duration."""
    of = f" of {duration_s:g} s" if duration_s else ""
    during = [(name, at) for name, at in signals if started <= at <= end]
    if during:
        name, at = during[0]
        ended = f"{name} at {at - started:.1f} s{of}"
        return ended, ended if duration_s else None
    elapsed = end - started
    if duration_s and elapsed >= duration_s - EARLY_S:
        start_up = (load_started or started) - started
        if start_up < START_UP_NOTED_S:
            return f"run time of {duration_s:g} s reached", None
        load = f"load ran {elapsed - start_up:.1f} s: the test's start-up took {start_up:.1f} s of it"
        return f"run time of {duration_s:g} s reached ({load})", None
    return f"stopped at {elapsed:.1f} s{of}", None  # the web UI's Stop, or every worker gone


def ended_by_a_death(started: float, death: tuple[str, float], duration_s: float | None) -> str:
    """What ``ended`` and ``interrupted`` both say of a test that a service's death ended: the
    service in words and when, from the test's start. Always an interruption, with ``-t`` or without:
    the rest of the test ran against no server."""
    what, at = death
    of = f" of {duration_s:g} s" if duration_s else ""
    return f"{what} at {at - started:.1f} s{of}"
