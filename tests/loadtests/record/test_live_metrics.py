"""The live metrics count what the run records, batch by batch, and serve it on a native socket: every
frame received (kept or not by the frame sampling), token gaps within a stream only, open streams per
worker, each batch once; one test's series only; a port that cannot be bound is one usage error."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadtests.declare.options import check_value
from loadtests.errors import UsageError
from loadtests.record import parts_writer
from loadtests.record.live_metrics import (
    FAILING,
    NOT_JUDGED,
    PASSING,
    GateWatch,
    LiveFigures,
    LiveMetricsServer,
    RunLabels,
)
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import Recorder
from tests.loadtests.live_batches import LABELS, batch

pytestmark = pytest.mark.fast


def samples(figures: LiveFigures) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the figures' exposition as it is served, read by prometheus_client's parser,
    by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(_exposition(figures)):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _exposition(figures: LiveFigures) -> str:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from loadtests.record.live_metrics import _Collector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(figures))
    return generate_latest(registry).decode()


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"scenario": "mixed", **labels}.items())))
    return found.get(key, 0.0)


def test_a_batch_counts_requests_by_route_and_outcome_and_frames_by_kind_as_the_frame_records_have_them() -> None:
    figures = LiveFigures()
    figures.begin(LABELS)
    taken = batch()
    kinds = taken["frames"]["kind"]
    figures.observe_batch(taken)
    found = samples(figures)
    assert value(found, "sse_soak_requests_total", worker="local", route="chat", outcome="ok") == 2
    assert value(found, "sse_soak_requests_total", worker="local", route="completions", outcome="inband_error") == 1
    assert value(found, "sse_soak_requests_total", worker="local", route="chat", outcome="protocol_error") == 1
    assert value(found, "sse_soak_inband_errors_total", worker="local", route="completions") == 1
    assert value(found, "sse_soak_protocol_errors_total", worker="local", route="chat") == 1
    for kind in ("data", "keepalive", "done"):
        assert value(found, "sse_soak_frames_total", worker="local", kind=kind) == kinds.count(kind), kind
    assert value(found, "sse_soak_ttft_seconds_count", worker="local", route="chat") == 2
    assert value(found, "sse_soak_harness_lag_seconds_count", worker="local") == 3
    assert value(found, "sse_soak_harness_lag_seconds_bucket", worker="local", le="0.0005") == 1
    assert value(found, "sse_soak_harness_lag_seconds_bucket", worker="local", le="0.05") == 3
    info = [dict(labels) for (name, labels), one in found.items() if name == "sse_soak_run_info" and one == 1]
    assert info == [{"scenario": "mixed", "server": LABELS.server, "proxy": "none", "run_dir": LABELS.run_dir}]
    assert value(found, "sse_soak_keep_alive_interval_seconds") == 0.25


def test_an_ok_stream_whose_frames_were_not_kept_is_counted_from_its_row_every_frame_received() -> None:
    kept, sampled = LiveFigures(), LiveFigures()
    for figures, keep in ((kept, True), (sampled, False)):
        figures.begin(LABELS)
        figures.observe_batch(batch(keep_ok_frames=keep))
    everything, some = samples(kept), samples(sampled)
    for kind in ("data", "keepalive", "done"):
        name = "sse_soak_frames_total"
        assert value(everything, name, worker="local", kind=kind) == value(some, name, worker="local", kind=kind)
    # the gap histograms see only the frame records kept
    gaps = "sse_soak_frame_gap_seconds_count"
    assert value(some, gaps, worker="local", kind="any") < value(everything, gaps, worker="local", kind="any")


def test_token_gaps_are_within_a_stream_between_its_data_frames_and_any_gap_is_every_frames() -> None:
    figures = LiveFigures()
    figures.begin(LABELS)
    taken = batch()
    figures.observe_batch(taken)
    found = samples(figures)
    frames = taken["frames"]
    any_count = value(found, "sse_soak_frame_gap_seconds_count", worker="local", kind="any")
    assert any_count == len(frames["kind"])
    assert value(found, "sse_soak_frame_gap_seconds_sum", worker="local", kind="any") == pytest.approx(
        sum(frames["gap_s"])
    )
    # a1: 4 tokens (3 gaps), a2: 3 tokens (2), b1: 1 token, c1: 1 undecodable data frame: 5 gaps of 0.1 s,
    # none across two streams
    assert value(found, "sse_soak_frame_gap_seconds_count", worker="local", kind="data") == 5
    assert value(found, "sse_soak_frame_gap_seconds_sum", worker="local", kind="data") == pytest.approx(0.5)
    assert value(found, "sse_soak_frame_gap_seconds_bucket", worker="local", kind="data", le="0.05") == 0
    assert value(found, "sse_soak_frame_gap_seconds_bucket", worker="local", kind="data", le="0.1") == 5


def test_open_streams_are_each_workers_started_requests_less_its_rows() -> None:
    figures = LiveFigures()
    figures.begin(LABELS)
    figures.observe_batch(batch(started=7, worker="worker-0"))  # 4 rows
    figures.observe_batch({**batch(started=4, worker="worker-1"), "rows": []})
    found = samples(figures)
    assert value(found, "sse_soak_open_streams", worker="worker-0") == 3
    assert value(found, "sse_soak_open_streams", worker="worker-1") == 4
    assert value(found, "sse_soak_requests_total", worker="local", route="chat", outcome="ok") == 2  # rows' worker


def test_a_new_test_starts_from_zero_with_its_own_labels_and_no_series_of_the_last() -> None:
    figures = LiveFigures()
    figures.begin(LABELS)
    figures.observe_batch(batch())
    figures.set_gates({"requests_completed": PASSING})
    figures.begin(RunLabels("mixed", "bundled", "nginx", "/reports/mixed-2"))
    found = samples(figures)
    assert [key for key in found if "_total" in key[0] or "gate" in key[0]] == []
    assert [dict(key[1])["run_dir"] for key in found if key[0] == "sse_soak_run_info"] == ["/reports/mixed-2"]
    assert not [key for key in found if key[0] == "sse_soak_keep_alive_interval_seconds"]
    figures.set_keep_alive_interval(5.0)  # inferred by a judgement so far
    assert value(samples(figures), "sse_soak_keep_alive_interval_seconds") == 5.0


def test_a_batch_is_counted_once_when_the_disk_refuses_it_and_its_write_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = LiveFigures()
    figures.begin(LABELS)
    writer = RunWriter(tmp_path / "run", figures.observe_batch)
    real_write = parts_writer.write_part
    refusals = iter([OSError(28, "No space left on device")])

    def full_once(table: Any, path: Path) -> None:
        refusal = next(refusals, None)
        if refusal is not None:
            raise refusal
        real_write(table, path)

    monkeypatch.setattr(parts_writer, "write_part", full_once)
    writer.write_batch(batch())
    assert writer.rows_pending == 4
    writer.write_batch({**Recorder().take_batch(), "worker": "local"})  # the retry writes the first batch
    assert writer.rows_written == 4 and writer.rows_pending == 0
    assert value(samples(figures), "sse_soak_requests_total", worker="local", route="chat", outcome="ok") == 2


def test_the_server_answers_get_metrics_and_nothing_else() -> None:
    server = LiveMetricsServer.open("127.0.0.1", 0)
    try:
        server.figures.begin(LABELS)
        server.figures.observe_batch(batch())
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with httpx.Client(timeout=10, trust_env=False) as client:
            answer = client.get(server.url)
            assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
            names = {family.name for family in text_string_to_metric_families(answer.text)}
            assert {"sse_soak_requests", "sse_soak_frames", "sse_soak_gate_state", "sse_soak_run_info"} <= names
            assert client.get(server.url.replace("/metrics", "/")).status_code == 404
            assert client.post(server.url).status_code == 405
        assert server.sent_generation == server.generated == 1
    finally:
        server.close()


def test_a_port_that_cannot_be_bound_is_one_usage_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"^--live-metrics-port {port}: cannot listen on 127.0.0.1 port {port} "):
            LiveMetricsServer.open("127.0.0.1", port)


@pytest.mark.parametrize(
    ("name", "given", "problem"),
    [
        ("live_metrics_port", "70000", "expected a port number from 0 to 65535"),
        ("live_metrics_port", "-1", "expected a port number from 0 to 65535"),
        ("live_metrics_bind", "localhost", "must be an IP address"),
    ],
)
def test_the_options_refuse_what_cannot_be_served(name: str, given: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_value(name, given)


def test_the_wildcard_is_an_address_to_serve_on() -> None:
    assert check_value("live_metrics_bind", "0.0.0.0") == "0.0.0.0"
    assert check_value("live_metrics_port", "0") == 0


def test_gate_states_are_set_by_the_watch_and_none_after_it_stopped() -> None:
    figures = LiveFigures()
    figures.begin(LABELS)
    second_call, go_on = threading.Event(), threading.Event()
    calls = 0

    def judge() -> tuple[dict[str, int], float | None]:
        nonlocal calls
        calls += 1
        if calls == 2:  # stopped while this judgement is under way
            second_call.set()
            go_on.wait(30)
        return {"requests_completed": PASSING, "no_http_500": FAILING if calls == 1 else PASSING}, 5.0

    watch = GateWatch(figures, judge, interval=0.01)
    assert second_call.wait(30), "the watch judged less than twice"
    found = samples(figures)
    assert value(found, "sse_soak_gate_state", gate="no_http_500") == FAILING  # the first judgement's
    assert value(found, "sse_soak_keep_alive_interval_seconds") == 0.25  # told: never replaced by a judgement
    watch.stop()
    figures.set_gates({"requests_completed": NOT_JUDGED})  # the verdict's states
    go_on.set()
    assert watch.join(30)
    found = samples(figures)
    assert value(found, "sse_soak_gate_state", gate="requests_completed") == NOT_JUDGED
    assert ("sse_soak_gate_state", (("gate", "no_http_500"), ("scenario", "mixed"))) not in found
    assert calls == 2
