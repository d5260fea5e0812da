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


def test_objects_are_frozen_while_users_start_and_no_longer_once_all_are() -> None:
    import gc

    import gevent

    frozen_before = gc.get_freeze_count()
    spawned: list[float] = []
    freezer = gevent.Greenlet(throughput._freeze_until, spawned)
    try:
        gc.unfreeze()
        throughput._freeze_until([1.0])  # every user started already: nothing to do
        assert gc.get_freeze_count() == 0
        freezer.start()
        gevent.sleep(0)  # the freezer's first pass
        assert gc.get_freeze_count() > 0
        spawned.append(1.0)
        freezer.join(timeout=30)
        assert freezer.dead
    finally:
        freezer.kill()
        gc.unfreeze()
        if frozen_before:
            gc.freeze()
