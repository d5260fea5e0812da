"""One stream, one outcome: classification, timings and gaps from fed arrivals."""

from __future__ import annotations

import json

import pytest

from loadtests.outcome import RequestPlan, StreamTracker, frame_kind
from loadtests.sse import Frame

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


@pytest.mark.parametrize(("status", "outcome"), [(400, "rejected"), (404, "rejected"), (429, "rejected"),
                                                 (500, "http_5xx"), (504, "http_5xx")])  # fmt: skip
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
    assert row.outcome == "http_5xx" and "Gateway" in (row.error_message or "")


@pytest.mark.parametrize(
    ("status", "failure", "outcome"),
    [(None, None, "connect_error"), (None, "timeout", "timeout"), (200, "timeout", "timeout"),
     (200, "stopped", "stopped"), (200, None, "cut")],
)  # fmt: skip
def test_streams_the_client_ended(status: int | None, failure: str | None, outcome: str) -> None:
    stream = tracker()
    if status is not None:
        stream.headers(status, 0.01, "text/event-stream")
    assert stream.finish(1.0, failure).outcome == outcome


def test_other_comments_are_counted_apart_from_keepalives() -> None:
    stream = tracker()
    stream.headers(200, 0.01, "text/event-stream")
    assert stream.frame(Frame(t=0.0, nbytes=8, comments=["ping"]), 0.1) == "comment"
    stream.frame(DONE, 0.2)
    row = stream.finish(0.2)
    assert (row.keepalive_frames, row.comment_frames, row.data_frames) == (0, 1, 1)


def test_frame_records_hold_sequence_kind_time_gap_and_bytes() -> None:
    stream = tracker()
    stream.headers(200, 0.1, "text/event-stream")
    stream.frame(KEEPALIVE, 1.1)
    stream.frame(DONE, 1.5)
    assert stream.frames == [(0, "keepalive", 1.1, pytest.approx(1.0), 14), (1, "done", 1.5, pytest.approx(0.4), 14)]
