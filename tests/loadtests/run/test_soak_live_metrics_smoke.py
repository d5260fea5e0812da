"""``python -m loadtests soak --live-metrics-port``: the option reaches the soak's Locust, which serves
while the soak goes; every frame is counted though the soak keeps a tenth of ok streams' frames."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from loadtests.judge.summary import Summary
from loadtests.record.run_dir import RunDir
from tests.loadtests.live_scrape import LIVE_LINE, scrape, scrape_until
from tests.loadtests.locust_run import LiveLocust, soak_command

pytestmark = [pytest.mark.smoke, pytest.mark.soak]


def test_a_soak_serves_its_figures_while_it_goes(tmp_path: Path) -> None:
    args = ("--users", "4", "--duration", "20s", "--live-metrics-port", "0", "--live-metrics-linger", "120")
    with LiveLocust.of(soak_command(tmp_path, *args)) as soak:
        url = soak.wait_for(LIVE_LINE, timeout=120)[1]
        run_dir = Path(soak.wait_for(r"^run directory: (.+)$")[1])
        during = scrape_until(url, lambda found: found.total("sse_soak_requests_total") > 0)
        assert not soak.matching(r"^verdict: ")  # served mid-soak, before any verdict
        assert [labels["run_dir"] for labels in during.labels_of("sse_soak_run_info")] == [str(run_dir)]
        assert {labels["scenario"] for labels in during.labels_of("sse_soak_run_info")} == {"soak"}
        # the Locust run's gate lines, said once it is judged; it lingers for this scrape, and the soak
        # waits for it before it judges on its own
        soak.wait_for(r"^gate (PASS|FAIL|UNJUDGED) requests_completed", timeout=180)
        final = scrape(url)
        assert soak.wait(180) in (0, 1, 3), soak.output[-3000:]
    # the child judging the gates so far is no part of the harness's memory
    memory = next(gate for gate in Summary.read(RunDir(run_dir).summary).gates if gate.name == "memory_growth")
    assert memory.passed, memory.detail
    requests = pd.read_parquet(run_dir / "requests.parquet")
    frames = pd.read_parquet(run_dir / "frames.parquet")
    assert final.total("sse_soak_requests_total") == len(requests)
    keepalives = final.total("sse_soak_frames_total", kind="keepalive")
    assert keepalives == requests["keepalive_frames"].fillna(0).sum() > 0
    assert keepalives >= (frames["kind"] == "keepalive").sum()  # frames.parquet keeps a sample of ok streams
