"""bench/peers.py's ratios: per round against the best peer that ran, and their medians over rounds."""

from __future__ import annotations

import pytest

from tests.bench_scripts import load_bench_script

pytestmark = pytest.mark.fast

peers = load_bench_script("peers")


def _row(tool: str, frames: int, cpu_s: float, stream_cpu_s: float, note: str = "") -> object:
    return peers.Row(tool, note, cpu_total_s=cpu_s, cpu_stream_s=stream_cpu_s, frames=frames, stream_frames=frames)


def test_the_ratio_is_against_the_best_peer_of_the_round_for_each_figure() -> None:
    rows = [
        _row("sse-soak", 1000, 1.0, 0.5),  # 1,000 total, 2,000 streaming
        _row("guidellm", 1000, 4.0, 0.5),  # 250 total, 2,000 streaming: the best streaming peer
        _row("inference-perf", 1000, 2.0, 1.0),  # 500 total: the best total peer
    ]
    assert peers.ratios(rows) == pytest.approx((2.0, 1.0))


def test_a_peer_that_failed_is_no_yardstick_and_none_left_is_no_ratio() -> None:
    soak = _row("sse-soak", 1000, 1.0, 0.5)
    failed = _row("inference-perf", 1000, 100.0, 100.0, note="exit 1: crashed")
    assert peers.ratios([soak, failed, _row("aiperf", 1000, 4.0, 1.0)]) == pytest.approx((4.0, 2.0))
    assert peers.ratios([soak, failed]) is None
    assert peers.ratios([_row("sse-soak", 1000, 1.0, 0.5, note="exit 2"), _row("aiperf", 1000, 4.0, 1.0)]) is None


def test_rounds_print_every_ratio_sorted_and_their_medians(capsys: pytest.CaptureFixture[str]) -> None:
    peers.print_rounds([(1.7, 1.3), (1.5, 0.9), (1.9, 1.4)])
    assert capsys.readouterr().out.strip() == (
        "over 3 rounds, sse-soak / best peer: total 1.50, 1.70, 1.90 (median 1.70x), "
        "streaming-only 0.90, 1.30, 1.40 (median 1.30x)"
    )


@pytest.mark.parametrize("rounds", ["0", "-1"])
def test_fewer_than_one_round_is_refused(rounds: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert peers.main(["--quick", "--rounds", rounds]) == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err
