"""bench/scale.py's command line: what each part runs, and '' to skip the master-aggregation part."""

from __future__ import annotations

import os

import pytest

from tests.bench_scripts import load_bench_script

pytestmark = pytest.mark.fast

scale = load_bench_script("scale")


def test_an_empty_worker_list_skips_the_aggregation_part() -> None:
    assert scale.parse_args(["--workers", ""]).workers == []
    assert scale.parse_args(["--workers", "2,4"]).workers == [2, 4]


@pytest.mark.parametrize("option", ["--streams", "--workers"])
@pytest.mark.parametrize("value", ["0", "2,x"])
def test_counts_below_one_or_not_numbers_are_refused(option: str, value: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        scale.parse_args([option, value])
    assert exit_info.value.code == 2


def test_every_stream_count_needs_at_least_one() -> None:
    with pytest.raises(SystemExit):
        scale.parse_args(["--streams", ""])


throughput = load_bench_script("sse_user_throughput")


def test_the_cpu_split_gives_the_server_one_cpu_and_the_load_generator_the_rest() -> None:
    allowed = os.sched_getaffinity(0)
    assert throughput.cpu_split(False) == (None, None)
    server, loadgen = throughput.cpu_split(True)
    if len(allowed) < 2:
        assert (server, loadgen) == (None, None)
        return
    assert server == {min(allowed)} and loadgen == allowed - server


def test_pinned_holds_this_process_to_the_cpus_meanwhile_and_restores_them() -> None:
    allowed = os.sched_getaffinity(0)
    first = {min(allowed)}
    with throughput.pinned(first):
        assert os.sched_getaffinity(0) == first
    assert os.sched_getaffinity(0) == allowed
    with throughput.pinned(None):
        assert os.sched_getaffinity(0) == allowed


def test_a_step_runs_at_most_the_streams_the_open_files_limit_fits() -> None:
    """One socket a stream, beside the process's own files: at the limit, a step is cut, never fails on EMFILE."""
    assert scale.streams_that_fit(20000) == 20000 - scale.BASE_FDS_ALLOWANCE
    assert scale.streams_that_fit(20000 + scale.BASE_FDS_ALLOWANCE) == 20000
    assert scale.streams_that_fit(10) == 1


def test_the_default_ladder_reaches_20000_streams_and_memory_by_type_is_asked_for() -> None:
    options = scale.parse_args([])
    assert max(options.streams) == 20000 and not options.memory_by_type
    assert scale.parse_args(["--memory-by-type"]).memory_by_type


def test_the_spawn_rate_is_asked_for_and_sets_the_silence_of_a_step() -> None:
    assert scale.parse_args([]).spawn_rate == scale.SPAWN_RATE
    slower = scale.ladder_settings(20000, 2, spawn_rate=500.0)
    faster = scale.ladder_settings(20000, 2)
    assert scale.parse_args(["--spawn-rate", "500"]).spawn_rate == slower.spawn_rate == 500.0
    # silent until every user has started
    assert slower.ttft_ms - faster.ttft_ms == 1000 * (20000 / 500 - 20000 / scale.SPAWN_RATE)
