"""Locust users that stream and tell the truth about each stream.

``SSEUser`` (on Locust's ``FastHttpUser``) reads the raw event stream line by line, timestamps
each frame when its last line arrives, and reports the request to Locust when the stream ENDS,
with its real duration and outcome (Locust itself would report a stream at header time and count
a cut stream as a success). ``OpenAISDKUser`` sends the same requests through the official
``openai`` client, to show that a real client survives the same streams (keep-alive comments are
invisible to it, so it counts none). A request counts as a success in Locust's statistics when
its outcome is the one its spec expects; the run's gates judge the rest.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, ClassVar

import gevent
import httpx
import openai
from geventhttpclient.response import HTTPParseError
from locust import FastHttpUser, User

from loadtests.outcome import RequestPlan, RequestRow, StreamTracker
from loadtests.run_state import RunState, run_state
from loadtests.sse import Frame, SSEParser
from loadtests.workload import PreparedRequest, RequestMix

REQUEST_TYPE = "SSE"


class UnexpectedOutcome(Exception):
    """The failure Locust's statistics show for a request whose outcome was not the expected one."""


class _StreamingUser:
    """What both users share: the mix they draw from, the life of one request, and its report.
    A subclass says how it streams, in ``_stream_into``."""

    mix: ClassVar[RequestMix]
    client_kind: ClassVar[str]
    environment: Any
    host: str

    def send_next(self) -> RequestRow:
        """Send the next request of the mix and return its row (already recorded and reported)."""
        return self.send(self.next_request())

    def send(self, request: PreparedRequest) -> RequestRow:
        plan = self.plan(request)
        tracker = StreamTracker(plan, time.time(), self.harness.worker)
        started = time.monotonic()
        try:
            failure = self._stream_into(request, tracker, started)
        except gevent.GreenletExit:  # the run is stopping this user mid-stream
            self.report(tracker.finish(time.monotonic() - started, "stopped"), tracker.frames, request.path)
            raise
        row = tracker.finish(time.monotonic() - started, failure)
        self.report(row, tracker.frames, request.path)
        return row

    def _stream_into(self, request: PreparedRequest, tracker: StreamTracker, started: float) -> str | None:
        """Send ``request`` and feed ``tracker``; return ``"timeout"``/``"connect_error"`` when the
        client, not the server, ended it (times are ``time.monotonic() - started``)."""
        raise NotImplementedError

    @property
    def harness(self) -> RunState:
        return run_state(self.environment)

    def next_request(self) -> PreparedRequest:
        return self.harness.prepared_mix(self.mix, self.host).draw()

    def plan(self, request: PreparedRequest) -> RequestPlan:
        spec = request.spec
        return RequestPlan(
            request_id=uuid.uuid4().hex,
            name=f"{spec.route}:{spec.label}",
            route=spec.route,
            client=self.client_kind,
            prompt_tokens=request.prompt_tokens,
            max_tokens=spec.max_tokens,
            truncate_prompt_tokens=spec.truncate_prompt_tokens,
            expected=spec.expected,
        )

    def report(self, row: RequestRow, frames: list[Any] | None, url: str) -> None:
        """Record the row and report it to Locust: success iff the outcome is the expected one."""
        harness = self.harness
        harness.recorder.add(row, frames if harness.keeps_frames(row.request_id, row.outcome) else None)
        if row.outcome == "stopped":
            return  # the run ended it; no verdict for Locust's statistics either
        exception = None
        if row.outcome != (row.expected or "ok"):
            what = f" {row.error_code}/{row.error_param}" if row.error_code else ""
            exception = UnexpectedOutcome(f"{row.outcome} (HTTP {row.status}{what}), expected {row.expected}")
        self.environment.events.request.fire(
            request_type=REQUEST_TYPE, name=row.name, response_time=row.duration_s * 1000.0,
            response_length=row.bytes, response=None, exception=exception, url=url, start_time=row.start_time,
            context={"request_id": row.request_id, "outcome": row.outcome},
        )  # fmt: skip


class SSEUser(_StreamingUser, FastHttpUser):
    """Streams over raw HTTP; set ``mix`` and call ``send_next()`` from a task."""

    abstract = True
    client_kind = "raw"
    max_retries = 0  # a retried POST would be a second stream, counted as one
    connection_timeout = 10.0
    # network_timeout (the client idle timeout) is set per run from --client-idle-timeout.

    def _stream_into(self, request: PreparedRequest, tracker: StreamTracker, started: float) -> str | None:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                   "Accept-Encoding": "identity", "X-Request-Id": tracker.plan.request_id}  # fmt: skip
        if self.harness.api_key:
            headers["Authorization"] = f"Bearer {self.harness.api_key}"
        payload = json.dumps(request.stream_body(self.harness.model))
        # catch_response without a with-block: Locust reports nothing; report() does, at the end.
        response = self.client.request("POST", request.path, data=payload, headers=headers, stream=True,
                                       catch_response=True, name=tracker.plan.name)  # fmt: skip
        return self._read(response, tracker, started)

    @staticmethod
    def _read(response: Any, tracker: StreamTracker, started: float) -> str | None:
        """Read the response into ``tracker``; returns ``"timeout"``/``"connect_error"`` when the
        client, not the server, ended it."""
        status = getattr(response, "status_code", 0) or 0
        if not status:
            error = getattr(response, "error", None)
            return "timeout" if isinstance(error, TimeoutError) else "connect_error"
        tracker.headers(status, time.monotonic() - started)
        raw = response._response  # geventhttpclient's response: the only handle on the live socket
        try:
            if status != 200:
                tracker.error_body(response.content or b"")
                return None
            feed_line = SSEParser().feed_line
            readline, now, on_frame = raw.readline, time.monotonic, tracker.frame
            while line := readline(b"\n"):
                t = now() - started
                for frame in feed_line(line, t):
                    on_frame(frame, t)
        except TimeoutError:
            return "timeout"
        except (HTTPParseError, OSError):
            return None  # the connection ended mid-body: the tracker sees no [DONE] and says "cut"
        finally:
            raw.release()
        return None


class OpenAISDKUser(_StreamingUser, User):
    """Streams through the official ``openai`` client; set ``mix`` and call ``send_next()``."""

    abstract = True
    client_kind = "openai"

    def on_start(self) -> None:
        self.sdk = openai.OpenAI(base_url=f"{self.host}/v1", api_key=self.harness.api_key or "unused", max_retries=0,
                                 timeout=openai.Timeout(self.harness.client_idle_timeout, connect=10.0))  # fmt: skip

    def on_stop(self) -> None:
        self.sdk.close()

    def _stream_into(self, request: PreparedRequest, tracker: StreamTracker, started: float) -> str | None:
        body = request.stream_body(self.harness.model)
        create = self.sdk.chat.completions.create if request.spec.route == "chat" else self.sdk.completions.create
        return self._read(create, body, tracker.plan.request_id, tracker, started)

    @staticmethod
    def _read(create: Any, body: dict[str, Any], request_id: str, tracker: StreamTracker, started: float) -> str | None:
        extra = {key: body.pop(key) for key in ("truncate_prompt_tokens",) if key in body}
        try:
            with create(**body, extra_body=extra or None, extra_headers={"X-Request-Id": request_id}) as stream:
                tracker.headers(stream.response.status_code, time.monotonic() - started)
                for chunk in stream:
                    t = time.monotonic() - started
                    tracker.frame(_sdk_frame(chunk.model_dump_json(exclude_unset=True)), t)
            tracker.frame(_sdk_frame("[DONE]"), time.monotonic() - started)
        except openai.APIStatusError as exc:
            tracker.headers(exc.status_code, time.monotonic() - started)
            tracker.error_body(exc.response.content)
        except (openai.APITimeoutError, httpx.TimeoutException):
            return "timeout"
        except (openai.APIConnectionError, httpx.TransportError):
            return None if tracker.status else "connect_error"  # after the headers: a cut stream
        except openai.APIError as exc:  # an in-band error frame
            tracker.frame(_sdk_frame(json.dumps({"error": exc.body or {"message": exc.message}})),
                          time.monotonic() - started)  # fmt: skip
        return None


def _sdk_frame(data: str) -> Frame:
    """A frame rebuilt from what the SDK hands over (it hides the wire, comments included)."""
    return Frame(t=0.0, nbytes=len(data) + 8, data=data)
