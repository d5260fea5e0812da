"""One stream, one outcome: classification, timings and gaps from fed arrivals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtests.client.outcome import OUTCOMES, Outcome, RequestPlan, StreamTracker, frame_kind
from loadtests.client.sse import Frame, SSEParser
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import Recorder
from loadtests.record.run_dir import RunDir
from tests.conftest import compiled_reads

pytestmark = pytest.mark.fast

PLAN = RequestPlan("req-1", "completions:x", "completions", truncate_prompt_tokens=1000, expected="ok")


def data(payload: object) -> Frame:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return Frame(t=0.0, nbytes=len(text) + 8, data=text)


def token(text: str = " hi") -> Frame:
    return data({"choices": [{"index": 0, "text": text, "finish_reason": None}]})


KEEPALIVE = Frame(t=0.0, nbytes=14, comments=["keep-alive"])
DONE = data("[DONE]")


def tracker() -> StreamTracker:
    return StreamTracker(PLAN, start_time=1_700_000_000.0, worker="worker-1")


def test_a_complete_stream_is_ok_with_its_timings_and_counts() -> None:
    stream = tracker()
    stream.headers(200, 0.010, "text/event-stream")
    stream.frame(KEEPALIVE, 0.5)
    stream.frame(token(), 0.8)
    stream.frame(token(), 0.9)
    stream.frame(data({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 2}}), 0.95)
    stream.frame(DONE, 0.96)
    row = stream.finish(0.97)
    assert row.outcome == "ok" and row.done
    assert (row.ttfb_s, row.ttft_s, row.duration_s) == (0.010, 0.8, 0.97)
    assert (row.data_frames, row.keepalive_frames, row.comment_frames) == (4, 1, 0)
    assert row.usage_prompt_tokens == 1000 and row.usage_completion_tokens == 2
    assert row.max_gap_s == pytest.approx(0.49)  # headers -> keep-alive
    assert row.max_data_gap_s == pytest.approx(0.1)  # first token -> second token
    assert (row.worker, row.request_id, row.truncate_prompt_tokens) == ("worker-1", "req-1", 1000)


def test_the_gap_before_the_headers_counts_as_a_proxy_sees_it() -> None:
    stream = tracker()
    stream.headers(200, 3.0, "text/event-stream")
    stream.frame(DONE, 3.1)
    assert stream.finish(3.2).max_gap_s == 3.0


def test_the_silence_before_a_cut_counts() -> None:
    stream = tracker()
    stream.headers(200, 0.1, "text/event-stream")
    stream.frame(token(), 0.2)
    row = stream.finish(5.2)
    assert row.outcome == "cut" and not row.done and row.max_gap_s == pytest.approx(5.0)


def test_a_chat_role_chunk_is_not_the_first_token() -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(data({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}), 0.5)
    stream.frame(data({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}), 0.6)
    assert stream.finish(0.7).ttft_s == 0.6


def test_an_error_frame_under_200_is_inband_error_even_with_done() -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(token(), 0.1)
    error = data({"error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}})
    assert frame_kind(error) == "error"
    stream.frame(error, 0.2)
    stream.frame(DONE, 0.3)
    row = stream.finish(0.3)
    assert (row.outcome, row.error_code, row.error_message) == ("inband_error", "500", "boom")


def test_vllms_older_flat_error_shape_is_an_error_too() -> None:
    flat = data({"object": "error", "message": "old shape", "type": "BadRequestError", "param": None, "code": 500})
    assert frame_kind(flat) == "error"


def test_a_token_that_mentions_error_is_still_data() -> None:
    assert frame_kind(token('"error" is just a word here')) == "data"


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (400, "rejected"),
        (404, "rejected"),
        (429, "rejected"),
        (500, "http_5xx"),
        (502, "http_5xx"),
        (408, "gateway_timeout"),
        (504, "gateway_timeout"),
        (524, "gateway_timeout"),
    ],
)
def test_error_statuses_and_their_bodies(status: int, outcome: str) -> None:
    stream = tracker()
    stream.headers(status, 0.01, "text/event-stream")
    stream.error_body(json.dumps({"error": {"message": "m", "param": "input_tokens", "code": status}}).encode())
    row = stream.finish(0.02)
    assert (row.outcome, row.status, row.error_code, row.error_param) == (outcome, status, str(status), "input_tokens")


def test_a_non_json_error_body_keeps_its_text() -> None:
    stream = tracker()
    stream.headers(504, 2.0)
    stream.error_body(b"<html>504 Gateway Time-out</html>")
    row = stream.finish(2.0)
    assert row.outcome == "gateway_timeout" and "Gateway" in (row.error_message or "")


@pytest.mark.parametrize(
    ("status", "failure", "outcome"),
    [
        (None, None, "connect_error"),
        (None, "timeout", "timeout"),
        (200, "timeout", "timeout"),
        (200, "stopped", "stopped"),
        (200, None, "cut"),
    ],
)
def test_streams_the_client_ended(status: int | None, failure: str | None, outcome: str) -> None:
    stream = tracker()
    if status is not None:
        stream.headers(status, 0.01, "text/event-stream")
    assert stream.finish(1.0, None if failure is None else Outcome(failure)).outcome == outcome


@pytest.mark.parametrize("text", ["keep-alive", "ping", "", "heartbeat 12", "keep-alive\u00e9"])
def test_any_comment_is_a_keepalive_whatever_it_says(text: str) -> None:
    """A proxy's read timer is re-armed by any comment: ``:ping`` and a bare ``:`` count as ``: keep-alive``."""
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    assert stream.frame(Frame(t=0.0, nbytes=8, comments=[text]), 0.1) == "keepalive"
    assert stream.frame(Frame(t=0.0, nbytes=8, comments=[text, "more"]), 0.2) == "keepalive"
    stream.frame(DONE, 0.3)
    row = stream.finish(0.3)
    assert (row.keepalive_frames, row.comment_frames, row.data_frames) == (2, 0, 1)


def test_a_frame_of_fields_without_data_or_comment_is_counted_apart() -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    assert stream.frame(Frame(t=0.0, nbytes=10, retry="1000"), 0.1) == "comment"
    stream.frame(DONE, 0.2)
    row = stream.finish(0.2)
    assert (row.keepalive_frames, row.comment_frames, row.data_frames) == (0, 1, 1)


def test_comments_parsed_from_the_wire_count_as_keepalives() -> None:
    """Every line starting with a colon, as the parser reads it off the wire, is one keep-alive frame."""
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    wire = b":ping\n\n: \n\n:\n\n: keep-alive\n\n:: odd\n\ndata: [DONE]\n\n"
    kinds = [stream.frame(frame, 0.1) for frame in SSEParser().feed(wire, 0.1)]
    assert kinds == ["keepalive"] * 5 + ["done"]
    assert stream.finish(0.2).keepalive_frames == 5


def test_frame_records_hold_sequence_kind_time_gap_bytes_and_wait() -> None:
    stream = tracker()
    stream.headers(200, 0.1, "text/event-stream")
    stream.frame(KEEPALIVE, 1.1, wait=0.002)
    stream.frame(DONE, 1.5)
    expected: list[Any] = [
        (0, "keepalive", 1.1, pytest.approx(1.0), 14, 0.002),
        (1, "done", 1.5, pytest.approx(0.4), 14, None),
    ]
    assert stream.frames == expected


SSE = "text/event-stream; charset=utf-8"


def streamed(*frames: Frame, content_type: str | None = SSE, sees_comments: bool = True) -> StreamTracker:
    stream = StreamTracker(PLAN, 0.0, sees_comments=sees_comments)
    stream.headers(200, 0.01, content_type)
    for index, frame in enumerate(frames):
        stream.frame(frame, 0.1 * (index + 1))
    return stream


@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "application/json", None])
def test_a_2xx_that_is_not_an_event_stream_is_a_protocol_error(content_type: str | None) -> None:
    stream = streamed(content_type=content_type)
    assert stream.broken
    row = stream.finish(0.2)
    shown = content_type or "missing"
    assert (row.outcome, row.error_message) == ("protocol_error", f"content-type {shown}, not text/event-stream")


def test_the_event_stream_media_type_is_matched_without_case_or_parameters() -> None:
    assert not streamed(token(), DONE, content_type="Text/Event-Stream ;charset=UTF-8").broken


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (data("hello world"), "data frame 2 is not JSON: 'hello world'"),
        (data("[1, 2]"), "data frame 2 is not a JSON object: [1, 2]"),
        (data('"text"'), 'data frame 2 is not a JSON object: "text"'),
        (
            Frame(t=0.0, nbytes=9, data="\ufffd\ufffd", invalid_utf8=True),
            "bytes that are not UTF-8 in the event stream",
        ),
    ],
)
def test_a_frame_that_is_not_a_json_object_breaks_the_stream_even_before_done(bad: Frame, reason: str) -> None:
    stream = streamed(token(), bad, DONE)
    row = stream.finish(1.0)
    assert (row.outcome, row.error_message, row.done) == ("protocol_error", reason, False)


def test_nothing_after_done_is_judged() -> None:
    row = streamed(token(), DONE, data("garbage"), data({"error": {"code": 500}})).finish(1.0)
    assert (row.outcome, row.error_code) == ("ok", None)


def test_the_first_terminal_event_decides() -> None:
    error = data({"error": {"message": "boom", "code": 500}})
    after_error = streamed(token(), error, data("not json"), DONE).finish(1.0)
    assert (after_error.outcome, after_error.error_code, after_error.error_message) == ("inband_error", "500", "boom")
    protocol_first = streamed(data("not json"), error, DONE).finish(1.0)
    assert protocol_first.outcome == "protocol_error" and protocol_first.error_code is None


def test_an_error_that_is_not_an_object_is_an_error_frame_too() -> None:
    """The openai SDK raises on any non-empty ``error``; the raw reading must agree."""
    row = streamed(data({"error": "overloaded"}), DONE).finish(1.0)
    assert (row.outcome, row.error_message) == ("inband_error", "overloaded")


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "abc", "completion_tokens": 2},
        {"prompt_tokens": 2**64, "completion_tokens": 2},
        {"prompt_tokens": -1, "completion_tokens": 2},
        {"prompt_tokens": True, "completion_tokens": 2},
        "lots",
    ],
)
def test_usage_values_that_do_not_fit_are_null_with_the_raw_text_kept(usage: object) -> None:
    row = streamed(token(), data({"choices": [], "usage": usage}), DONE).finish(1.0)
    assert row.outcome == "ok" and row.usage_prompt_tokens is None
    assert row.raw_usage == json.dumps(usage)
    assert row.usage_completion_tokens == (2 if isinstance(usage, dict) else None)


def test_fitting_usage_keeps_no_raw_text() -> None:
    row = streamed(
        token(), data({"choices": [], "usage": {"prompt_tokens": 2**63 - 1, "completion_tokens": 0}}), DONE
    ).finish(1.0)
    assert (row.usage_prompt_tokens, row.usage_completion_tokens, row.raw_usage) == (2**63 - 1, 0, None)


def test_server_text_in_a_row_is_clipped() -> None:
    row = streamed(data({"error": {"message": "x" * 10_000, "code": 500}})).finish(1.0)
    assert row.outcome == "inband_error" and len(row.error_message or "") == 500


def test_a_client_that_hides_comments_has_null_comment_columns_and_no_invented_frames() -> None:
    stream = StreamTracker(PLAN, 0.0, sees_comments=False)
    stream.headers(200, 0.01, SSE)
    stream.payload({"choices": [{"index": 0, "text": "hi"}]}, 0.5)
    stream.payload({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 1}}, 0.6)
    stream.wire_ended(done=True, nbytes=321)
    row = stream.finish(0.7)
    assert (row.outcome, row.done, row.bytes, row.data_frames) == ("ok", True, 321, 2)
    assert (row.keepalive_frames, row.comment_frames, row.max_gap_s) == (None, None, None)
    assert row.ttft_s == 0.5 and row.max_data_gap_s == pytest.approx(0.1) and row.usage_prompt_tokens == 1000
    assert [kind for _, kind, *_ in stream.frames] == ["data", "data"]  # no [DONE] frame was handed over


def test_a_client_that_hides_the_wire_gives_the_raw_verdicts() -> None:
    def sdk(*payloads: object, done: bool) -> str:
        stream = StreamTracker(PLAN, 0.0, sees_comments=False)
        stream.headers(200, 0.01, SSE)
        for payload in payloads:
            stream.payload(payload, 0.1)
        stream.wire_ended(done, 100)
        return stream.finish(0.2).outcome

    chunk = {"choices": [{"index": 0, "text": "hi"}]}
    assert sdk(chunk, done=False) == streamed(token()).finish(0.2).outcome == "cut"
    assert sdk(chunk, [1, 2], done=True) == streamed(token(), data([1, 2]), DONE).finish(0.2).outcome
    assert sdk(chunk, {"error": {"code": 500}}, done=False) == "inband_error"
    undecodable = StreamTracker(PLAN, 0.0, sees_comments=False)
    undecodable.headers(200, 0.01, SSE)
    undecodable.undecodable_payload(0.1, "hello world")
    undecodable.wire_ended(True, 50)
    row = undecodable.finish(0.2)
    assert (row.outcome, row.error_message) == ("protocol_error", "data frame 1 is not JSON: 'hello world'")


def test_a_harness_error_wins_and_keeps_its_message() -> None:
    stream = streamed(token(), DONE)
    stream.harness_error("KeyError: 'x'")
    row = stream.finish(1.0)
    assert (row.outcome, row.error_message, row.status) == ("harness_error", "KeyError: 'x'", 200)


def test_outcomes_are_their_plain_strings_in_text_json_and_parquet(tmp_path: Path) -> None:
    assert [str(outcome) for outcome in OUTCOMES] == [outcome.value for outcome in Outcome] == list(OUTCOMES)
    assert f"{Outcome.CUT}" == "cut" and json.dumps({Outcome.OK: Outcome.CUT}) == '{"ok": "cut"}'
    run = RunDir(tmp_path / "run")
    recorder = Recorder()
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    recorder.add(stream.finish(0.5), stream.frames)  # no [DONE]: cut
    RunWriter(run).write_batch(recorder.take_batch())
    stored = pq.read_table(run.requests).column("outcome").to_pylist()
    assert stored == ["cut"] and type(stored[0]) is str
    assert (run.read_requests()["outcome"] == Outcome.CUT).all()


def test_the_clients_reason_is_the_message_of_rows_the_client_ended_only() -> None:
    for failure in ("timeout", "connect_error", "stopped"):
        tracker = StreamTracker(RequestPlan("r", "n", "chat"), 0.0)
        tracker.client_ended("why")
        assert tracker.finish(1.0, Outcome(failure)).error_message == "why"
    served = StreamTracker(RequestPlan("r", "n", "chat"), 0.0)
    served.headers(500, 0.1, "application/json")
    served.client_ended("why")
    assert served.finish(1.0, Outcome.TIMEOUT).error_message is None  # the server's 500 is the outcome


def test_a_stream_is_stuck_after_three_times_the_longest_finished_of_its_kind() -> None:
    from loadtests.load.state import STUCK_MIN_S, RunState

    state = RunState()
    assert state.stuck_after("chat:a") is None  # nothing finished: nothing to compare with
    for name, outcome, seconds in [("chat:a", "ok", 2.0), ("chat:a", "cut", 3.0), ("chat:b", "stopped", 50.0)]:
        row = StreamTracker(RequestPlan("r", name, "chat"), 0.0).finish(
            seconds, Outcome(outcome) if outcome != "ok" else None
        )
        state.note_finished(row)
    assert state.stuck_after("chat:a") == (9.0, "3x the longest finished chat:a stream (3.0 s)")
    assert state.stuck_after("chat:b") == (9.0, "3x the longest finished stream (3.0 s)")  # stopped rows do not count
    quick = StreamTracker(RequestPlan("r", "chat:c", "chat"), 0.0).finish(0.2, Outcome.CUT)
    state.note_finished(quick)
    assert state.stuck_after("chat:c") == (STUCK_MIN_S, "3x the longest finished chat:c stream (0.2 s)")


def test_a_stream_open_past_its_kind_is_stuck_only_when_its_tokens_stopped() -> None:
    """Seen against real vLLM: a slot holder lengthened mid-run streamed 1,578 tokens until the run
    ended 5.0 s after its send, past 3x its kind's first (short) ones, and was judged stuck."""
    from loadtests.load.state import STUCK_MIN_S, RunState

    state = RunState()
    state.note_finished(StreamTracker(RequestPlan("first", "chat:holder", "chat"), 0.0).finish(0.8))

    def streamed_until(last_token_s: float) -> StreamTracker:
        tracker = StreamTracker(RequestPlan("open", "chat:holder", "chat"), 0.0)
        tracker.headers(200, 0.01, "text/event-stream")
        token = Frame(t=0, nbytes=40, data=json.dumps({"choices": [{"index": 0, "text": "x"}]}))
        for tenth in range(1, round(last_token_s * 10) + 1):
            tracker.frame(token, tenth / 10)
        return tracker

    open_s = STUCK_MIN_S + 3  # past max(STUCK_MIN_S, 3 x 0.8 s)
    lively = streamed_until(open_s - 0.1)
    assert lively.data_silence(open_s) == pytest.approx(0.1)
    assert state.ended_by_the_run(lively, open_s) == Outcome.STOPPED
    assert lively.finish(open_s, Outcome.STOPPED).error_message == f"the run ended {open_s:.1f} s after it was sent"
    hung = streamed_until(1.0)  # tokens, then keep-alive only: a hung engine
    assert state.ended_by_the_run(hung, open_s) == Outcome.TIMEOUT
    assert str(hung.finish(open_s, Outcome.TIMEOUT).error_message).endswith(
        f"with no data for its last {open_s - 1:.1f} s"
    )
    never = StreamTracker(RequestPlan("queued", "chat:holder", "chat"), 0.0)  # no token at all since its send
    assert never.data_silence(open_s) == open_s and state.ended_by_the_run(never, open_s) == Outcome.TIMEOUT
    young = streamed_until(0.5)
    assert state.ended_by_the_run(young, STUCK_MIN_S - 1) == Outcome.STOPPED  # not open long enough


@pytest.mark.parametrize(("status", "location"), [(301, "http://127.0.0.1:9/v1/completions"), (307, None)])
def test_a_redirect_is_rejected_naming_its_status_and_location(status: int, location: str | None) -> None:
    stream = tracker()
    stream.headers(status, 0.01, "text/html", location=location)
    stream.error_body(b"<html>moved</html>")
    row = stream.finish(0.02)
    assert (row.outcome, row.status) == ("rejected", status)
    where = f"to {location}" if location else "without a Location"
    assert row.error_message is not None
    assert row.error_message.startswith(f"HTTP {status} redirect {where}, not followed: ")


def finishing(reason: str | None, route: str = "completions") -> Frame:
    choice: dict[str, object] = {"index": 0, "finish_reason": reason}
    choice.update({"delta": {"content": "x"}} if route == "chat" else {"text": "x"})
    return data({"choices": [choice]})


@pytest.mark.parametrize("route", ["completions", "chat"])
@pytest.mark.parametrize("reason", ["stop", "length"])
def test_the_last_finish_reason_is_recorded(route: str, reason: str) -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(finishing(None, route), 0.1)
    stream.frame(finishing(reason, route), 0.2)
    stream.frame(data({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}), 0.3)
    stream.frame(DONE, 0.4)
    row = stream.finish(0.5)
    assert (row.outcome, row.finish_reason) == ("ok", reason)


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_stream_whose_generation_failed_is_an_inband_error_even_with_done(reason: str) -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(finishing(reason), 0.1)
    stream.frame(DONE, 0.2)
    row = stream.finish(0.3)
    assert (row.outcome, row.finish_reason, row.done, row.error_code) == ("inband_error", reason, True, None)
    assert row.error_message == (
        f"finish_reason {reason!r} before [DONE]: the server ended the generation without completing it"
    )


def test_a_failed_finish_reason_is_kept_over_a_later_one() -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(data({"choices": [{"index": 0, "text": "", "finish_reason": "abort"}]}), 0.1)
    stream.frame(data({"choices": [{"index": 1, "text": "", "finish_reason": "stop"}]}), 0.2)
    stream.frame(DONE, 0.3)
    row = stream.finish(0.4)
    assert (row.outcome, row.finish_reason) == ("inband_error", "abort")


def test_the_sdk_and_the_wire_record_the_same_finish_reason() -> None:
    sdk = StreamTracker(PLAN, start_time=0.0, sees_comments=False)
    sdk.headers(200, 0.01, "text/event-stream")
    sdk.payload({"choices": [{"index": 0, "text": "x", "finish_reason": "error"}]}, 0.1)
    sdk.wire_ended(True, 100)
    assert (sdk.finish(0.2).outcome, sdk.finish(0.2).finish_reason) == ("inband_error", "error")


def test_a_run_written_before_the_finish_reason_column_reads_it_as_null(tmp_path: Path) -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    stream.frame(DONE, 0.1)
    row = stream.finish(0.2).as_dict()
    del row["finish_reason"]
    run = RunDir(tmp_path / "old-run")
    run.requests.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row]), run.requests / "part-0.parquet")
    assert run.read_requests()["finish_reason"].isna().all()
    selected = run.read_requests(["outcome", "finish_reason"])
    assert list(selected.columns) == ["outcome", "finish_reason"]
    assert selected["outcome"].tolist() == ["ok"] and selected["finish_reason"].isna().all()


class _JudgedTheLongWay(StreamTracker):
    """Every data frame through ``_judge_payload`` (``decode_json``, then ``_judge``): the reference
    for the token-chunk shortcut ``frame`` takes."""

    __slots__ = ()
    _judge_data = StreamTracker._judge_payload


_CHUNK_PARTS = st.fixed_dictionaries(
    {},
    optional={
        "object": st.sampled_from(["chat.completion.chunk", "text_completion", "error", 1]),
        "error": st.one_of(st.none(), st.just(""), st.just("boom"), st.just({"message": "m", "code": 500})),
        "usage": st.one_of(st.none(), st.just({"prompt_tokens": 1, "completion_tokens": 2}), st.just(3)),
        "choices": st.one_of(
            st.just(None),
            st.just("x"),
            st.lists(
                st.one_of(
                    st.just(1),
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "delta": st.one_of(st.just({}), st.just({"content": "hi"}), st.just({"role": "x"})),
                            "text": st.sampled_from(["", "a"]),
                            "finish_reason": st.sampled_from([None, "stop", "length", "abort", 7]),
                        },
                    ),
                ),
                max_size=2,
            ),
        ),
    },
)
_DATA = st.one_of(
    _CHUNK_PARTS.map(json.dumps),
    st.sampled_from(
        ["[DONE]", "[DONE] ", "[1]", "[", "", "nope", "NaN", '{"a": NaN}', '"s"', "12345678901234567890123"]
    ),
)


@given(st.lists(st.one_of(_DATA, st.none()), max_size=8))
def test_the_token_chunk_shortcut_judges_as_the_long_way_and_stream_ended_follows_the_verdicts(
    datas: list[str | None],
) -> None:
    def ended_by_its_verdicts(short: StreamTracker) -> None:
        assert short.stream_ended == (short.done or short._error is not None or short._protocol_error is not None)

    assert_judged_alike(_JudgedTheLongWay, datas, after_each=ended_by_its_verdicts)


def assert_judged_alike(
    other: type[StreamTracker],
    datas: list[str | None],
    after_each: Callable[[StreamTracker], None] = lambda short: None,
) -> None:
    """Frames of ``datas`` (None: a keep-alive) through a ``StreamTracker`` and an ``other`` one:
    every kind, the frames and the final row alike; ``after_each`` checks the ``StreamTracker``
    after each frame."""
    plan = RequestPlan("r", "chat:x", "chat")
    short, judged = StreamTracker(plan, 0.0), other(plan, 0.0)
    for tracker in (short, judged):
        tracker.headers(200, 0.01, "text/event-stream")
    for number, data in enumerate(datas):
        frame = Frame(t=0.0, nbytes=10, data=data, comments=[] if data is not None else ["keep-alive"])
        t = 0.1 * (number + 1)
        assert short.frame(frame, t) == judged.frame(frame, t)
        after_each(short)
    assert short.frames == judged.frames
    assert short.finish(1.0).as_dict() == judged.finish(1.0).as_dict()


_FINISH_REASONS = st.sampled_from([None, "stop", "length", "abort", "error", 7, "x" * 600, ""])
_C_DATA = st.one_of(
    _DATA,
    st.builds(
        lambda reason, content: json.dumps({"choices": [{"delta": {"content": content}, "finish_reason": reason}]}),
        _FINISH_REASONS,
        st.sampled_from(["", "t", None]),
    ),
)


@given(st.lists(st.one_of(_C_DATA, st.none()), max_size=8))
def test_the_compiled_judgement_of_a_data_frame_is_the_shortcuts(datas: list[str | None]) -> None:
    """A tracker whose data frames are judged by the compiled reader's ``_judge`` where it takes them
    (the Python shortcut where it says None) records what the shortcut records."""
    fastread = compiled_reads()

    class JudgedInC(StreamTracker):
        __slots__ = ()

        def _judge_data(self, data: str, t: float) -> str:
            return fastread._judge(self, data, t) or StreamTracker._judge_data(self, data, t)

    assert_judged_alike(JudgedInC, datas)


def test_the_compiled_judgement_takes_token_chunks_and_leaves_the_rest_untouched() -> None:
    fastread = compiled_reads()
    tracker = StreamTracker(RequestPlan("r", "chat:x", "chat"), 0.0)
    chunk = {"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]}
    assert fastread._judge(tracker, json.dumps(chunk), 0.5) == "data" and tracker._ttft == 0.5
    assert fastread._judge(tracker, json.dumps({"choices": [{"text": "", "finish_reason": "x" * 600}]}), 0.6) == "data"
    assert tracker._ttft == 0.5 and tracker._finish_reason == "x" * 500
    for other in ('{"usage": {"prompt_tokens": 1}}', '{"error": 1}', '{"object": "error"}', "[DONE]", "NaN", "[1]"):
        assert fastread._judge(tracker, other, 0.7) is None
    assert fastread._judge(tracker, json.dumps({"choices": [{"finish_reason": 7}]}), 0.7) is None  # str(7): Python's
    assert tracker._finish_reason == "x" * 500
