"""Gates over a request table: the figure in each line, and no pass on an empty selection."""

from __future__ import annotations

from typing import Any

import pandas as pd

from loadtests.gates import Expect, NoHttp500, NoInband500, NoProxyTimeouts, TruncationHonoured, evaluate
from loadtests.outcome import RequestPlan, StreamTracker
from loadtests.recorder import Recorder


def table(*rows: dict[str, Any]) -> pd.DataFrame:
    """A request table with the real columns and dtypes, built through the recorder."""
    recorder = Recorder()
    for index, given in enumerate(rows):
        fields = dict(given)
        plan = RequestPlan(
            f"r{index}",
            "n",
            "completions",
            prompt_tokens=fields.pop("prompt_tokens", 10_000),
            truncate_prompt_tokens=fields.pop("truncate", None),
            expected=fields.pop("expected", "ok"),
        )
        row = StreamTracker(plan, 0.0).finish(1.0)
        for name, value in fields.items():
            setattr(row, name, value)
        recorder.add(row, None)
    return recorder.requests_table()


def test_no_http_500_counts_them() -> None:
    result = NoHttp500().evaluate(table({"status": 200, "outcome": "ok"}, {"status": 500, "outcome": "http_5xx"}))
    assert not result.passed and result.detail.startswith("1 HTTP 500 of 2 requests (e.g. r1)")


def test_a_502_is_not_a_500() -> None:
    assert NoHttp500().evaluate(table({"status": 502, "outcome": "http_5xx"})).passed


def test_no_inband_500_needs_the_500_code() -> None:
    rows = table({"status": 200, "outcome": "inband_error", "error_code": "500"},
                 {"status": 200, "outcome": "inband_error", "error_code": "400"})  # fmt: skip
    result = NoInband500().evaluate(rows)
    assert not result.passed and result.detail.startswith("1 in-band errors with code 500")


def test_truncation_honoured_compares_with_what_was_kept() -> None:
    good = {"status": 200, "outcome": "ok", "truncate": 1000, "usage_prompt_tokens": 1000}
    short_prompt = {"status": 200, "outcome": "ok", "truncate": 1000, "prompt_tokens": 300, "usage_prompt_tokens": 300}
    silently_full = {"status": 200, "outcome": "ok", "truncate": 1000, "usage_prompt_tokens": 10_000}
    assert TruncationHonoured().evaluate(table(good, short_prompt)).passed
    result = TruncationHonoured().evaluate(table(good, silently_full))
    assert not result.passed
    assert "1/2 truncated requests" in result.detail and "r1 asked to keep 1000" in result.detail


def test_truncation_without_usage_is_not_judged() -> None:
    result = TruncationHonoured().evaluate(table({"status": 200, "outcome": "ok", "truncate": 1000}))
    assert result.passed and result.detail.startswith("0/0")


def test_expect_fails_on_a_violation_and_names_what_happened_instead() -> None:
    gate = Expect("overlong_rejected", where="expected == 'rejected'", require="status == 400")
    rows = table({"expected": "rejected", "status": 400, "outcome": "rejected"},
                 {"expected": "rejected", "status": 500, "outcome": "http_5xx"})  # fmt: skip
    result = gate.evaluate(rows)
    assert not result.passed
    assert "1/2 rows" in result.detail and "1 http_5xx/500" in result.detail and "r1" in result.detail


def test_expect_never_passes_on_too_few_rows() -> None:
    gate = Expect("g", where="expected == 'rejected'", require="status == 400", min_rows=2)
    result = gate.evaluate(table({"expected": "rejected", "status": 400, "outcome": "rejected"}))
    assert not result.passed and "needs at least 2" in result.detail


def test_stopped_streams_are_left_out_of_every_gate() -> None:
    rows = table({"status": 200, "outcome": "stopped", "truncate": 1000, "usage_prompt_tokens": 5})
    results = evaluate(rows, [Expect("all_ok", where="status == 200", require="outcome == 'ok'", min_rows=0)])
    assert all(result.passed for result in results)


def test_evaluate_runs_always_on_gates_first() -> None:
    names = [r.name for r in evaluate(table({"status": 200, "outcome": "ok"}), [Expect("x", "status == 200", "done")])]
    assert names == ["no_http_500", "no_inband_500", "truncation_honoured", "x"]


def test_only_cuts_silent_for_the_read_timeout_are_proxy_timeouts() -> None:
    gate = NoProxyTimeouts(read_timeout=2.0, keep_alive_interval=None)
    server_drop = {"status": 200, "outcome": "cut", "max_gap_s": 0.3}
    proxy_cut = {"status": 200, "outcome": "cut", "max_gap_s": 2.01}
    assert gate.evaluate(table(server_drop)).passed
    assert "1 other cuts after shorter silences" in gate.evaluate(table(server_drop)).detail
    result = gate.evaluate(table(server_drop, proxy_cut, {"status": 504, "outcome": "http_5xx", "ttfb_s": 2.0}))
    assert not result.passed
    assert result.detail.startswith("1 proxy 504s before the headers, 1 streams cut after them")
    assert "server keep-alive off (a keep-alive interval below the read timeout" in result.detail
