"""summary.json's sections as typed records: a file written before they were typed reads into them
and is written back the same, key for key and in the same order; an older file's missing keys read as
defaults and keys this version does not know are kept where they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtests.judge.summary import (
    Arrival,
    Causes,
    HarnessLag,
    KeepalivePerStream,
    ServerMetrics,
    Soak,
    Summary,
)
from loadtests.record.run_dir import RunDir

pytestmark = pytest.mark.fast

CAUSES = {
    "status": {"200": 2, "400": 1, "500": 1},
    "proxy_timeouts_before_headers": 0,
    "cut_after_headers": 0,
    "proxy_timeouts": {
        "read_timeout_s": None,
        "window_s": None,
        "before_headers": 0,
        "before_headers_statuses": {},
        "after_headers": 0,
        "other_cuts": 0,
        "unseen_cuts": 0,
        "silence_s": None,
        "named": [],
        "run_proxy": None,
        "line": "0 proxy timeouts before the headers, 0 streams cut after them",
    },
    "keepalive_withheld": None,
    "protocol_errors": {},
    "harness_errors": {},
    "malformed_usage": 0,
    "keepalive_vs_silence": [
        {"silence_s": "0.5-1", "streams": 2, "keepalive_mean": 1.0, "keepalive_min": 1, "keepalive_max": 1}
    ],
}
NO_SPREAD = {"p50": None, "p99": None, "max": None}
WINDOW = {
    "window": 1,
    "start_s": 0.0,
    "end_s": 0.08,
    "verdict": "PASS",
    "failed": None,
    "unjudged": None,
    "requests": 4,
    "ok": 4,
    "http_500": 0,
    "inband_500": 0,
    "cut": 0,
    "ttft_p50_s": None,
    "ttft_p95_s": None,
    "max_gap_p99_s": 0.79,
    "keepalive_per_silent_s": 0.6329113924050632,
    "harness_rss_mb": 10.0,
    "server_rss_mb": 20.0,
}
WRITTEN_BEFORE: dict[str, Any] = {  # every section, as summary.json held it before the sections were typed
    "scenario": "soak",
    "settings": {"proxy": "none", "open_loop": {"rate": 2.0, "arrival": "poisson", "seed": 1, "max_in_flight": 10}},
    "frame_sample_rate": 1.0,
    "requests": 4,
    "outcomes": {"ok": 4},
    "http_500": 0,
    "inband_500": 0,
    "keepalive_frames": 2,
    "causes": CAUSES,
    "latency": {"ttft_s": {"count": 0, "p50": None, "p90": None, "p95": None, "p99": None, "max": None}},
    "keepalive_per_stream": {
        "streams": 2,
        "mean": 1.0,
        "max": 1,
        "counted_on": "raw streams only (the openai SDK cannot see comments)",
    },
    "harness_lag_ms": {
        "limit_ms": 5.0,
        "samples": 0,
        "p50": None,
        "p99": None,
        "max": None,
        "seconds_above_limit": 0.0,
        "by_worker": {},
    },
    "arrival": {
        "rate": 2.0,
        "arrival": "poisson",
        "seed": 1,
        "max_in_flight": 10,
        "scheduled": 0,
        "sent": 0,
        "not_sent": 0,
        "span_s": 0.0,
        "rate_achieved": None,
        "late": 0,
        "start_lateness_s": NO_SPREAD,
        "ttft_from_schedule_s": NO_SPREAD,
        "ttft_from_send_s": NO_SPREAD,
    },
    "server_metrics": {
        "available": True,
        "scrapes": 3,
        "names": {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting"},
        "running": {"mean": 1.5, "p95": 2.0, "max": 2.0},
        "waiting": {"mean": 0.0, "p95": 0.0, "max": 0.0},
        "kv_cache_usage": None,
        "prompt_tokens": 40.0,
        "generation_tokens": None,
    },
    "gate_specs": [],
    "gates": [
        {
            "name": "requests_completed",
            "passed": True,
            "detail": "4 requests finished",
            "skipped": False,
            "unjudged_rows": 0,
            "judged_rows": None,
        }
    ],
    "soak": {
        "partial": False,
        "duration_s": 30.0,
        "limits": {
            "windows": 10,
            "max_memory_growth": 0.1,
            "steady_share": 0.75,
            "max_latency_drift": 0.5,
            "min_latency_drift_s": 0.05,
        },
        "windows": [WINDOW],
    },
    "point": ["requests_completed"],
    "ended": "run time of 30 s reached",
    "interrupted": None,
    "gates_passed": True,
    "passed": True,
    "verdict": "PASS",
}


def text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def test_a_summary_written_before_the_sections_were_typed_reads_typed_and_writes_back_byte_for_byte(
    tmp_path: Path,
) -> None:
    run = RunDir(tmp_path)
    run.summary.write_text(text(WRITTEN_BEFORE))
    summary = Summary.read(run.summary)
    assert isinstance(summary.causes, Causes) and summary.causes.status == {"200": 2, "400": 1, "500": 1}
    assert isinstance(summary.keepalive_per_stream, KeepalivePerStream) and summary.keepalive_per_stream.mean == 1.0
    assert isinstance(summary.harness_lag_ms, HarnessLag) and summary.harness_lag_ms.limit_ms == 5.0
    assert isinstance(summary.arrival, Arrival) and (summary.arrival.rate, summary.arrival.seed) == (2.0, 1)
    assert isinstance(summary.server_metrics, ServerMetrics) and summary.server_metrics.concept("running") == {
        "mean": 1.5,
        "p95": 2.0,
        "max": 2.0,
    }
    assert isinstance(summary.soak, Soak) and not summary.soak.partial and summary.soak.windows == [WINDOW]
    summary.write(run)
    assert run.summary.read_text() == text(WRITTEN_BEFORE)
    assert Summary.read(run.summary) == summary


def test_an_older_sections_missing_keys_read_as_defaults_and_unknown_keys_stay_where_they_were() -> None:
    causes = {"status": {"200": 1}, "from_a_later_version": [1], "cut_after_headers": 2}
    unavailable = {"available": False, "reason": "no /metrics"}
    data = {**WRITTEN_BEFORE, "causes": causes, "keepalive_per_stream": {"mean": None}, "server_metrics": unavailable}
    summary = Summary.from_json(data)
    assert (summary.causes.cut_after_headers, summary.causes.malformed_usage) == (2, 0)
    assert summary.causes.extra == {"from_a_later_version": [1]}
    assert summary.causes_lines()[0] == "causes: 0 proxy 504s before headers, 2 streams cut after headers; " + (
        "statuses {'200': 1}"
    )
    assert (summary.server_metrics is not None, summary.server_metrics and summary.server_metrics.reason) == (
        True,
        "no /metrics",
    )
    written = summary.to_json()
    assert list(written["causes"].items()) == list(causes.items())  # the same keys, in the same order
    assert written["keepalive_per_stream"] == {"mean": None} and written["server_metrics"] == unavailable


def test_a_section_built_here_writes_its_fields_in_order() -> None:
    section = KeepalivePerStream(streams=0)
    assert list(section.to_json()) == ["streams", "mean", "max", "counted_on", "silent_s", "per_silent_s"]
    assert KeepalivePerStream.from_json(section.to_json()) == section
    assert not Soak.from_json({}) and Soak()  # an empty object read is as empty as it was
