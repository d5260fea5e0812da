"""``bench/timing_fidelity.py``'s test of whether the lag monitor explains a gap's error: where it
looks (from the error before frame i-1) and what counts (one stall, or a saturated loop's blocked
time summed). Synthetic gaps and lag samples on one monotonic clock; the fidelity figures rest on it."""

from __future__ import annotations

from types import ModuleType

import pandas as pd
import pytest

from tests.bench_scripts import load_bench_script

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def fidelity() -> ModuleType:
    return load_bench_script("timing_fidelity")


def gap(read_at: float, error_s: float, worker: str = "local") -> pd.DataFrame:
    """Frames i-1 and i read together at ``read_at``: frame i-1 stamped ``error_s`` late."""
    return pd.DataFrame({"worker": [worker], "prev_mono": [read_at], "mono": [read_at], "error_s": [error_s]})


def samples(*windows: tuple[float, float], worker: str = "local") -> pd.DataFrame:
    """Lag samples as (woke at, lag) pairs: the loop was blocked over ``[woke - lag, woke]``."""
    return pd.DataFrame(
        {"worker": [worker] * len(windows), "t_mono": [w for w, _ in windows], "lag_s": [lag for _, lag in windows]}
    )


def test_a_stall_before_the_late_stamp_explains_it(fidelity: ModuleType) -> None:
    # The stall held frame i-1 from 99.995 to 100.025; the reader got to it at 100.040, stamping it
    # 35 ms late. The stall ended 15 ms before the stamp: a window that starts at the stamp misses it.
    assert fidelity.explained_by_lag(gap(100.040, 0.035), samples((100.025, 0.030))).tolist() == [True]


def test_a_saturated_loop_explains_it_by_its_blocked_time_summed(fidelity: ModuleType) -> None:
    saturated = samples((100.012, 0.012), (100.034, 0.012), (100.056, 0.012))  # no sample near 28 ms
    assert fidelity.explained_by_lag(gap(100.050, 0.038), saturated).tolist() == [True]


def test_a_loop_that_was_barely_behind_explains_nothing(fidelity: ModuleType) -> None:
    barely = samples((100.012, 0.003), (100.034, 0.003), (100.056, 0.003))
    assert fidelity.explained_by_lag(gap(100.050, 0.038), barely).tolist() == [False]


def test_blocked_time_outside_the_window_does_not_count(fidelity: ModuleType) -> None:
    long_before = samples((99.900, 0.050), (100.012, 0.003))  # a big stall 150 ms earlier
    assert fidelity.explained_by_lag(gap(100.050, 0.038), long_before).tolist() == [False]


def test_another_process_stalling_explains_nothing(fidelity: ModuleType) -> None:
    elsewhere = samples((100.025, 0.030), worker="worker-1")
    both = pd.concat([elsewhere, samples((100.012, 0.001))], ignore_index=True)
    assert fidelity.explained_by_lag(gap(100.040, 0.035), both).tolist() == [False]
