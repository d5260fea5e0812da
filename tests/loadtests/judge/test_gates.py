"""Gates over a request table: the figure in each line, and no pass on an empty selection."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from loadtests.judge.gates import (
    GATE_TYPES,
    Expect,
    Gate,
    GateResult,
    KeepAliveCovered,
    NoHarnessErrors,
    NoHttp500,
    NoInband500,
    NoProtocolErrors,
    NoProxyTimeouts,
    OutcomesAsExpected,
    RunTables,
    TruncationHonoured,
    evaluate,
)
from tests.loadtests.tables import raw_stream, table

pytestmark = pytest.mark.fast


def test_no_http_500_counts_them() -> None:
    result = NoHttp500().evaluate(table({"status": 200, "outcome": "ok"}, {"status": 500, "outcome": "http_5xx"}))
    assert not result.passed and result.detail.startswith("1 HTTP 500 of 2 requests (e.g. r1)")


def test_a_502_is_not_a_500() -> None:
    assert NoHttp500().evaluate(table({"status": 502, "outcome": "http_5xx"})).passed


def test_no_inband_500_needs_the_500_code() -> None:
    rows = table(
        {"status": 200, "outcome": "inband_error", "error_code": "500"},
        {"status": 200, "outcome": "inband_error", "error_code": "400"},
    )
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
    assert result.unjudged and not result.passed and result.detail.startswith("0/0")  # never a PASS on 0/0


def test_expect_fails_on_a_violation_and_names_what_happened_instead() -> None:
    gate = Expect("overlong_rejected", where="expected == 'rejected'", require="status == 400")
    rows = table(
        {"expected": "rejected", "status": 400, "outcome": "rejected"},
        {"expected": "rejected", "status": 500, "outcome": "http_5xx"},
    )
    result = gate.evaluate(rows)
    assert not result.passed
    assert "1/2 rows" in result.detail and "1 http_5xx/500" in result.detail and "r1" in result.detail


def test_expect_never_passes_on_too_few_rows() -> None:
    gate = Expect("g", where="expected == 'rejected'", require="status == 400", min_rows=2)
    result = gate.evaluate(table({"expected": "rejected", "status": 400, "outcome": "rejected"}))
    assert not result.passed and "needs at least 2" in result.detail


def test_stopped_streams_are_left_out_of_every_gate() -> None:
    rows = table(
        {"status": 200, "outcome": "stopped", "truncate": 1000, "usage_prompt_tokens": 5},
        {"status": 200, "outcome": "ok"},
    )
    results = evaluate(
        RunTables(rows), [Expect("all_ok", where="status == 200", require="outcome == 'ok'", min_rows=0)]
    )
    assert all(result.passed for result in results if result.name != "truncation_honoured"), [r.line() for r in results]
    assert results[0].line() == "gate PASS requests_completed: 1 requests finished"
    assert next(r for r in results if r.name == "truncation_honoured").unjudged  # its only row was stopped


def test_evaluate_runs_always_on_gates_first() -> None:
    names = [
        r.name
        for r in evaluate(RunTables(table({"status": 200, "outcome": "ok"})), [Expect("x", "status == 200", "done")])
    ]
    assert names == [
        "requests_completed",
        "outcomes_as_expected",
        "no_http_500",
        "no_inband_500",
        "no_protocol_errors",
        "no_harness_errors",
        "truncation_honoured",
        "x",
    ]


def test_an_empty_run_is_unjudged_and_nothing_passes_vacuously() -> None:
    only_stopped = table({"status": 200, "outcome": "stopped"})
    results = evaluate(RunTables(only_stopped), [Expect("x", None, "outcome == 'ok'")])
    lines = [result.line() for result in results]
    assert lines[0] == "gate UNJUDGED requests_completed: no request finished: nothing was judged"
    assert all(line.startswith("gate UNJUDGED ") and line.endswith(": no requests to judge") for line in lines[1:-1])
    assert lines[-1].startswith("gate UNJUDGED x: 0/0 rows") and not any(result.passed for result in results)


def test_outcomes_as_expected_names_what_came_instead() -> None:
    rows = table(
        {"status": 200, "outcome": "ok"},
        {"status": 400, "outcome": "rejected", "expected": "rejected"},
        {"status": 200, "outcome": "cut"},
        {"status": 200, "outcome": "cut"},
        {"status": 200, "outcome": "ok", "expected": "rejected"},
    )
    result = OutcomesAsExpected().evaluate(rows)
    assert not result.passed
    assert (
        result.detail == "2/5 requests ended as their spec expects; instead: 2 cut (expected ok), "
        "1 ok (expected rejected) (e.g. r2, r3, r4)"
    )
    assert OutcomesAsExpected().evaluate(rows.iloc[:2]).passed


def test_protocol_and_harness_errors_fail_with_their_messages_counted() -> None:
    rows = table(
        {"status": 200, "outcome": "protocol_error", "error_message": "data frame 3 is not JSON: 'x'"},
        {"status": 200, "outcome": "protocol_error", "error_message": "data frame 3 is not JSON: 'x'"},
        {"status": 200, "outcome": "protocol_error", "error_message": "line longer than 1 MiB"},
        {"status": None, "outcome": "harness_error", "error_message": "KeyError: 'model'"},
        {"status": 200, "outcome": "ok"},
    )
    protocol = NoProtocolErrors().evaluate(rows)
    assert not protocol.passed
    assert protocol.detail.startswith(
        "3 protocol errors of 5 requests: 2x data frame 3 is not JSON: 'x'; 1x line longer than 1 MiB (e.g. r0, r1, r2)"
    )
    harness = NoHarnessErrors().evaluate(rows)
    assert (
        not harness.passed
        and harness.detail == "1 requests failed inside sse-soak itself: 1x KeyError: 'model' (e.g. r3)"
    )
    assert NoProtocolErrors().evaluate(rows.iloc[4:]).passed and NoHarnessErrors().evaluate(rows.iloc[4:]).passed


def test_only_cuts_silent_for_the_read_timeout_are_proxy_timeouts() -> None:
    gate = NoProxyTimeouts(read_timeout=2.0, keep_alive_interval=None)
    server_drop = {"status": 200, "outcome": "cut", "max_gap_s": 0.3}
    proxy_cut = {"status": 200, "outcome": "cut", "max_gap_s": 2.01}
    untested = gate.evaluate(table(server_drop))  # no stream went silent for the timeout: nothing tested it
    assert (
        untested.unjudged and "1 other cuts after 0.30 s of silence, outside it: not read timeouts" in untested.detail
    )
    assert "nothing tested it" in untested.detail
    silent = {"status": 200, "outcome": "ok", "silence_before_first_token_s": 4.0}
    tested = gate.evaluate(table(server_drop, silent))
    assert tested.passed and tested.detail.endswith("1 streams silent over the read timeout")
    result = gate.evaluate(table(server_drop, proxy_cut, {"status": 504, "outcome": "gateway_timeout", "ttfb_s": 2.0}))
    assert not result.passed
    assert result.detail.startswith(
        "1 proxy timeouts before the headers (1x 504), 1 streams cut after them, after 2.00-2.01 s of silence "
        "(cuts and 502s count after 1.70-2.30 s for a 2 s read timeout); 1 other cuts after 0.30 s of silence"
    )
    assert "server keep-alive of unknown interval (a keep-alive interval below" in result.detail
    off = NoProxyTimeouts(read_timeout=2.0, keep_alive_interval=0.0).evaluate(table(proxy_cut))
    assert "server keep-alive off (a keep-alive interval below the read timeout" in off.detail
    too_slow = NoProxyTimeouts(read_timeout=2.0, keep_alive_interval=3.0).evaluate(table(proxy_cut))
    assert "server keep-alive every 3 s (a keep-alive interval below" in too_slow.detail
    working = NoProxyTimeouts(read_timeout=2.0, keep_alive_interval=0.5).evaluate(table(proxy_cut))
    assert "with server keep-alive every 0.5 s" in working.detail
    assert "would keep these streams alive" not in working.detail


def test_an_expect_naming_no_column_is_refused_in_one_line_naming_it_and_the_gate() -> None:
    typo = Expect("truncated_ok", where="truncate_tokens == 1", require="outcome == 'ok'")
    with pytest.raises(ValueError) as refused:
        typo.check()
    assert str(refused.value) == (
        "gate truncated_ok: where names truncate_tokens, which is no column of the request table "
        "(did you mean truncate_prompt_tokens?): truncate_tokens == 1"
    )
    with pytest.raises(ValueError, match=r"^gate g: require is not a valid query .*: outcome ==$"):
        Expect("g", where=None, require="outcome ==").check()


def test_expects_over_real_columns_pass_the_check() -> None:
    Expect("fits", where="truncate_prompt_tokens.isna() and expected == 'ok'", require="outcome == 'ok'").check()
    Expect("gaps", where="client == 'raw' and status == 200", require="max_gap_s <= 0.75").check()


def test_no_proxy_timeouts_declared_bare_reads_the_run_settings_and_is_stored_concrete() -> None:
    settings = SimpleNamespace(proxy_read_timeout=2.0, keep_alive_interval=0.5, proxy="embedded")
    gate = NoProxyTimeouts().for_run(settings)
    assert gate == NoProxyTimeouts(2.0, 0.5, proxy="embedded") and gate.spec()["proxy"] == "embedded"
    assert Gate.from_spec(gate.spec()) == gate
    explicit = NoProxyTimeouts(10.0, None)
    assert explicit.for_run(settings) is explicit  # figures given are kept
    assert Expect("e", None, "outcome == 'ok'").for_run(settings) == Expect("e", None, "outcome == 'ok'")
    with pytest.raises(ValueError, match="for_run"):
        NoProxyTimeouts().evaluate(table({"status": 200, "outcome": "ok"}))
    with pytest.raises(TypeError, match="for_run"):
        NoProxyTimeouts().spec()


@dataclass(frozen=True)
class FewRequests(Gate):
    """A gate of the test's own: defining it is all it takes to be stored and loaded."""

    most: int
    name: str = "few_requests"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        return GateResult(self.name, len(requests) <= self.most, f"{len(requests)} requests")


def test_a_gate_class_joins_the_registry_and_round_trips_through_its_spec() -> None:
    assert GATE_TYPES["FewRequests"] is FewRequests
    gate = FewRequests(3)
    assert gate.spec() == {"type": "FewRequests", "most": 3, "name": "few_requests"}
    assert Gate.from_spec(gate.spec()) == gate
    assert gate.for_run(SimpleNamespace()) is gate
    gate.check()  # the defaults: nothing to fill in
    rows = table({"status": 200, "outcome": "ok"})
    assert evaluate(RunTables(rows), [gate])[-1] == GateResult("few_requests", True, "1 requests")


def test_a_spec_of_an_unknown_type_or_a_base_class_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^unknown gate type 'Nope'; known: RequestsCompleted, "):
        Gate.from_spec({"type": "Nope"})
    with pytest.raises(TypeError, match="few"):
        Gate.from_spec({"type": "FewRequests", "few": 3})
    with pytest.raises(TypeError):
        Gate()  # type: ignore[abstract]


def test_keepalive_covered_wants_one_frame_per_interval_and_tolerance_of_silence() -> None:
    gate = KeepAliveCovered(0.25)  # tolerance 0.125 s: one keep-alive per 0.375 s of silence
    covered = table(raw_stream(0.3, 0), raw_stream(0.8, 2), raw_stream(2.0, 5), raw_stream(5.0, None))
    result = gate.evaluate(covered)
    assert result.passed and result.detail.startswith("2/2 raw streams silent over 0.38 s")
    starved = gate.evaluate(table(raw_stream(0.8, 2), raw_stream(2.0, 4)))  # 2.0 s implies 5
    assert not starved.passed
    assert "r1 was silent 2.00 s with 4 keep-alive frames, 5 implied" in starved.detail


def test_keepalive_covered_fails_a_server_without_keep_alive() -> None:
    """The negative control: long silences, no comment at all."""
    result = KeepAliveCovered(1.0).evaluate(table(raw_stream(3.5, 0), raw_stream(0.5, 0)))
    assert not result.passed and result.detail.startswith("0/1 raw streams silent over 1.20 s")


def test_keepalive_covered_ignores_what_it_cannot_judge() -> None:
    """SDK rows (no comment counts), rejected requests and short silences judge nothing."""
    rows = table(raw_stream(9.0, None), {"status": 400, "outcome": "rejected"}, raw_stream(0.1, 0))
    result = KeepAliveCovered(0.5).evaluate(rows)
    assert result.unjudged and not result.passed and result.detail.startswith("0/0 raw streams")


def from_send(silence: float, keepalives: int, headers_at: float) -> dict[str, Any]:
    """A raw 200 stream whose first token came ``silence`` s after its send, headers ``headers_at`` s after it."""
    return {
        "status": 200,
        "outcome": "ok",
        "silence_before_first_token_s": silence - headers_at,
        "silence_from_send_s": silence,
        "keepalive_frames": keepalives,
    }


def test_keepalive_covered_counts_the_silence_from_the_send_so_held_headers_cannot_hide_it() -> None:
    """A gateway that holds the headers until the first token and strips comments: the silence from
    the headers is nil, the one from the send is not; the line names the likely cause."""
    held = table(from_send(3.0, 0, headers_at=2.99), from_send(2.5, 0, headers_at=2.5))
    result = KeepAliveCovered(1.0).evaluate(held)
    assert not result.passed and result.detail.startswith("0/2 raw streams silent over 1.20 s")
    assert result.detail.endswith(
        "sse-soak: 2 raw streams were silent over 1.20 s and none got a keep-alive comment (2 got their headers only "
        "with their first token): an intermediary that "
        "strips SSE comments or holds the response headers until the first token (a gateway such as LiteLLM) may "
        "stand between the harness and the server, or the server's keep-alive is off"
    )


def test_keepalive_covered_passes_a_server_whose_timer_starts_at_its_headers() -> None:
    """vLLM and the bundled server send the headers ~0.1 s after the send and a comment each interval
    after them: just before each next comment, the silence from the send is still covered."""
    gate = KeepAliveCovered(0.5)
    rows = [from_send(0.1 + k * 0.5 + 0.49, k, headers_at=0.1) for k in range(6)]
    result = gate.evaluate(table(*rows))
    assert result.passed and result.detail.startswith("5/5 raw streams"), result.detail
    assert "none got a keep-alive" not in result.detail


def test_keepalive_covered_without_an_interval_is_unjudged_and_says_how_to_give_it() -> None:
    result = KeepAliveCovered(None).evaluate(table(from_send(5.0, 0, headers_at=0.1)))
    assert result.unjudged and not result.passed  # unjudged: no verdict on the server
    assert result.line() == (
        "gate UNJUDGED keepalive_covered: the server's keep-alive interval is unknown and no stream showed it: pass "
        "--keep-alive-interval S (the server's --sse-keep-alive-interval) to judge keep-alive"
    )


def test_keepalive_covered_stores_its_source_only_when_it_has_one() -> None:
    assert KeepAliveCovered(0.5).spec() == {"type": "KeepAliveCovered", "interval": 0.5, "name": "keepalive_covered"}
    inferred = KeepAliveCovered(1.0, source="inferred from the comments of 3 streams")
    assert Gate.from_spec(inferred.spec()) == inferred
    assert "(keep-alive every 1 s + 0.20 s, the interval inferred from the comments of 3 streams)" in (
        inferred.evaluate(table(from_send(1.5, 1, headers_at=0.1))).detail
    )


@pytest.mark.fast
def test_a_gate_line_shows_the_servers_control_characters_escaped() -> None:
    detail = "1x content-type text/html\x9b2J\x1b]0;x\x07, not text/event-stream"
    result = GateResult("no_protocol_errors", False, detail)
    assert result.line() == (
        "gate FAIL no_protocol_errors: 1x content-type text/html\\x9b2J\\x1b]0;x\\x07, not text/event-stream"
    )
