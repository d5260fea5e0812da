"""Proxy and gateway timeouts by one rule: the figures measured behind real proxies
(docs/proxies.md) as cases, and the ``causes:`` line and the gates saying the same."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pandas as pd
import pytest

from loadtests.client.outcome import RequestPlan, RequestRow, StreamTracker
from loadtests.client.sse import KEEP_ALIVE_TEXT, Frame
from loadtests.judge import causes, gates
from loadtests.judge.causes import (
    MERGE_COLUMNS,
    headers_withheld,
    keepalive_withheld,
    proxies_named,
    proxy_timeouts,
    window,
    writes_merged,
)
from loadtests.judge.gates import (
    Expect,
    KeepAliveCovered,
    NoHttp500,
    NoInband500,
    NoProxyTimeouts,
    OutcomesAsExpected,
    RunTables,
    evaluate,
)
from loadtests.judge.summary import summarize
from loadtests.record import lag
from loadtests.record.lag import STALLED_COLUMN
from loadtests.record.recorder import Recorder
from loadtests.services.proxies import timeout_notes
from tests.loadtests.tables import requests_of

pytestmark = pytest.mark.fast

TOKEN = 'data: {"choices": [{"index": 0, "text": "w"}]}'


def token(t: float) -> Frame:
    return Frame(t, len(TOKEN) + 2, data=TOKEN[len("data: ") :])


def keepalive(t: float) -> Frame:
    return Frame(t, 14, comments=[KEEP_ALIVE_TEXT])


def stream(
    frames: list[Frame],
    end: float,
    *,
    status: int = 200,
    headers_at: float = 0.05,
    body: str | None = None,
    server: str | None = None,
    via: str | None = None,
    expected: str | None = None,
    client: str = "raw",
    index: int = 0,
) -> RequestRow:
    """One request as the raw client records it: headers, ``frames``, then the end at ``end`` s."""
    tracker = StreamTracker(
        RequestPlan(f"r{index}", "n", "completions", client=client, expected=expected),
        0.0,
        sees_comments=client == "raw",
    )
    tracker.headers(status, headers_at, "text/event-stream", server=server, via=via)
    if body is not None:
        tracker.error_body(body.encode())
    for frame in frames:
        tracker.frame(frame, frame.t)
    return tracker.finish(end)


def table(*rows: RequestRow) -> pd.DataFrame:
    recorder = Recorder()
    for index, row in enumerate(rows):
        row.request_id = f"r{index}"
        recorder.add(row, None)
    return requests_of(recorder)


def cut_after(silence: float, **given: Any) -> RequestRow:
    """A 200 stream whose last token came at 5 s, then cut ``silence`` s later without [DONE]."""
    return stream([token(5.0)], 5.0 + silence, **given)


def causes_line(requests: pd.DataFrame, **settings: Any) -> str:
    summary = summarize("s", requests, [], {"proxy_read_timeout": 2.0, "proxy": "none", **settings})
    return next(line for line in summary.console_lines() if line.startswith("causes: "))


def test_the_window_is_the_timeout_less_or_more_a_quarter_second_or_15_percent_or_a_whole_second_tick() -> None:
    assert window(2.0) == pytest.approx((1.70, 2.30))
    assert window(1.0) == pytest.approx((0.75, 1.25))  # the 0.25 s floor: HAProxy's 0.2 s hold, at any timeout
    assert window(60.0) == pytest.approx((51.0, 69.0))
    assert window(2.0, coarse=True) == pytest.approx((1.0, 4.0))  # Squid through --proxy squid: cuts at 2.75-3.7 s


def test_a_stream_records_the_silence_before_its_end_what_a_proxy_timer_measures() -> None:
    row = cut_after(1.79)
    assert row.outcome == "cut" and row.end_silence_s == pytest.approx(1.79)
    assert row.max_gap_s == pytest.approx(4.95)  # the prefill before the first token: not what ended it
    ended = stream([token(1.0), keepalive(2.5), Frame(2.6, 14, data="[DONE]")], 2.7)
    assert ended.outcome == "ok" and ended.end_silence_s == pytest.approx(0.1)  # [DONE] is the end
    answered = stream([], 2.01, status=502, headers_at=2.0, body="<html>502 Proxy Error</html>")
    assert answered.end_silence_s == pytest.approx(2.0)  # from the send to the status
    sdk = cut_after(1.8, client="openai")
    assert sdk.end_silence_s is None  # comments unseen: its silence is unknown


def test_haproxy_holding_each_write_200ms_cuts_after_1_79s_of_silence_and_that_is_its_read_timeout() -> None:
    """HAProxy 2.6 without option http-no-delay, 2 s timeout: 36 cuts seen 1.79-1.80 s after the last
    frame were filed as other cuts by the old 0.95 x rule, and the gate passed."""
    requests = table(*(cut_after(1.79 + 0.01 * (i % 2), index=i) for i in range(36)))
    gate = NoProxyTimeouts(2.0, 0.0, proxy="none").evaluate(requests)
    assert not gate.passed
    said = "0 proxy timeouts before the headers, 36 streams cut after them, after 1.79-1.80 s of silence"
    assert gate.detail.startswith(said + " (cuts and 502s count after 1.70-2.30 s for a 2 s read timeout)")
    assert causes_line(requests, proxy="haproxy").startswith("causes: " + said)


def test_squids_whole_second_timer_counts_when_squid_is_named_and_not_otherwise() -> None:
    """Squid 5.7 cut a 2 s timeout after 1.37-1.88 s (9 of 27 under 1.71 s): named by its Via header or
    by the run's proxy, its cuts get a whole second either side; unnamed, a 1.37 s cut is another cut
    (a server that drops idle streams after 1.4 s is no 2 s proxy timeout)."""
    unnamed = table(cut_after(1.37), cut_after(1.88))
    found = proxy_timeouts(unnamed, 2.0)
    assert (len(found.after_headers), len(found.other_cuts)) == (1, 1)
    via = table(cut_after(1.37, via="1.1 proxy (squid/5.7)"), cut_after(1.88, via="1.1 proxy (squid/5.7)"))
    named = proxy_timeouts(via, 2.0)
    assert (len(named.after_headers), len(named.other_cuts), named.named) == (2, 0, ["Squid"])
    assert "; answered by Squid" in NoProxyTimeouts(2.0, 0.0).evaluate(via).detail
    assert len(proxy_timeouts(unnamed, 2.0, "squid").after_headers) == 2  # the run started Squid
    assert len(proxy_timeouts(table(cut_after(0.9, via="squid/5.7")), 2.0).other_cuts) == 1  # below its tick


def test_a_silence_far_over_the_timeout_or_far_under_it_is_no_read_timeout() -> None:
    found = proxy_timeouts(table(cut_after(2.01), cut_after(0.3), cut_after(3.5)), 2.0)
    assert (len(found.after_headers), len(found.other_cuts)) == (1, 2)
    assert "2 other cuts after 0.30-3.50 s of silence, outside it: not read timeouts" in found.phrase()


def test_a_run_without_a_proxy_names_no_read_timeout_on_its_causes_line() -> None:
    """A ``--host`` run of mixed_truncate without a proxy said "for a 60 s read timeout": no proxy ran."""
    requests = table(cut_after(60.0), cut_after(0.4, index=1))
    unproxied = causes_line(requests, proxy="none", proxy_read_timeout=60.0)
    assert "read timeout" not in unproxied
    assert unproxied.startswith("causes: 0 proxy timeouts before the headers, 0 streams cut after them; 2 other cuts")
    proxied = causes_line(requests, proxy="embedded", proxy_read_timeout=60.0)
    assert "for a 60 s read timeout" in proxied and "1 streams cut after them" in proxied
    gate = NoProxyTimeouts(60.0, 0.0, proxy="none")  # declared: a proxy before --host, whose timeout it judges
    summary = summarize("s", requests, [gate.evaluate(requests)], {"proxy": "none"}, read_timeout=60.0)
    assert (summary.causes.proxy_timeouts or {})["read_timeout_s"] == 60.0


def test_caddys_valid_final_chunk_without_done_is_a_cut_and_a_read_timeout() -> None:
    """Caddy 2.6 ends a timed-out stream with a valid final chunk (HTTP 200): only [DONE] is missing."""
    row = stream([token(0.5), keepalive(1.0)], 3.0)  # closed cleanly 2 s after the last comment
    assert row.outcome == "cut" and not row.done
    assert len(proxy_timeouts(table(row), 2.0).after_headers) == 1


def test_apaches_502_before_the_headers_is_a_timeout_when_silent_for_it_and_named() -> None:
    """Apache 2.4 mod_proxy answers its ProxyTimeout with 502; a reset upstream is a 502 at once."""
    timed_out = stream(
        [], 2.01, status=502, headers_at=2.0, body="<title>502 Proxy Error</title>", server="Apache/2.4.62 (Debian)"
    )
    reset = stream([], 0.06, status=502, headers_at=0.05, body="<title>502 Proxy Error</title>")
    assert timed_out.outcome == reset.outcome == "http_5xx"
    requests = table(timed_out, reset)
    gate = NoProxyTimeouts(2.0, 0.0).evaluate(requests)
    assert not gate.passed and gate.detail.startswith("1 proxy timeouts before the headers (1x 502)")
    assert "; answered by Apache" in gate.detail and "r0" in gate.detail and "r1" not in gate.detail
    assert causes_line(requests, proxy="apache").startswith("causes: 1 proxy timeouts before the headers (1x 502)")


LITELLM_408 = json.dumps(
    {
        "error": {
            "message": "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out.",
            "type": None,
            "param": None,
            "code": "408",
        }
    }
)
"""LiteLLM's proxy answer to its upstream timeout, an OpenAI-style error whose code is text."""


def test_litellms_408_is_a_gateway_timeout_never_an_expected_rejection() -> None:
    rows = [stream([], 2.0, status=408, headers_at=2.0, body=LITELLM_408, expected="rejected") for _ in range(5)]
    assert {row.outcome for row in rows} == {"gateway_timeout"}
    requests = table(*rows)
    expected = OutcomesAsExpected().evaluate(requests)
    assert not expected.passed and "5 gateway_timeout (expected rejected)" in expected.detail
    gate = NoProxyTimeouts(2.0, 0.0).evaluate(requests)
    assert not gate.passed and gate.detail.startswith("5 proxy timeouts before the headers (5x 408)")
    assert "; answered by LiteLLM" in gate.detail


def test_an_inband_timeout_code_after_the_headers_is_a_gateway_timeout() -> None:
    """LiteLLM mid-stream: HTTP 200, then an error frame with code "408"."""
    error = Frame(3.0, 40, data=LITELLM_408)
    row = stream([token(0.5), error], 3.1)
    assert row.outcome == "gateway_timeout" and row.end_silence_s == pytest.approx(2.5)
    found = proxy_timeouts(table(row), 2.0)
    assert len(found.after_headers) == 1 and found.named == ["LiteLLM"]


def test_every_504_counts_and_the_gate_and_the_causes_line_say_the_same() -> None:
    requests = table(
        stream([], 2.0, status=504, headers_at=2.0, body="<html>504 Gateway Time-out</html>"),
        cut_after(2.0),
        cut_after(0.4),
        stream([token(0.5), Frame(0.6, 14, data="[DONE]")], 0.6),
    )
    gate = NoProxyTimeouts(2.0, 0.5, proxy="embedded").evaluate(requests)
    phrase = proxy_timeouts(requests, 2.0, "embedded").phrase()
    assert gate.detail.startswith(phrase + "; longest silence 2.00 s")
    assert phrase.endswith("; the run's proxy: the embedded proxy")
    assert causes_line(requests, proxy="embedded") == f"causes: {phrase}; statuses {{'200': 3, '504': 1}}"


def test_a_row_written_before_end_silence_s_is_judged_on_its_longest_gap() -> None:
    older = table(cut_after(1.9))
    older["end_silence_s"] = None
    older["max_gap_s"] = 1.9
    assert len(proxy_timeouts(older.drop(columns=["end_silence_s", "served_by"]), 2.0).after_headers) == 1


def test_sdk_cuts_have_unknown_silences_and_are_counted_apart() -> None:
    found = proxy_timeouts(table(cut_after(1.9, client="openai")), 2.0)
    assert (found.count, len(found.unseen_cuts)) == (0, 1)
    assert "1 cuts of SDK streams, whose silences are unknown" in found.phrase()


def held_silent(index: int) -> RequestRow:
    """A LiteLLM-like stream: no comment, headers with the first token 5 s after the send."""
    return stream([token(5.0), Frame(5.1, 14, data="[DONE]")], 5.1, headers_at=5.0, index=index)


def test_keepalive_withheld_fails_keepalive_covered_and_the_summary_says_the_same_line() -> None:
    requests = table(held_silent(0), held_silent(1))
    withheld = keepalive_withheld(requests, 0.5, "embedded")
    assert withheld is not None and (withheld.streams, withheld.headers_held) == (2, 2)
    line = withheld.line()
    assert line.startswith("sse-soak: 2 raw streams were silent over 0.65 s and none got a keep-alive comment (2 got")
    assert "(the run's proxy, the embedded proxy, or something behind it)" in line
    gate = KeepAliveCovered(0.5, proxy="embedded").evaluate(requests)
    assert not gate.passed and gate.detail.endswith(line)
    summary = summarize("s", requests, [gate], {"keep_alive_interval": 0.5, "proxy": "embedded"})
    assert (summary.causes.keepalive_withheld or {})["line"] == line and line in summary.console_lines()
    assert "the run started no proxy" in (keepalive_withheld(requests, 0.5, "none") or withheld).line()
    assert keepalive_withheld(requests, 0.0) is None  # keep-alive off: no comment is expected
    with_comment = table(held_silent(0), stream([keepalive(1.0), token(5.0)], 5.1, index=1))
    assert keepalive_withheld(with_comment, 0.5) is None  # one got a comment: none were stripped on the way


@pytest.mark.parametrize("text", ["ping", "", "keep-alive", "heartbeat"])
def test_keepalive_covered_counts_any_comment_as_a_keepalive(text: str) -> None:
    """A stream silent 3 s with five comments is covered, whatever its comments say (``:ping``, ``:``)."""
    comments = [Frame(0.55 * (n + 1), 8, comments=[text]) for n in range(5)]
    requests = table(stream([*comments, token(3.0), Frame(3.1, 14, data="[DONE]")], 3.1))
    gate = KeepAliveCovered(0.5).evaluate(requests)
    assert gate.passed and not gate.skipped, gate.detail
    assert gate.detail.startswith("1/1 raw streams") and "(5 keep-alive frames on them)" in gate.detail
    assert keepalive_withheld(requests, 0.5) is None and keepalive_withheld(requests, None, read_timeout=2.0) is None


def test_comments_stripped_are_named_when_the_interval_is_unknown() -> None:
    """``--host`` at LiteLLM without ``--keep-alive-interval``: no interval to judge, the line says it anyway."""
    requests = table(held_silent(0), held_silent(1))
    withheld = keepalive_withheld(requests, None, "none", read_timeout=2.0)
    assert withheld is not None and withheld.streams == 2 and withheld.period_s == 2.0
    line = withheld.line()
    assert line.startswith(
        "sse-soak: 2 raw streams were silent over 2.00 s (longer than any keep-alive interval the run could judge) "
        "and none got a keep-alive comment"
    )
    longer = table(stream([token(6.0), Frame(6.1, 14, data="[DONE]")], 6.1, headers_at=6.0))
    assert keepalive_withheld(longer, None, "none", read_timeout=60.0) is not None  # over 5 s: no plausible interval
    assert keepalive_withheld(requests, None, "none", read_timeout=60.0) is None  # 5 s: a plausible interval
    summary = summarize("s", requests, [], {"keep_alive_interval": None, "proxy": "none", "proxy_read_timeout": 2.0})
    assert (summary.causes.keepalive_withheld or {})["line"] == line and line in summary.console_lines()
    shorter = table(stream([token(1.5), Frame(1.6, 14, data="[DONE]")], 1.6, headers_at=1.5))
    assert keepalive_withheld(shorter, None, "none", read_timeout=2.0) is None  # a plausible interval's silence


@pytest.mark.parametrize("interval", [None, 0.5, 0.0])
def test_headers_withheld_are_named_in_one_line_whatever_the_interval(interval: float | None) -> None:
    requests = table(held_silent(0), held_silent(1))
    held = headers_withheld(requests, "none")
    assert held is not None and (held.streams, held.shortest_silence_s) == (2, 5.0)
    line = held.line()
    assert line.startswith(
        "sse-soak: 2 streams silent 5.00 s or more from their send got their response headers only with their "
        "first token: an intermediary holds the headers until the first token (a gateway such as LiteLLM)"
    )
    settings = {"keep_alive_interval": interval, "proxy": "none", "proxy_read_timeout": 2.0}
    summary = summarize("s", requests, [], settings)
    assert (summary.causes.headers_withheld or {})["line"] == line
    assert [said for said in summary.console_lines() if said == line] == [line]
    assert "(the run's proxy, LiteLLM, does, measured)" in (headers_withheld(requests, "litellm") or held).line()


def test_headers_sent_at_once_by_a_slow_server_are_not_withheld() -> None:
    slow = stream([token(5.0), Frame(5.1, 14, data="[DONE]")], 5.1, headers_at=0.05)
    assert headers_withheld(table(slow)) is None
    assert headers_withheld(table(held_silent(0), slow)) is None  # one stream got them at once: not held
    quick = stream([token(0.3), Frame(0.4, 14, data="[DONE]")], 0.4, headers_at=0.3)
    assert headers_withheld(table(quick)) is None  # not silent long enough to tell
    sdk = stream([token(5.0), Frame(5.1, 14, data="[DONE]")], 5.1, headers_at=5.0, client="sdk")
    assert headers_withheld(table(sdk)) is not None  # any client sees when its headers came


def test_a_stream_the_run_stopped_counts_in_neither_the_withheld_line_nor_the_gate() -> None:
    """Seen through LiteLLM in front of real vLLM: the console said 18 streams, the gate 16, because
    two streams the run stopped at its end (headers held, silent) were counted by the summary only."""
    stopped = stream([token(5.0)], 5.2, headers_at=5.0, index=2)
    stopped_row = dataclasses.replace(stopped, outcome="stopped")
    requests = table(held_silent(0), held_silent(1), stopped_row)
    settings = {"keep_alive_interval": 0.5, "proxy": "litellm"}
    gate = evaluate(RunTables(requests), [KeepAliveCovered(0.5, proxy="litellm")])[-1]
    summary = summarize("s", requests, [gate], settings)
    withheld = summary.causes.keepalive_withheld
    assert withheld is not None and withheld["streams"] == 2 and gate.detail.endswith(withheld["line"])


def test_a_proxy_is_named_by_its_headers_first_then_by_its_error_body() -> None:
    rows = table(
        stream([], 2.0, status=504, headers_at=2.0, server="nginx/1.22.1", body="squid"),
        stream([], 2.0, status=408, headers_at=2.0, server="uvicorn", body=LITELLM_408),
        stream([], 2.0, status=504, headers_at=2.0, via="1.1 edge (squid/5.7)", server="HAProxy"),
        stream([], 2.0, status=504, headers_at=2.0),
    )
    assert proxies_named(rows).tolist() == ["nginx", "LiteLLM", "Squid", None]


def test_a_stream_held_silent_by_a_gateway_until_its_first_token_tested_the_proxys_read_timeout() -> None:
    """Headers with the first token 5 s after the send: silent for the 2 s timeout, though not after its headers."""
    result = NoProxyTimeouts(2.0, 0.5).evaluate(table(held_silent(0)))
    assert result.passed and result.detail.endswith("; 1 streams silent over the read timeout")


def test_litellms_500_and_408_count_by_their_message_whatever_the_silence() -> None:
    """LiteLLM 1.108.7 answers its 2 s timeout 2.1-2.5 s after the send (its own work before it sends
    upstream): 408 on /v1/completions, 500 on /v1/chat/completions; both count, named LiteLLM, while
    a server's own 500 after the same silence does not."""
    litellm_500 = json.dumps(
        {"error": {"message": "litellm.APIConnectionError: ... Timeout on reading data from socket", "code": "500"}}
    )
    litellm_408 = json.dumps(
        {"error": {"message": "litellm.Timeout: APITimeoutError - Request timed out.", "code": "408"}}
    )
    server_500 = json.dumps({"error": {"message": "EngineCore died", "code": 500}})
    requests = table(
        stream([], 2.48, status=500, headers_at=2.48, body=litellm_500, index=0),
        stream([], 2.21, status=408, headers_at=2.21, body=litellm_408, index=1),
        stream([], 2.0, status=500, headers_at=2.0, body=server_500, index=2),
    )
    found = proxy_timeouts(requests, 2.0, "litellm")
    assert list(found.before_headers["request_id"]) == ["r0", "r1"] and found.statuses() == {"500": 1, "408": 1}
    assert found.named == ["LiteLLM"] and found.phrase().endswith("; answered by LiteLLM")


def test_apaches_whole_seconds_are_judged_as_it_runs_them_by_the_gate_the_causes_and_the_summary() -> None:
    """``--proxy apache --proxy-read-timeout 1.5 --keep-alive-interval 0``: Apache ran 2 s (it rounds
    ProxyTimeout up) and cut 28 streams at 2.00 s, which a 1.5 s window (1.25-1.75 s) filed as other
    cuts, so ``no_proxy_timeouts`` passed. Every figure is now the timer Apache runs."""
    requests = table(*(cut_after(2.0, index=i) for i in range(28)))
    gate = NoProxyTimeouts(1.5, 0.0, proxy="apache").evaluate(requests)
    assert not gate.passed
    timer = "Apache's 2 s read timeout (1.5 s asked: Apache takes whole seconds)"
    said = f"28 streams cut after them, after 2.00 s of silence (cuts and 502s count after 1.70-2.30 s for {timer})"
    assert said in gate.detail and f"against {timer}" in gate.detail
    settings = {"proxy": "apache", "proxy_read_timeout": 1.5, "keep_alive_interval": 0.0}
    summary = summarize("s", requests, [gate], settings, read_timeout=1.5)
    recorded = summary.causes.proxy_timeouts or {}
    figures = (recorded["read_timeout_s"], recorded["read_timeout_asked_s"], recorded["window_s"])
    assert figures == (2.0, 1.5, [1.7, 2.3])
    assert (recorded["after_headers"], recorded["other_cuts"]) == (28, 0)
    assert said in causes_line(requests, **settings)
    assert timeout_notes("apache", 1.5) == ["apache: --proxy-read-timeout 1.5 runs as 2 s (apache takes whole seconds)"]


def test_squids_lines_and_summary_print_the_wide_window_they_judge_by() -> None:
    """The Squid window (a tick early, two late) was applied, but the lines printed the plain one."""
    requests = table(cut_after(3.5), cut_after(1.2, index=1))
    found = proxy_timeouts(requests, 2.0, "squid")
    assert (len(found.after_headers), len(found.other_cuts)) == (2, 0)
    squid = "1.00-4.00 s for Squid's 2 s read timeout (its timer ticks in whole seconds)"
    assert f"(cuts and 502s count after {squid})" in found.phrase()
    assert found.as_dict()["window_s"] == [1.0, 4.0]
    assert squid in NoProxyTimeouts(2.0, 0.0, proxy="squid").evaluate(requests).detail
    via = table(cut_after(3.5, via="1.1 edge (squid/5.7)"), cut_after(2.0, index=1))  # a --host run behind Squid
    named = proxy_timeouts(via, 2.0)
    assert named.count == 2 and "(cuts and 502s count after 1.70-2.30 s for a 2 s read timeout; " in named.phrase()
    assert "1.00-4.00 s where Squid answered)" in named.phrase()
    assert named.as_dict()["named_windows_s"] == {"Squid": [1.0, 4.0]}


def stalled(row: RequestRow, stall_s: float) -> RequestRow:
    """``row`` as the harness recorded it while its loop stalled ``stall_s`` seconds (``harness_lag_max_s``)."""
    return dataclasses.replace(row, harness_lag_max_s=stall_s)


def test_a_cut_the_harness_saw_late_while_it_stalled_is_still_the_proxys_read_timeout() -> None:
    """Under load (harness lag up to 4 s) 13 of 21 HAProxy read-timeout cuts were seen 2.4-5.8 s after
    their last frame and called "not read timeouts", while the timing gates excused the same stalls.
    A miss of the window no larger than the harness's stall counts; a larger one still does not."""
    on_time = [cut_after(1.8, index=i) for i in range(8)]
    late = [stalled(cut_after(1.8 + 0.3 * (i + 1), index=8 + i), 0.3 * (i + 1)) for i in range(13)]
    not_explained = stalled(cut_after(5.0, index=21), 0.5)  # 2.7 s over the window, 0.5 s stall
    requests = table(*on_time, *late, not_explained)
    found = proxy_timeouts(requests, 2.0, "haproxy")
    assert (len(found.after_headers), len(found.other_cuts)) == (21, 1)
    assert found.stall_counted is not None and len(found.stall_counted) == 12  # 2.10 s is in the window as it is
    assert "12 of them outside the window by no more than the harness stalled while they were open (up to 3.90 s)" in (
        found.phrase()
    )
    assert found.as_dict()["stall_counted"] == 12
    gate = NoProxyTimeouts(2.0, 0.0, proxy="haproxy").evaluate(requests)
    assert not gate.passed and gate.detail.startswith(found.phrase())
    # the summed stalls of the judgement (harness_stalled_s) count as the timing gates count them
    summed = table(cut_after(3.0)).assign(**{STALLED_COLUMN: 0.8})
    assert proxy_timeouts(summed, 2.0, "haproxy").count == 1


def test_the_cause_rule_and_the_timing_gates_excuse_a_stall_by_one_rule() -> None:
    assert causes.explained_by_stall is gates.explained_by_stall is lag.explained_by_stall
    requests = table(stalled(cut_after(2.6), 0.3), stalled(cut_after(2.6, index=1), 0.2))
    expect = Expect("gap", "outcome == 'cut'", "end_silence_s <= 2.3", resolution_s=0.3).evaluate(requests)
    found = proxy_timeouts(requests, 2.0, "haproxy")
    assert (expect.unjudged_rows, list(found.after_headers["request_id"])) == (1, ["r0"])


def litellm_error(message: str) -> str:
    """LiteLLM 1.108.7's error body: its message first, its code as text."""
    return json.dumps({"error": {"message": message, "type": None, "param": None, "code": "500"}})


REFUSED_COMPLETIONS = litellm_error(
    "litellm.APIConnectionError: APIConnectionError: OpenAIException - Connection error."
)
REFUSED_CHAT = litellm_error(
    "litellm.InternalServerError: InternalServerError: Hosted_vllmException - Cannot connect to host REDACTED:33149 "
    "ssl:<ssl.SSLContext object at 0x7f9e8ed80cb0> [Connect call failed ('REDACTED', 33149)]\n\nLiteLLM: model "
    "group 'sse-soak/tiny-sim' failed with the error above. No fallback was attempted."
)
DROPPED_CHAT = litellm_error(
    "litellm.APIConnectionError: APIConnectionError: Hosted_vllmException - Response payload is not completed: "
    "<TransferEncodingError: 400, message='Not enough data to satisfy transfer length header.'>"
)
RELAYED = litellm_error(
    "litellm.InternalServerError: InternalServerError: OpenAIException - injected fault: internal server error"
)
"""Each as LiteLLM answered in front of the bundled server, refused (the server dead), dropped mid-stream
(the ``disconnect`` fault: an in-band error under HTTP 200) and relaying the ``server_error`` fault."""


def test_litellms_own_500s_are_named_as_its_rewrap_of_the_upstream_failure_apart_from_the_servers() -> None:
    server_500 = json.dumps({"error": {"message": "EngineCore died", "type": "InternalServerError", "code": 500}})
    requests = table(
        stream([], 0.01, status=500, headers_at=0.01, body=REFUSED_COMPLETIONS, index=0),
        stream([], 0.01, status=500, headers_at=0.01, body=REFUSED_CHAT, index=1),
        stream([], 0.09, status=500, headers_at=0.09, body=RELAYED, index=2),
        stream([], 0.05, status=500, headers_at=0.05, body=server_500, index=3),
        stream([token(0.1), Frame(0.2, 40, data=DROPPED_CHAT), Frame(0.3, 14, data="[DONE]")], 0.3, index=4),
    )
    http = NoHttp500().evaluate(requests)
    assert not http.passed and http.detail.startswith(
        "4 HTTP 500 of 5 requests: 2 LiteLLM's own, not the server's (upstream: 1x the connection to the server failed "
        "(refused or dropped), 1x the server refused the connection); 2 the server's (1 relayed by LiteLLM)"
    )
    inband = NoInband500().evaluate(requests)
    assert not inband.passed and inband.detail.startswith(
        "1 in-band errors with code 500 under HTTP 200: 1 LiteLLM's own, not the server's (upstream: 1x the server "
        "dropped the connection mid-response); 0 the server's"
    )
    summary = summarize("s", requests, [http, inband], {"proxy": "litellm"})
    owned = summary.causes.gateway_500s or {}
    assert owned["gateways"] == {
        "LiteLLM": {
            "the connection to the server failed (refused or dropped)": 1,
            "the server refused the connection": 1,
            "the server dropped the connection mid-response": 1,
        }
    }
    assert (owned["server"], owned["relayed"]) == (2, {"LiteLLM": 1})
    assert owned["line"] in summary.console_lines() and owned["line"].startswith("500s: 3 LiteLLM's own")
    only_server = table(stream([], 0.05, status=500, headers_at=0.05, body=server_500))
    assert NoHttp500().evaluate(only_server).detail == "1 HTTP 500 of 1 requests (e.g. r0)"  # as ever
    assert summarize("s", only_server, []).causes.gateway_500s is None


def token_frames(gaps: list[list[float]]) -> pd.DataFrame:
    """frames.parquet's ``MERGE_COLUMNS`` for streams whose token frames came ``gaps`` apart (one list per stream)."""
    rows = []
    for stream_index, stream_gaps in enumerate(gaps):
        rows.append((f"r{stream_index}", 0, "data", 0.3))  # the first token: its gap is the wait for it
        rows += [(f"r{stream_index}", seq, "data", gap) for seq, gap in enumerate(stream_gaps, 1)]
        rows.append((f"r{stream_index}", len(stream_gaps) + 1, "done", 0.0001))
    return pd.DataFrame(rows, columns=MERGE_COLUMNS)


MERGED_BY_HAPROXY = token_frames([[0.0001] * 5 + [0.252]] * 4 + [[0.0001] * 5 + [0.2]])
"""HAProxy 2.6 (defaults) in front of 50 ms token gaps: five of six arrive merged, then one ~0.2-0.25 s."""


def test_haproxys_merging_is_named_whenever_the_run_started_it_or_the_gaps_show_it() -> None:
    """HAProxy merged 83% of 50 ms gaps (max 252 ms, first token +0.21 s) and the run recorded them as
    the server's figures with no line, even when it started HAProxy."""
    started = writes_merged(MERGED_BY_HAPROXY, "haproxy")
    assert started is not None and (started.gaps, started.merged, started.shown) == (30, 25, True)
    assert started.line() == (
        "sse-soak: the run started HAProxy, which holds and merges writes as users run it: 83% of 30 token gaps "
        "arrived merged (under 2 ms), the longest 0.252 s; inter-token gaps and times to first token here are "
        "HAProxy's view, not the server's pace"
    )
    assert started.as_dict()["proxys_view"] == ["ttft_s", "max_data_gap_s", "max_gap_s"]
    unnamed = writes_merged(MERGED_BY_HAPROXY, "none")  # a --host run behind someone's HAProxy
    assert unnamed is not None and unnamed.started is None
    assert unnamed.line() == (
        "sse-soak: 83% of 30 token gaps arrived merged (under 2 ms), the longest 0.252 s: something on the way merges "
        "writes (a proxy such as HAProxy) or the server sends in bursts; inter-token gaps and times to first token "
        "here are what came through, not the server's pace"
    )
    paced = token_frames([[0.05] * 6] * 5)
    assert writes_merged(paced, "nginx") is None and writes_merged(paced, "none") is None
    assert writes_merged(token_frames([[0.0001] * 6] * 5), "none") is None  # a server as fast as it goes: no pace
    few = writes_merged(token_frames([]), "haproxy")  # started, nothing to measure: named all the same
    assert few is not None and "too few token gaps (0) to measure how many it merged" in few.line()
    summary = summarize("s", table(cut_after(1.0)), [], {"proxy": "haproxy"})
    summary.causes.writes_merged = started.as_dict()
    assert started.line() in summary.causes_lines() and started.line() in summary.console_lines()
