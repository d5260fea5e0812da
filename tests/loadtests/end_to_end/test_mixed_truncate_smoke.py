"""``locust -f scenarios/mixed_truncate.py`` for a few seconds, asserted on exit code and summary."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.load.pacing import paced_answers
from loadtests.record.lag import while_streams_open
from tests.conftest import StartServer
from tests.loadtests.locust_run import ROOT, assert_the_verdict_comes_last, run_locust

pytestmark = pytest.mark.smoke


def test_mixed_truncate_passes_on_the_bundled_server(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    summary = run.summary
    assert summary["passed"] and all(gate["passed"] for gate in summary["gates"])
    assert summary["scenario"] == "mixed_truncate"
    assert "harness_kept_up" not in [gate["name"] for gate in summary["gates"]]  # off in the suite (conftest)
    # judged on the samples while streams were open: not the setup before the first, nor the end
    assert 0 < summary["harness_lag_ms"]["samples"] == len(while_streams_open(run.lag, run.requests)) < len(run.lag)
    assert "HTTP Request:" not in run.output  # httpx's line per request stays quiet (loop_hygiene)
    block = assert_the_verdict_comes_last(run.output)  # where people look: after Locust's final tables
    assert block[-2:] == ["verdict: PASS", f"report: {run.run_dir}"]
    assert [line for line in block if line.startswith("gate ")] == [
        f"gate PASS {g['name']}: {g['detail']}" for g in summary["gates"]
    ]
    assert summary["settings"]["keep_alive_interval"] == 0.25  # from the profile's --sse-keep-alive-interval
    covered = run.gate("keepalive_covered")  # the main job exercises keep-alive: queueing and prefill are silent
    assert covered["passed"] and summary["keepalive_frames"] > 0, covered["detail"]
    assert int(covered["detail"].split("/")[0]) > 0  # streams silent longer than the interval, each covered
    assert summary["settings"]["prompt_sizing"] == "exact" and summary["settings"]["max_line_bytes"] == 1 << 20
    assert summary["requests"] == sum(summary["outcomes"].values()) == len(run.requests)
    assert summary["outcomes"]["ok"] > 0 and summary["outcomes"]["rejected"] > 0
    assert summary["http_500"] == summary["inband_500"] == 0
    requests = run.requests
    # a healthy run is not paced: its instant 400s are what their specs expect (loadtests.load.pacing)
    assert paced_answers(requests) == {} and "error answers came back at once" not in run.output
    assert "while the run went" not in run.output  # no service of the run died
    assert set(requests["client"]) == {"raw", "openai"}
    assert set(requests["worker"]) == {"local"}  # a standalone run: no worker index
    assert set(requests["route"]) == {"completions", "chat"}
    truncated_ok = requests[(requests["truncate_prompt_tokens"] == 1000) & (requests["outcome"] == "ok")]
    assert len(truncated_ok) > 0 and (truncated_ok["usage_prompt_tokens"] == 1000).all()
    assert "target server: http://127.0.0.1:" in run.output
    frames = run.frames
    raw_ok = requests[(requests["client"] == "raw") & (requests["outcome"] == "ok")]
    per_request = frames.groupby("request_id").size()
    assert (per_request[raw_ok["request_id"]].to_numpy() == (raw_ok["data_frames"] + raw_ok["keepalive_frames"])).all()


def test_a_harness_that_did_not_keep_up_fails_the_run_and_says_why(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--harness-lag-limit-ms", "0.001", seconds=3)
    assert run.returncode == 1, run.output[-3000:]
    gate = run.gate("harness_kept_up")
    assert not gate["passed"] and "not trustworthy" in gate["detail"] and "--processes" in gate["detail"]
    assert "gate FAIL harness_kept_up: p99 lag" in run.output
    summary = run.summary
    assert summary["harness_lag_ms"]["limit_ms"] == 0.001 and 0 < summary["harness_lag_ms"]["samples"] < len(run.lag)
    assert summary["gate_specs"][-1] == {"type": "HarnessKeptUp", "limit_ms": 0.001, "name": "harness_kept_up"}
    assert "Harness lag" in (run.checked_run_dir / "report.html").read_text()
    # every other gate judged the server, which was fine
    assert [g["name"] for g in summary["gates"] if not g["passed"]] == ["harness_kept_up"]


@pytest.mark.parametrize(("fault", "counted"), [("server_error", "http_500"), ("inband_error", "inband_500")])
def test_injected_500s_fail_the_run_and_are_counted(tmp_path: Path, fault: str, counted: str) -> None:
    run = run_locust("mixed_truncate", tmp_path, f"--server-args=--failure-injection-rate 30 --failure-types {fault}")
    assert run.returncode != 0
    summary = run.summary
    assert not summary["passed"]
    requests = run.requests
    if fault == "server_error":
        expected = int((requests["status"] == 500).sum())
        assert run.gate("no_http_500")["passed"] is False
    else:
        expected = int(((requests["outcome"] == "inband_error") & (requests["error_code"] == "500")).sum())
        assert run.gate("no_inband_500")["passed"] is False
        assert (requests.loc[requests["outcome"] == "inband_error", "status"] == 200).all()
    assert summary[counted] == expected > 0
    assert f"gate FAIL no_{'http' if fault == 'server_error' else 'inband'}_500: {expected} " in run.output


def test_a_stream_cut_by_the_server_is_cut_not_ok_also_in_locusts_statistics(tmp_path: Path) -> None:
    stats_file = tmp_path / "locust-stats.json"
    server_args = "--server-args=--failure-injection-rate 40 --failure-types disconnect"
    run = run_locust("mixed_truncate", tmp_path, server_args, "--json-file", str(stats_file.with_suffix("")))
    assert run.returncode != 0
    requests = run.requests
    cut = requests[requests["outcome"] == "cut"]
    assert len(cut) == run.summary["outcomes"]["cut"] > 0
    assert (cut["status"] == 200).all() and not cut["done"].any()
    assert (requests.loc[requests["outcome"] == "ok", "done"]).all()
    # Locust saw each finished stream once, at its end, and failed exactly the unexpected outcomes.
    stats = json.loads(stats_file.read_text())
    finished = requests[requests["outcome"] != "stopped"]
    assert sum(entry["num_requests"] for entry in stats) == len(finished)
    assert sum(entry["num_failures"] for entry in stats) == int((finished["outcome"] != finished["expected"]).sum())
    slowest_ms = max(entry["max_response_time"] for entry in stats)
    assert slowest_ms == pytest.approx(finished["duration_s"].max() * 1000, rel=1e-6)


def test_keepalive_comments_in_their_own_packets_are_counted_exactly(tmp_path: Path) -> None:
    """The server flushes each comment on its own (TCP_NODELAY, one write per frame, 50 ms apart);
    the harness must count exactly what the server's trace says it sent, request by request."""
    trace = tmp_path / "trace.jsonl"
    server_args = f"--trace-file {trace} --time-to-first-token 400 --sse-keep-alive-interval 0.05"
    run = run_locust("mixed_truncate", tmp_path, f"--server-args={server_args}", seconds=5)
    assert run.returncode == 0, run.output[-3000:]
    sent = [json.loads(line) for line in trace.read_text().splitlines()]
    sent_keepalives: dict[str, int] = {}
    for line in sent:
        if line["kind"] == "keepalive":
            sent_keepalives[line["request_id"]] = sent_keepalives.get(line["request_id"], 0) + 1
    assert {line["request_id"] for line in sent} <= set(run.requests["request_id"])  # every stream has a row
    raw_ok = run.requests.query("client == 'raw' and outcome == 'ok'")
    assert len(raw_ok) > 0 and raw_ok["keepalive_frames"].sum() > 0
    for row in raw_ok.itertuples():
        assert row.keepalive_frames == sent_keepalives.get(row.request_id, 0), row.request_id
    assert run.judged.keepalive_frames == int(run.requests["keepalive_frames"].sum())


def test_an_external_server_is_used_with_host_and_its_first_model(tmp_path: Path, start_server: StartServer) -> None:
    server = start_server("--model", "external/model", "--max-model-len", "8192")
    run = run_locust("mixed_truncate", tmp_path, "--host", server.url)
    assert run.returncode == 0, run.output[-3000:]
    assert "target server:" not in run.output  # nothing bundled was started
    assert run.judged.passed and run.judged.outcomes["ok"] > 0


def test_help_lists_the_scenario_options_beside_locusts() -> None:
    """``python scenarios/x.py --help``: Locust's own ``-f x --help`` never loads the file (locust #2917)."""
    command = [sys.executable, str(ROOT / "scenarios" / "mixed_truncate.py"), "--help"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--report-dir", "--model", "--client-idle-timeout", "--server-args", "--api-key", "--headless"):
        assert option in result.stdout


def test_a_bundled_server_that_cannot_start_is_one_line_and_nonzero(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--server-args=--max-num-seqs 0")
    assert run.returncode != 0
    assert (
        "sse-soak: the stack did not start: target server exited with 2 before it was ready: "
        "--max-num-seqs must be at least 1" in run.output
    )
    assert "Traceback" not in run.output


def test_the_bundled_server_is_stopped_at_the_end(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, seconds=2)
    match = re.search(r"^target server: http://127\.0\.0\.1:\d+ \(pid (\d+)\)$", run.output, re.MULTILINE)
    assert match, run.output[-2000:]
    pid = int(match[1])
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_a_server_that_wants_an_api_key_gets_it_from_both_clients(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--server-args=--api-key sekrit", "--api-key", "sekrit")
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests
    assert set(requests["client"]) == {"raw", "openai"} and 401 not in set(requests["status"].dropna())
