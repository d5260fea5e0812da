"""What happened to one request: its frames as they arrived, and one outcome when it ended.

A ``StreamTracker`` is fed the response headers and each SSE frame with its arrival time, and
``finish()`` turns them into a ``RequestRow`` with exactly one ``Outcome``:

- ``ok``: HTTP 200, ``data: [DONE]`` received, no error frame;
- ``rejected``: a 4xx (or any other non-2xx, non-5xx status); a 3xx is never followed (a redirect
  to another origin would send the load, and the key, elsewhere): its ``error_message`` names the
  status and the ``Location``;
- ``http_5xx``: a 5xx status (a proxy's 502 included) other than a gateway's timeout;
- ``gateway_timeout``: a proxy or gateway answered that it gave up waiting: HTTP 408, 504 or 524
  (``TIMEOUT_STATUSES``; vLLM sends none of them), an in-band error frame whose code is one of
  them (LiteLLM's ``"408"`` mid-stream), or a 5xx or in-band error whose message is a known
  gateway's timeout (``GATEWAY_TIMEOUT_MESSAGE``: LiteLLM answers its read timeout on the chat route
  with a 500). Never ``rejected``: no request mix can expect it;
- ``inband_error``: HTTP 200 but a ``data: {"error": ...}`` frame (peer tools count this as a success),
  or a stream that ended with ``[DONE]`` after a choice finished with a ``finish_reason`` in
  ``FAILED_FINISH_REASONS`` (vLLM's ``abort`` and ``error``: the generation did not complete);
- ``protocol_error``: HTTP 200 but not a valid event stream: another content type, a data frame
  that is not a JSON object, bytes that are not UTF-8, a line longer than the reader's limit;
- ``cut``: HTTP 200 but the stream ended without ``[DONE]`` (a proxy or server dropped it);
- ``timeout``: the client's idle timeout fired (before or after the headers);
- ``connect_error``: no HTTP response at all (refused, reset before the headers);
- ``harness_error``: sse-soak itself raised while handling the request (a bug of ours, never the
  server's verdict, and always a failure);
- ``stopped``: the run ended while the stream was still going (not a verdict on the server).

The rules are the same whichever client read the stream: the raw user feeds every frame, the
SDK user feeds the payloads the SDK handed over (the events our own parser dispatched,
``loadtests.client.wire_tap``) and what the wire showed below it (whether ``[DONE]`` came, a broken
frame, the data frames). The first terminal event decides and ends the stream: ``[DONE]``, an
error frame, or a frame that breaks the protocol (a ``[DONE]`` marker with anything after it
included); nothing after it is counted, timed or judged. Values the server
sent that do not fit their column (a token count that is not a 64-bit integer) become null, with
the raw text kept in ``raw_usage``. ``finish_reason`` is the last non-null one any choice sent (a
failed one, once sent, is kept), the same from either client.

Times are seconds since the request was sent. Gaps count every arrival the client saw (the
request going out, the headers, each frame, the end of the stream), which is what a proxy's read
timeout measures; ``max_data_gap_s`` counts only ``data:`` frames, which is what a user sees.
Columns a client cannot know are null on its rows: the SDK sees no comments, so its
``keepalive_frames``, ``comment_frames`` and ``max_gap_s`` are null.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

import orjson

from loadtests.client.sse import Frame
from loadtests.errors import UndecodableJson


class Outcome(str, Enum):
    """A request's one outcome (module docstring). Members are their plain strings: equal to them, and
    written as them in f-strings, JSON and parquet, so every file keeps the values it always had."""

    OK = "ok"
    REJECTED = "rejected"
    HTTP_5XX = "http_5xx"
    GATEWAY_TIMEOUT = "gateway_timeout"
    INBAND_ERROR = "inband_error"
    PROTOCOL_ERROR = "protocol_error"
    CUT = "cut"
    TIMEOUT = "timeout"
    CONNECT_ERROR = "connect_error"
    HARNESS_ERROR = "harness_error"
    STOPPED = "stopped"
    NOT_SENT = "not_sent"

    def __str__(self) -> str:
        return self.value


OUTCOMES = tuple(Outcome)
"""Every outcome, in the order reports list them."""
UNJUDGED_OUTCOMES = (Outcome.STOPPED, Outcome.NOT_SENT)
"""Rows that are no verdict on the server: streams the run itself stopped at its end, and requests
an open-loop schedule asked for that never started (``loadtests.load.open_loop``)."""
FAILURE_OUTCOMES = (
    Outcome.HTTP_5XX,
    Outcome.GATEWAY_TIMEOUT,
    Outcome.INBAND_ERROR,
    Outcome.PROTOCOL_ERROR,
    Outcome.CUT,
    Outcome.TIMEOUT,
    Outcome.CONNECT_ERROR,
    Outcome.HARNESS_ERROR,
)
"""Outcomes that are failures whatever a spec expects (``rejected`` can be what a spec asks for)."""
TIMEOUT_STATUSES = frozenset({408, 504, 524})
"""Statuses that say an intermediary timed out: 408 (LiteLLM's upstream timeout, and any server's
"request timeout"), 504 (nginx, Caddy, Squid, HAProxy), 524 (Cloudflare). A 502 says only that the
upstream failed (Apache's mod_proxy answers its timeout so, but also any reset): it stays ``http_5xx``
and ``loadtests.judge.causes`` tells a timeout from the silence before it."""
GATEWAY_TIMEOUT_MESSAGE = re.compile(r"^litellm\.\w+:.*\b(?:timeout|timed out)\b", re.IGNORECASE | re.DOTALL)
"""An error message that is LiteLLM's own timeout (measured, 1.108.7: ``litellm.Timeout: APITimeoutError -
Request timed out`` under 408, ``litellm.APIConnectionError: ... Timeout on reading data from socket``
under 500); a message of the server behind it is quoted after LiteLLM's prefix, never first."""
FAILED_FINISH_REASONS = frozenset({"abort", "error"})
"""A choice that finished with one of these did not complete: vLLM sends ``abort`` for a request its
engine aborted and ``error`` for one that failed inside it, under HTTP 200 and before ``[DONE]``."""
MAX_TEXT = 500
"""Longest server-sent text kept in a row (error messages, raw usage): enough to read, never a whole body."""
INVALID_UTF8 = "bytes that are not UTF-8 in the event stream"
_INT64_MAX = (1 << 63) - 1


@dataclass(slots=True)
class RequestRow:
    """One row of ``requests.parquet``. Field order is the column order."""

    request_id: str
    name: str
    route: str
    client: str
    worker: str
    start_time: float
    prompt_tokens: int | None
    max_tokens: int | None
    truncate_prompt_tokens: int | None
    expected: str | None
    status: int | None
    outcome: str
    error_code: str | None
    error_param: str | None
    error_message: str | None
    usage_prompt_tokens: int | None
    usage_completion_tokens: int | None
    raw_usage: str | None
    """The usage object as sent, kept only when one of its counts did not fit its column (then null)."""
    ttfb_s: float | None
    ttft_s: float | None
    duration_s: float
    data_frames: int
    keepalive_frames: int | None
    """Frames holding an SSE comment and no data, whatever the comment says (``: keep-alive``, ``:ping``,
    ``:``): each is a keep-alive to a proxy (``frame_kind``)."""
    comment_frames: int | None
    """Frames with neither data nor a comment (``retry:``, ``event:`` or ``id:`` alone)."""
    bytes: int
    max_gap_s: float | None
    max_data_gap_s: float | None
    silence_before_first_token_s: float | None
    """From the headers to the first token (or to the end, when none came)."""
    silence_from_send_s: float | None
    """From the request's send to the first token (or to the end, when none came), null without a
    status: what keep-alive must cover. Unlike ``silence_before_first_token_s`` it cannot be hidden
    by an intermediary that holds the headers until the first token."""
    done: bool
    finish_reason: str | None = None
    """The last non-null ``finish_reason`` of any choice (``stop``, ``length``...), a failed one
    (``FAILED_FINISH_REASONS``) kept once sent; null when none came (and in runs before the column)."""
    harness_lag_max_s: float | None = None
    """The worst lag of the harness's own event loop while this request was open (``loadtests.record.lag``):
    gaps and times of this row may be late by up to this much. Null when nothing was measured."""
    scheduled_time: float | None = None
    """Open loop (``--rate``): when the schedule asked this request to start (epoch seconds). Null in a
    closed-loop run, where a request starts when its user's previous one ended."""
    start_lateness_s: float | None = None
    """Open loop: how late it started after ``scheduled_time`` (every sender busy, ``--max-in-flight``
    reached); latency from the schedule is this plus the latency from the send."""
    end_silence_s: float | None = None
    """The silence before the stream ended, what a proxy's read timeout measures: from the last arrival
    before its end (the send, the headers, any frame) to its end (the close, or its terminal frame);
    for an answer that is not 2xx, from the send to its status. Null where it is unknown: SDK streams
    (comments unseen), no status, and runs written before the column (``loadtests.judge.causes`` then reads
    ``max_gap_s``)."""
    served_by: str | None = None
    """The answer's ``Server`` and ``Via`` response headers as sent (``server: ...; via: ...``, the one
    it had; clipped), so a timeout can name the proxy or gateway that answered; null without either
    (and in older runs). Never printed: a line names only a proxy it recognises (``loadtests.judge.causes``)."""

    def as_dict(self) -> dict[str, Any]:
        """The row as a plain dict (every field is a scalar, so a shallow copy is a whole one; 15x
        cheaper than ``dataclasses.asdict``, which deep-copies, on the loop of every request)."""
        return {name: getattr(self, name) for name in _ROW_FIELDS}


_ROW_FIELDS = tuple(row_field.name for row_field in fields(RequestRow))


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """What the client asked for; copied into the row so a report can group by it."""

    request_id: str
    name: str
    route: str
    client: str = "raw"
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    truncate_prompt_tokens: int | None = None
    expected: str | None = None


def frame_kind(frame: Frame) -> str:
    """``data``, ``keepalive``, ``comment``, ``error`` or ``done`` (a data frame that is not a JSON
    object counts as ``data``; the tracker judges it). A frame without data is a ``keepalive`` when it
    holds any comment line, whatever its text (``: keep-alive``, ``:ping``, a bare ``:``): any comment
    re-arms a proxy's read timer, so to a proxy every comment is a keep-alive. ``comment`` is a frame
    without data and without a comment line (``retry:``, ``event:`` or ``id:`` alone), dispatched by
    no client."""
    data = frame.data
    if data is None:
        return "keepalive" if frame.comments else "comment"
    if data == "[DONE]":
        return "done"
    payload = _json_or_none(data)
    return "error" if isinstance(payload, dict) and _error_of(payload) is not None else "data"


def is_event_stream(content_type: str | None) -> bool:
    """The media type is ``text/event-stream`` (parameters and case aside)."""
    return (content_type or "").partition(";")[0].strip().lower() == "text/event-stream"


def done_marker_problem(data: str) -> str | None:
    """Why a data field that starts like the end marker is not it (``[DONE] ``, ``[DONE]x``); None
    otherwise. The openai SDK stops at any of them; vLLM sends exactly ``[DONE]``."""
    if data.startswith("[DONE]") and data != "[DONE]":
        return f"malformed [DONE] marker: {data[:20]!r}"
    return None


def decode_json(data: str | bytes) -> Any:
    """What ``json.loads(data)`` returns, for the judgement of a frame or a body a server sent, at
    about a third of its cost for the token chunks that are most of every stream (the harness's
    largest per-frame cost). orjson decodes first. It refuses some text ``json`` accepts (NaN and
    Infinity, lone surrogates, numbers beyond a double): ``json`` decides those, so both clients
    judge a frame alike (the openai SDK decodes with ``json``). orjson turns an integer beyond 64
    bits into a float, so whatever a row keeps values from (usage, errors, the excerpt of a payload
    that is no object) is decoded by ``json`` again. Invariant: equal to ``json.loads`` but for such
    an integer elsewhere in a token chunk, which may come back as a float (no verdict reads it); and
    every way decoding fails (a syntax error, nesting past the recursion limit, a number past
    Python's digit limit, bytes that are not UTF-8, memory) is one ``UndecodableJson`` (a
    ``ValueError``) with a short reason: what the server sent is its protocol error, never ours."""
    try:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return json.loads(data)
        token_chunk = type(payload) is dict and payload.get("usage") is None and "error" not in payload
        return payload if token_chunk and payload.get("object") != "error" else json.loads(data)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise UndecodableJson(_undecodable_reason(exc)) from None


def _undecodable_reason(exc: BaseException) -> str:
    """Why a server's JSON could not be decoded, in a few words that quote none of it."""
    if isinstance(exc, RecursionError):
        return "nested deeper than a JSON decoder goes"
    if isinstance(exc, MemoryError):
        return "too large to decode"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8"
    if isinstance(exc, json.JSONDecodeError):
        return "not JSON"
    if "digits" in str(exc):  # ValueError: Exceeds the limit (4300 digits) for integer string conversion
        return f"a number longer than {sys.get_int_max_str_digits()} digits"
    return f"not JSON ({type(exc).__name__})"


def undecodable_frame(number: int, data: str, reason: str) -> str:
    """A data frame's protocol error when its JSON cannot be decoded (``UndecodableJson.reason``):
    one wording for both clients, with a short excerpt."""
    if reason == "not JSON":
        return f"data frame {number} is not JSON: {data[:60]!r}"
    return f"data frame {number} is JSON that cannot be decoded ({reason}): {data[:60]!r}"


def _json_or_none(data: str) -> Any:
    try:
        return decode_json(data)
    except UndecodableJson:
        return None


def _error_of(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The error of an error payload: ``{"error": {...}}``, any other non-empty ``error`` (the openai
    SDK raises on those too), or vLLM's older flat ``{"object": "error", ...}``."""
    error = payload.get("error")
    if isinstance(error, dict):
        return error
    if error:
        return {"message": str(error)}
    if payload.get("object") == "error":
        return payload
    return None


def _carries_token(payload: dict[str, Any]) -> bool:
    """True for a chunk with generated text (a chat role chunk with empty content carries none)."""
    choices = payload.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                return True
        elif choice.get("text"):
            return True
    return False


def _token_count(value: Any) -> int | None:
    """A usage count as the column stores it: a 64-bit non-negative integer, else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT64_MAX:
        return value
    return None


def is_timeout_code(code: Any) -> bool:
    """An error's ``code`` that is a timeout status (``TIMEOUT_STATUSES``), as a number or as text:
    LiteLLM's in-band timeout says ``"408"``."""
    if isinstance(code, bool):
        return False
    if isinstance(code, str) and code.strip().isdigit():
        code = int(code.strip())
    return isinstance(code, int) and code in TIMEOUT_STATUSES


def says_gateway_timeout(error: dict[str, Any] | None) -> bool:
    """An error (code, message) that is a proxy's or gateway's timeout: a timeout status as its code
    (``is_timeout_code``) or a known gateway's timeout message (``GATEWAY_TIMEOUT_MESSAGE``)."""
    if not error:
        return False
    message = error.get("message")
    return is_timeout_code(error.get("code")) or (
        isinstance(message, str) and GATEWAY_TIMEOUT_MESSAGE.search(message) is not None
    )


def redirect_message(status: int, location: str | None) -> str:
    """The one wording of a redirect, for both clients' rows (and the preflight's line)."""
    where = f"to {_clip(location)}" if location else "without a Location"
    return (
        f"HTTP {status} redirect {where}, not followed: sse-soak never follows redirects (use the final URL as --host)"
    )


def _clip(value: Any) -> str | None:
    return None if value is None else str(value)[:MAX_TEXT]


class StreamTracker:
    """Accumulates one request's arrivals; every data frame is parsed once (to judge it, and for
    the first token, errors and usage). ``sees_comments=False`` for clients that cannot see
    comments: their comment counts and any-byte gaps are null, not zero."""

    __slots__ = (
        "_client_reason",
        "_comment",
        "_data",
        "_end_silence",
        "_error",
        "_finish_reason",
        "_harness_error",
        "_keepalive",
        "_last_data_t",
        "_last_t",
        "_max_data_gap",
        "_max_gap",
        "_protocol_error",
        "_redirect",
        "_sees_comments",
        "_served_by",
        "_ttft",
        "_usage",
        "bytes",
        "done",
        "frames",
        "plan",
        "start_time",
        "status",
        "stream_ended",
        "ttfb",
        "worker",
    )

    def __init__(self, plan: RequestPlan, start_time: float, worker: str = "local", sees_comments: bool = True) -> None:
        """``start_time`` is the wall clock (epoch seconds) when the request was sent."""
        self.plan = plan
        self.start_time = start_time
        self.worker = worker
        self.status: int | None = None
        self.ttfb: float | None = None
        self.done = False
        self.bytes = 0
        self.frames: list[tuple[int, str, float, float, int, float | None]] = []
        self._sees_comments = sees_comments
        self._last_t = 0.0
        self._max_gap = 0.0
        self._last_data_t: float | None = None
        self._max_data_gap: float | None = None
        self._ttft: float | None = None
        self._data = self._keepalive = self._comment = 0
        self._error: dict[str, Any] | None = None
        self._usage: Any = None
        self._finish_reason: str | None = None
        self._protocol_error: str | None = None
        self._harness_error: str | None = None
        self._client_reason: str | None = None
        self._redirect: str | None = None
        self._served_by: str | None = None
        self._end_silence: float | None = None
        self.stream_ended = False
        """True once the stream ended at a frame: a terminal event or one that broke the protocol.
        A reader stops there (nothing after it is judged), so a row's duration ends at that frame.
        Invariant: equal to ``done or _error is not None or _protocol_error is not None`` (set where
        they are; a plain attribute, read once a frame on the hot path)."""

    @property
    def broken(self) -> bool:
        """True once the stream broke the protocol: the reader must stop reading it."""
        return self._protocol_error is not None

    @property
    def finished_by_server(self) -> bool:
        """True once a terminal event came (``[DONE]`` or an error frame): nothing after it is judged."""
        return self.done or self._error is not None

    def _arrival(self, t: float) -> float:
        gap = t - self._last_t
        if gap > self._max_gap:
            self._max_gap = gap
        self._last_t = t
        return gap

    def headers(
        self,
        status: int,
        t: float,
        content_type: str | None = None,
        content_encoding: str | None = None,
        location: str | None = None,
        server: str | None = None,
        via: str | None = None,
    ) -> None:
        """The status line and headers arrived ``t`` seconds after the request was sent. A 2xx
        whose content type is not ``text/event-stream`` is a protocol error (a login page, say), and
        so is one encoded other than ``identity``: both clients ask for ``Accept-Encoding:
        identity``, and decoding a compressed stream would hide when its frames arrived. A 3xx is a
        redirect no client follows, named with its ``location``. ``server`` and ``via`` are kept as
        the row's ``served_by``."""
        self.status = status
        marks = [f"{name}: {value}" for name, value in (("server", server), ("via", via)) if value]
        self._served_by = _clip("; ".join(marks)) if marks else None
        self.ttfb = t
        self._arrival(t)
        if 300 <= status < 400:
            self._redirect = redirect_message(status, location)
        if 200 <= status < 300:
            if not is_event_stream(content_type):
                self.protocol_error(f"content-type {_clip(content_type) or 'missing'}, not text/event-stream")
            elif (content_encoding or "identity").strip().lower() != "identity":
                self.protocol_error(f"content-encoding {_clip(content_encoding)}, though the client asked for identity")

    def error_body(self, body: bytes | str) -> None:
        """The body of a non-2xx response: keep its error code, param and message."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        payload = _json_or_none(text)
        error = _error_of(payload) if isinstance(payload, dict) else None
        self._error = error or {"message": text[:MAX_TEXT]}
        self.stream_ended = True

    def protocol_error(self, reason: str) -> None:
        """The stream broke the protocol (the first reason is kept; none after a terminal event)."""
        if self._protocol_error is None and not self.finished_by_server:
            self._protocol_error = reason
            self.stream_ended = True

    def harness_error(self, message: str) -> None:
        """sse-soak itself failed while handling this request."""
        if self._harness_error is None:
            self._harness_error = message[:MAX_TEXT]

    def frame(self, frame: Frame, t: float, wait: float | None = None) -> str:
        """Record one wire frame that completed ``t`` seconds after the request was sent; returns its
        kind. ``wait``: how long its bytes lay in the kernel before they were read (None: unknown)."""
        nbytes = frame.nbytes
        self.bytes += nbytes
        if self.stream_ended:
            return "after_end"  # the stream ended at its terminal event: what follows is neither counted nor timed
        gap = t - self._last_t  # _arrival(t), inline: this runs for every frame
        if gap > self._max_gap:
            self._max_gap = gap
        self._last_t = t
        if frame.invalid_utf8:
            self.protocol_error(INVALID_UTF8)
        data = frame.data
        if data is None:
            kind = "keepalive" if frame.comments else "comment"  # any comment is a keep-alive (frame_kind)
            if kind == "keepalive":
                self._keepalive += 1
            else:
                self._comment += 1
        else:
            self._data += 1  # _data_arrival(t), inline
            last_data_t = self._last_data_t
            if last_data_t is not None:
                data_gap = t - last_data_t
                if self._max_data_gap is None or data_gap > self._max_data_gap:
                    self._max_data_gap = data_gap
            self._last_data_t = t
            if data[:1] != "[":  # neither [DONE] nor a malformed marker: a payload
                kind = self._judge_data(data, t)
            elif data == "[DONE]":
                kind = "done"
                self.done = self.stream_ended = True
            elif (problem := done_marker_problem(data)) is not None:
                self.protocol_error(problem)
                kind = "data"
            else:
                kind = self._judge_payload(data, t)
            if self.stream_ended and (self.done or self._error is not None):
                self._end_silence = gap  # its terminal frame: the silence before it is the stream's last
        self.frames.append((len(self.frames), kind, t, gap, nbytes, wait))
        return kind

    def _judge_data(self, data: str, t: float) -> str:
        """``_judge_payload`` for the frame that is most of every stream, an ordinary token chunk
        (a JSON object without ``error``, ``usage`` or ``object: "error"``), judged here as
        ``_judge`` judges it; anything else goes through ``_judge_payload`` itself."""
        try:
            payload = orjson.loads(data)
        except (ValueError, RecursionError, MemoryError):
            return self._judge_payload(data, t)
        if type(payload) is not dict or "error" in payload or payload.get("usage") is not None:
            return self._judge_payload(data, t)
        if payload.get("object") == "error":
            return self._judge_payload(data, t)
        # What decode_json returns for it, and what _judge does with it: no error, no usage.
        if self._ttft is None and _carries_token(payload):
            self._ttft = t
        self._finish_reasons(payload.get("choices"))
        return "data"

    def _finish_reasons(self, choices: Any) -> None:
        """Each choice's ``finish_reason``, kept (clipped) unless a failed one was kept already."""
        if type(choices) is list:
            for choice in choices:
                reason = choice.get("finish_reason") if type(choice) is dict else None
                if reason is not None and self._finish_reason not in FAILED_FINISH_REASONS:
                    self._finish_reason = _clip(reason)

    def _judge_payload(self, data: str, t: float) -> str:
        try:
            payload = decode_json(data)
        except UndecodableJson as exc:
            self.protocol_error(undecodable_frame(self._data, data, exc.reason))
            return "data"
        return self._judge(payload, t)

    def payload(self, payload: Any, t: float) -> str:
        """A data frame as decoded by a client that hides the wire (the openai SDK): judged like a
        wire frame, timed without the any-byte gap (the client cannot see comments in between)."""
        gap = t - self._last_t
        self._last_t = t
        self._data_arrival(t)
        kind = self._judge(payload, t)
        self.frames.append((len(self.frames), kind, t, gap, 0, None))
        return kind

    def undecodable_payload(self, t: float, excerpt: str = "") -> None:
        """A client that hides the wire failed to decode the next data frame as JSON."""
        self._last_t = t
        self._data_arrival(t)
        self.protocol_error(undecodable_frame(self._data, excerpt, "not JSON"))

    def _judge(self, payload: Any, t: float) -> str:
        if not isinstance(payload, dict):
            try:
                excerpt = json.dumps(payload, default=str)[:60]
            except (ValueError, RecursionError):  # nested near the limit the decoder took it at
                excerpt = f"a JSON {type(payload).__name__}"
            self.protocol_error(f"data frame {self._data} is not a JSON object: {excerpt}")
            return "data"
        error = _error_of(payload)
        if error is not None:
            if self._error is None and self._protocol_error is None:
                self._error = error
                self.stream_ended = True
            return "error"
        if self._ttft is None and _carries_token(payload):
            self._ttft = t
        if payload.get("usage") is not None:
            self._usage = payload["usage"]
        self._finish_reasons(payload.get("choices"))
        return "data"

    def _data_arrival(self, t: float) -> None:
        self._data += 1
        if self._last_data_t is not None:
            gap = t - self._last_data_t
            if self._max_data_gap is None or gap > self._max_data_gap:
                self._max_data_gap = gap
        self._last_data_t = t

    def wire_ended(self, done: bool, nbytes: int, problem: str | None = None, data_frames: int | None = None) -> None:
        """What the wire showed below a client that hides it (``loadtests.client.wire_tap.WireEnd``):
        whether ``[DONE]`` came, its bytes, the protocol error the client did not report, and its
        data frames counted as the raw client counts them (``[DONE]`` and a broken frame included)."""
        self.bytes = nbytes
        if problem is not None:
            self.protocol_error(problem)
        if done and self._protocol_error is None and self._error is None:
            self.done = self.stream_ended = True
        if data_frames is not None:
            self._data = max(self._data, data_frames)

    def data_silence(self, t: float) -> float:
        """Seconds without a data frame at ``t`` seconds after the send: since the last one, or since
        the send when none came."""
        return t - (self._last_data_t or 0.0)

    def client_ended(self, why: str) -> None:
        """Why the client, not the server, ended the request (its deadline, the run's end, the
        connection failing): the row's ``error_message`` when its outcome is the client's
        (``timeout``, ``connect_error``, ``stopped``)."""
        self._client_reason = why

    def finish(self, t: float, failure: Outcome | None = None) -> RequestRow:
        """The stream ended ``t`` seconds after it was sent. ``failure`` is ``TIMEOUT``,
        ``CONNECT_ERROR``, ``STOPPED`` when the client, not the server, ended it, or
        ``PROTOCOL_ERROR`` when what came back before any status was not an HTTP response."""
        last_gap = self._arrival(t)
        status = self.status
        if status is not None and not 200 <= status < 300:
            end_silence = self.ttfb
        elif status is None or not self._sees_comments:
            end_silence = None  # no answer, or a client that cannot see comments: the silence is unknown
        else:
            end_silence = self._end_silence if self._end_silence is not None else last_gap
        error = self._error or {}
        usage = self._usage if isinstance(self._usage, dict) else {}
        prompt_tokens = _token_count(usage.get("prompt_tokens"))
        completion_tokens = _token_count(usage.get("completion_tokens"))
        fits = self._usage is None or (
            isinstance(self._usage, dict)
            and (prompt_tokens is not None or usage.get("prompt_tokens") is None)
            and (completion_tokens is not None or usage.get("completion_tokens") is None)
        )
        outcome = self._outcome(failure)
        failed_finish = None
        if outcome == Outcome.INBAND_ERROR and self._error is None:
            failed_finish = (
                f"finish_reason {self._finish_reason!r} before [DONE]: the server ended the generation "
                "without completing it"
            )
        message = {
            Outcome.PROTOCOL_ERROR: self._protocol_error,
            Outcome.HARNESS_ERROR: self._harness_error,
            Outcome.TIMEOUT: self._client_reason,
            Outcome.CONNECT_ERROR: self._client_reason,
            Outcome.STOPPED: self._client_reason,
            Outcome.REJECTED: self._redirect,
            Outcome.INBAND_ERROR: failed_finish,
        }.get(outcome)
        code = error.get("code")
        plan = self.plan
        comments = self._sees_comments
        return RequestRow(
            request_id=plan.request_id,
            name=plan.name,
            route=plan.route,
            client=plan.client,
            worker=self.worker,
            start_time=self.start_time,
            prompt_tokens=plan.prompt_tokens,
            max_tokens=plan.max_tokens,
            truncate_prompt_tokens=plan.truncate_prompt_tokens,
            expected=plan.expected,
            status=self.status,
            outcome=outcome,
            error_code=_clip(code),
            error_param=_clip(error.get("param")),
            error_message=message or _clip(error.get("message")),
            usage_prompt_tokens=prompt_tokens,
            usage_completion_tokens=completion_tokens,
            raw_usage=None if fits else _clip(json.dumps(self._usage, default=str)),
            ttfb_s=self.ttfb,
            ttft_s=self._ttft,
            duration_s=t,
            data_frames=self._data,
            keepalive_frames=self._keepalive if comments else None,
            comment_frames=self._comment if comments else None,
            bytes=self.bytes,
            max_gap_s=self._max_gap if comments else None,
            max_data_gap_s=self._max_data_gap,
            silence_before_first_token_s=None if self.ttfb is None else (self._ttft or t) - self.ttfb,
            silence_from_send_s=None if self.ttfb is None else (self._ttft or t),
            done=self.done,
            finish_reason=self._finish_reason,
            end_silence_s=end_silence,
            served_by=self._served_by,
        )

    def _outcome(self, failure: Outcome | None) -> Outcome:
        if self._harness_error is not None:
            return Outcome.HARNESS_ERROR
        status = self.status
        if status is None:
            return Outcome(failure) if failure else Outcome.CONNECT_ERROR
        if status in TIMEOUT_STATUSES:
            return Outcome.GATEWAY_TIMEOUT
        if status >= 500:
            return Outcome.GATEWAY_TIMEOUT if says_gateway_timeout(self._error) else Outcome.HTTP_5XX
        if not 200 <= status < 300:
            return Outcome.REJECTED
        if self._error is not None:
            return Outcome.GATEWAY_TIMEOUT if says_gateway_timeout(self._error) else Outcome.INBAND_ERROR
        if self._protocol_error is not None:
            return Outcome.PROTOCOL_ERROR
        if self.done:
            return Outcome.INBAND_ERROR if self._finish_reason in FAILED_FINISH_REASONS else Outcome.OK
        if failure in (Outcome.TIMEOUT, Outcome.STOPPED):
            return Outcome(failure)
        return Outcome.CUT
