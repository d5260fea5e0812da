"""What happened to one request: its frames as they arrived, and one outcome when it ended.

A ``StreamTracker`` is fed the response headers and each SSE frame with its arrival time, and
``finish()`` turns them into a ``RequestRow`` with exactly one outcome from ``OUTCOMES``:

- ``ok``: HTTP 200, ``data: [DONE]`` received, no error frame;
- ``rejected``: a 4xx (or any other non-2xx, non-5xx status);
- ``http_5xx``: a 5xx status, proxies' 502/504 included;
- ``inband_error``: HTTP 200 but a ``data: {"error": ...}`` frame (peer tools count this as a success);
- ``cut``: HTTP 200 but the stream ended without ``[DONE]`` (a proxy or server dropped it);
- ``timeout``: the client's idle timeout fired (before or after the headers);
- ``connect_error``: no HTTP response at all (refused, reset before the headers);
- ``stopped``: the run ended while the stream was still going (not a verdict on the server).

Times are seconds since the request was sent. Gaps count every arrival the client saw (the
request going out, the headers, each frame, the end of the stream), which is what a proxy's read
timeout measures; ``max_data_gap_s`` counts only ``data:`` frames, which is what a user sees.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from loadtests.sse import KEEP_ALIVE_TEXT, Frame

OUTCOMES = ("ok", "rejected", "http_5xx", "inband_error", "cut", "timeout", "connect_error", "stopped")
FRAME_KINDS = ("data", "keepalive", "comment", "error", "done")


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
    ttfb_s: float | None
    ttft_s: float | None
    duration_s: float
    data_frames: int
    keepalive_frames: int
    comment_frames: int
    bytes: int
    max_gap_s: float
    max_data_gap_s: float | None
    silence_before_first_token_s: float | None
    """From the headers to the first token (or to the end, when none came): what keep-alive must cover."""
    done: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    data = frame.data
    if data is None:
        return "keepalive" if frame.comments == [KEEP_ALIVE_TEXT] else "comment"
    if data == "[DONE]":
        return "done"
    if '"error"' in data and _error_of(data) is not None:
        return "error"
    return "data"


def _error_of(data: str) -> dict[str, Any] | None:
    """The error object of an error payload: ``{"error": {...}}`` or vLLM's older flat shape."""
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return error
    if payload.get("object") == "error":
        return payload
    return None


def _carries_token(payload: dict[str, Any]) -> bool:
    """True for a chunk with generated text (a chat role chunk with empty content carries none)."""
    for choice in payload.get("choices") or ():
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                return True
        elif choice.get("text"):
            return True
    return False


class StreamTracker:
    """Accumulates one request's arrivals; cheap per frame (JSON is parsed only until the first
    token, for errors, and for usage)."""

    __slots__ = (
        "_comment",
        "_data",
        "_error",
        "_keepalive",
        "_last_data_t",
        "_last_t",
        "_max_data_gap",
        "_max_gap",
        "_ttft",
        "_usage",
        "bytes",
        "done",
        "frames",
        "plan",
        "start_time",
        "status",
        "ttfb",
        "worker",
    )

    def __init__(self, plan: RequestPlan, start_time: float, worker: str = "local", keep_frames: bool = True) -> None:
        """``start_time`` is the wall clock (epoch seconds) when the request was sent."""
        self.plan = plan
        self.start_time = start_time
        self.worker = worker
        self.status: int | None = None
        self.ttfb: float | None = None
        self.done = False
        self.bytes = 0
        self.frames: list[tuple[int, str, float, float, int]] | None = [] if keep_frames else None
        self._last_t = 0.0
        self._max_gap = 0.0
        self._last_data_t: float | None = None
        self._max_data_gap: float | None = None
        self._ttft: float | None = None
        self._data = self._keepalive = self._comment = 0
        self._error: dict[str, Any] | None = None
        self._usage: dict[str, Any] | None = None

    def _arrival(self, t: float) -> float:
        gap = t - self._last_t
        if gap > self._max_gap:
            self._max_gap = gap
        self._last_t = t
        return gap

    def headers(self, status: int, t: float) -> None:
        """The response status line and headers arrived ``t`` seconds after the request was sent."""
        self.status = status
        self.ttfb = t
        self._arrival(t)

    def error_body(self, body: bytes | str) -> None:
        """The body of a non-200 response: keep its error code, param and message."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        self._error = _error_of(text) or {"message": text[:500]}

    def frame(self, frame: Frame, t: float) -> str:
        """Record one frame that completed ``t`` seconds after the request was sent; returns its kind."""
        gap = self._arrival(t)
        kind = frame_kind(frame)
        self.bytes += frame.nbytes
        if kind == "keepalive":
            self._keepalive += 1
        elif kind == "comment":
            self._comment += 1
        else:
            self._data_frame(kind, frame.data or "", t)
        if self.frames is not None:
            self.frames.append((len(self.frames), kind, t, gap, frame.nbytes))
        return kind

    def _data_frame(self, kind: str, data: str, t: float) -> None:
        self._data += 1
        if self._last_data_t is not None:
            gap = t - self._last_data_t
            if self._max_data_gap is None or gap > self._max_data_gap:
                self._max_data_gap = gap
        self._last_data_t = t
        if kind == "done":
            self.done = True
        elif kind == "error":
            if self._error is None:
                self._error = _error_of(data)
        elif self._ttft is None or '"usage"' in data:
            payload = json.loads(data)
            if self._ttft is None and _carries_token(payload):
                self._ttft = t
            if isinstance(payload.get("usage"), dict):
                self._usage = payload["usage"]

    def finish(self, t: float, failure: str | None = None) -> RequestRow:
        """The stream ended ``t`` seconds after it was sent. ``failure`` is ``"timeout"``,
        ``"connect_error"`` or ``"stopped"`` when the client, not the server, ended it."""
        self._arrival(t)
        error = self._error or {}
        usage = self._usage or {}
        code = error.get("code")
        plan = self.plan
        return RequestRow(
            request_id=plan.request_id, name=plan.name, route=plan.route, client=plan.client, worker=self.worker,
            start_time=self.start_time, prompt_tokens=plan.prompt_tokens, max_tokens=plan.max_tokens,
            truncate_prompt_tokens=plan.truncate_prompt_tokens, expected=plan.expected, status=self.status,
            outcome=self._outcome(failure), error_code=None if code is None else str(code),
            error_param=_str_or_none(error.get("param")), error_message=_str_or_none(error.get("message")),
            usage_prompt_tokens=usage.get("prompt_tokens"), usage_completion_tokens=usage.get("completion_tokens"),
            ttfb_s=self.ttfb, ttft_s=self._ttft, duration_s=t, data_frames=self._data,
            keepalive_frames=self._keepalive, comment_frames=self._comment, bytes=self.bytes,
            max_gap_s=self._max_gap, max_data_gap_s=self._max_data_gap,
            silence_before_first_token_s=None if self.ttfb is None else (self._ttft or t) - self.ttfb, done=self.done,
        )  # fmt: skip

    def _outcome(self, failure: str | None) -> str:
        status = self.status
        if status is None:
            return failure or "connect_error"
        if status >= 500:
            return "http_5xx"
        if not 200 <= status < 300:
            return "rejected"
        if self._error is not None:
            return "inband_error"
        if self.done:
            return "ok"
        if failure in ("timeout", "stopped"):
            return failure
        return "cut"


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
