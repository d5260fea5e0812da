"""bench/scale.py's command line: what each part runs, and '' to skip the master-aggregation part."""

from __future__ import annotations

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
