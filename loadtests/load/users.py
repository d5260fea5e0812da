"""Locust users that stream and tell the truth about each stream.

``SSEUser`` (on Locust's ``FastHttpUser``) reads the raw event stream as its bytes arrive,
timestamps each frame with the time its last byte reached the machine (the kernel's receive stamp,
so a busy event loop does not move it; ``loadtests.client.kernel_stamps``), and reports the request to Locust when the
stream ENDS, with its real duration and outcome (Locust itself would report a stream at header
time and count a cut stream as a success). ``OpenAISDKUser`` sends the same requests through the
official ``openai`` client, to show that a real client survives the same streams; it records what
the SDK handed over (keep-alive comments are invisible to it: its comment counts are null) and,
through a ``WireTap`` below the SDK, whether the stream really ended with ``[DONE]``. For the same
bytes both users give the same outcome. A request counts as a success in Locust's statistics
when its outcome is the one its spec expects; the run's gates judge the rest.

A user class is its mix: ``class U(SSEUser): mix = MIX`` sends ``MIX``'s requests one after the
other through the default task (``send_next``). A class that declares tasks of its own (``@task``
or ``tasks``) runs those instead: its tasks replace the default (Locust alone would add them to it).

No request is lost to the harness: an exception of ours in a request's path becomes a row with
outcome ``harness_error`` (logged once per distinct message), never a traceback per task.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import time
import uuid
from typing import Any, ClassVar

import gevent
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from locust import FastHttpUser, User
from locust.env import Environment
from locust.exception import StopUser

from loadtests.base.locust_entry import install_where_locust_runs
from loadtests.base.safe_text import printable, without_header_values
from loadtests.client import framing, response_end
from loadtests.client.outcome import INVALID_UTF8, Outcome, RequestPlan, RequestRow, StreamTracker
from loadtests.client.raw_body import RawBody
from loadtests.client.sse import SSEParser
from loadtests.client.tls import client_context, raw_client_context
from loadtests.client.wire_tap import WireTap
from loadtests.declare.workload import PreparedRequest, RequestMix
from loadtests.errors import LineTooLong, ScheduleClosed, StreamBroken, UnexpectedOutcome, error_kind, exception_chain
from loadtests.load.failure_cycles import forget_failure, forget_traceback
from loadtests.load.open_loop import Ticket
from loadtests.load.pacing import pause_after
from loadtests.load.state import RunState, run_state

REQUEST_TYPE = "SSE"
_stream_keys = itertools.count()
"""A key per stream sent by this process, for ``RunState.streams_open``."""
SDK_PARAMETERS = frozenset({"model", "prompt", "messages", "max_tokens", "stream", "stream_options"})
"""Body fields the openai SDK's ``create`` takes as keywords; it sends any other as ``extra_body``."""
HARNESS_ERROR_PAUSE_S = 1.0
"""A user whose request failed inside sse-soak waits this long before its next one: a harness bug
must not turn into a tight loop of failing rows."""
logger = logging.getLogger(__name__)
_harness_errors_logged: set[str] = set()
"""Messages already logged with their traceback in this process: each is logged once, counted in rows."""


CLOSED_BEFORE_ANY_BYTE = "the server closed or reset the connection before any response"
HEADERS_TOO_LARGE = "malformed HTTP response: headers over 100 KiB"
BOTH_LENGTHS = "malformed HTTP response: both Content-Length and Transfer-Encoding (RFC 9112 6.1)"
IDLE_BEFORE_HEADERS = "no response headers within the client's idle timeout (--client-idle-timeout)"
IDLE_IN_BODY = "no byte for the client's idle timeout (--client-idle-timeout) after the headers"
"""The ``error_message`` of rows the client ended (``StreamTracker.client_ended``): the two clients
word the same cause alike."""


_OUR_LIMITS = {
    errno.EMFILE: "sse-soak ran out of file descriptors (this process's limit, `ulimit -n`): raise it, or run "
    "fewer users per process (--processes)",
    errno.ENFILE: "the machine ran out of file descriptors (the system's limit, fs.file-max): run fewer users",
    errno.ENOBUFS: "the machine ran out of socket buffers: run fewer users",
    errno.ENOMEM: "sse-soak's machine ran out of memory: run fewer users, or keep fewer frames (--frame-sample-rate)",
    errno.EADDRNOTAVAIL: "the machine ran out of local ports for new connections: run fewer users, or reuse "
    "connections",
}
"""The load generator's own limits, by errno, each with its fix: a request that failed on one is a
``harness_error``, never the server's ``connect_error``."""


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in exception_chain(exc))


def harness_cause(exc: BaseException) -> str | None:
    """The load generator's own limit behind ``exc`` (it or any exception it was raised from), said
    with its fix; None when the failure is the network's or the server's."""
    for link in exception_chain(exc):
        if isinstance(link, MemoryError):
            return _OUR_LIMITS[errno.ENOMEM]
        if isinstance(link, OSError) and link.errno in _OUR_LIMITS:
            return f"{_OUR_LIMITS[link.errno]} ({os.strerror(link.errno)})"
    return None


def _describe(exc: BaseException) -> str:
    """The exception in one line for a row's ``error_message``: never a header value it quotes."""
    return without_header_values(f"{error_kind(exc)}: {exc}")


def _send_next(user: StreamingUser) -> None:
    """The default task: the next request of the user's mix, at once (closed loop) or when the run's
    arrival schedule says (open loop, ``loadtests.load.open_loop``)."""
    user.harness.admission.wait()  # a worker sends nothing until its master admitted it to the run
    schedule = user.harness.arrivals
    if schedule is None:
        user.send_next()
        return
    try:
        user._ticket = schedule.acquire()
    except ScheduleClosed:
        raise StopUser from None  # the user's test is stopping; Locust ends the user as it ends any other
    try:
        user.send_next()
    finally:
        user._ticket = None
        schedule.release()


class StreamingUser:
    """What both users share: the mix they draw from, the default task, the life of one request,
    and its report. A subclass says how it streams, in ``_stream_into``."""

    mix: ClassVar[RequestMix]
    client_kind: ClassVar[str]
    sees_comments: ClassVar[bool] = True
    tasks: ClassVar[list[Any]] = [_send_next]
    """Locust collects a user class's tasks from its bases' ``tasks``: every subclass starts with this."""
    environment: Environment
    host: str | None
    _ticket: Ticket | None = None
    """The open-loop ticket of the request under way, if any."""
    _retry_after: str | None = None
    """The ``Retry-After`` header of the last answer, if it had one (``loadtests.load.pacing``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Invariant: a class's tasks are the default task alone, or only the tasks it (or a base
        below ``SSEUser``/``OpenAISDKUser``) declared."""
        super().__init_subclass__(**kwargs)
        own = [declared for declared in cls.tasks if declared is not _send_next]
        if own:
            cls.tasks = own
        if not getattr(cls, "abstract", True):  # a locustfile's user: Locust runs it, with the controller
            install_where_locust_runs()

    def send_next(self) -> RequestRow:
        """Send the next request of the mix and return its row (already recorded and reported)."""
        try:
            request = self.next_request()
        except Exception as exc:  # ours: the request could not even be built
            return self._harness_failure(self._unprepared_plan(), exc)
        return self.send(request)

    def send(self, request: PreparedRequest) -> RequestRow:
        """Send ``request`` to its end; counted in ``streams_open`` while it is under way."""
        harness = self.harness
        key = next(_stream_keys)
        harness.streams_open[key] = time.monotonic()
        try:
            return self._send(request)
        finally:
            harness.streams_open.pop(key, None)

    def _send(self, request: PreparedRequest) -> RequestRow:
        plan = self.plan(request)
        harness = self.harness
        tracker = StreamTracker(plan, time.time(), harness.worker, self.sees_comments)
        harness.recorder.note_started()
        started = time.monotonic()
        deadline = harness.stream_deadline
        timer = gevent.Timeout(deadline)  # a BaseException raised into this greenlet: no except Exception stops it
        self._retry_after = None
        try:
            with timer:
                failure = self._stream_into(request, tracker, started)
        except gevent.Timeout as fired:
            if fired is not timer:
                raise
            tracker.client_ended(
                f"still open {deadline:g} s after it was sent (--stream-deadline): the server neither ended nor "
                "failed it"
            )
            failure = Outcome.TIMEOUT
        except gevent.GreenletExit:  # the run is stopping this user mid-stream
            open_s = time.monotonic() - started
            ended = self.harness.ended_by_the_run(tracker, open_s)
            self.report(tracker.finish(open_s, ended), tracker.frames, request.path)
            raise
        except Exception as exc:
            return self._harness_failure(plan, exc, tracker, started)
        row = tracker.finish(time.monotonic() - started, failure)
        self.report(row, tracker.frames, request.path)
        pause = pause_after(row, self._retry_after)
        if pause:  # a connect error or an instant error answer: never a loop of them (loadtests.load.pacing)
            gevent.sleep(pause)
        return row

    def _harness_failure(
        self, plan: RequestPlan, exc: Exception, tracker: StreamTracker | None = None, started: float | None = None
    ) -> RequestRow:
        """Record a request that failed inside sse-soak, log the first of each kind, and pause."""
        message = _describe(exc)
        if message not in _harness_errors_logged:
            _harness_errors_logged.add(message)
            logger.error(
                "sse-soak: harness error (logged once, counted as harness_error rows): %s",
                printable(message),
                exc_info=exc,
            )
        if tracker is None:  # a request that could not even be built: started and ended here
            self.harness.recorder.note_started()
            tracker = StreamTracker(plan, time.time(), self.harness.worker, self.sees_comments)
        tracker.harness_error(message)
        row = tracker.finish(0.0 if started is None else time.monotonic() - started)
        self.report(row, tracker.frames, plan.route)
        gevent.sleep(HARNESS_ERROR_PAUSE_S)
        return row

    def _stream_into(self, request: PreparedRequest, tracker: StreamTracker, started: float) -> Outcome | None:
        """Send ``request`` and feed ``tracker``; return ``"timeout"``/``"connect_error"`` when the
        client, not the server, ended it (times are ``time.monotonic() - started``)."""
        raise NotImplementedError

    @property
    def harness(self) -> RunState:
        return run_state(self.environment)

    @property
    def target(self) -> str:
        """The run's base URL (Locust's ``host``), never None here: the scenario's preflight refuses
        a run without one before any user starts."""
        assert self.host is not None
        return self.host

    def next_request(self) -> PreparedRequest:
        return self.harness.prepared_mix(self.mix, self.target).draw()

    def plan(self, request: PreparedRequest) -> RequestPlan:
        spec = request.spec
        return RequestPlan(
            request_id=uuid.uuid4().hex,
            name=f"{spec.route}:{spec.label}",
            route=spec.route,
            client=self.client_kind,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.max_tokens,
            truncate_prompt_tokens=spec.truncate_prompt_tokens,
            expected=spec.expected,
        )

    def _unprepared_plan(self) -> RequestPlan:
        """The plan of a request that could not be built: named after the mix's first spec."""
        spec = self.mix.specs[0]
        return RequestPlan(
            uuid.uuid4().hex,
            f"{spec.route}:{spec.label}",
            spec.route,
            self.client_kind,
            max_tokens=spec.max_tokens,
            truncate_prompt_tokens=spec.truncate_prompt_tokens,
            expected=spec.expected,
        )

    def report(self, row: RequestRow, frames: list[Any] | None, url: str) -> None:
        """Record the row and report it to Locust: success iff the outcome is the expected one."""
        harness = self.harness
        row.harness_lag_max_s = harness.lag.worst_since(time.monotonic() - row.duration_s)
        if self._ticket is not None:
            row.scheduled_time = self._ticket.due_epoch
            row.start_lateness_s = max(0.0, row.start_time - self._ticket.due_epoch)
        harness.recorder.add(row, frames if harness.keeps_frames(row.request_id, row.outcome) else None)
        harness.note_finished(row)
        harness.learn_pace(row)
        if row.outcome == Outcome.STOPPED:
            return  # the run ended it; no verdict for Locust's statistics either
        exception = None
        if row.outcome != (row.expected or Outcome.OK):
            what = f" {row.error_code}/{row.error_param}" if row.error_code else ""
            quoted = row.outcome in (Outcome.PROTOCOL_ERROR, Outcome.HARNESS_ERROR)
            why = f": {printable(row.error_message)}" if quoted else ""  # the server's words, shown by Locust
            exception = UnexpectedOutcome(f"{row.outcome} (HTTP {row.status}{what}), expected {row.expected}{why}")
        self.environment.events.request.fire(
            request_type=REQUEST_TYPE,
            name=row.name,
            response_time=row.duration_s * 1000.0,
            response_length=row.bytes,
            response=None,
            exception=exception,
            url=url,
            start_time=row.start_time,
            context={"request_id": row.request_id, "outcome": row.outcome},
        )


response_end.install()  # a response ends where its framing says, as it does for the openai client
framing.install()  # the openai client's h11 reads chunk size lines and excess after a response as the raw client does


class SSEUser(StreamingUser, FastHttpUser):
    """Streams over raw HTTP; a subclass sets ``mix`` (and ``weight``, as any Locust user)."""

    abstract = True
    client_kind = "raw"
    max_retries = 0  # a retried POST would be a second stream, counted as one
    max_redirects = 0  # a 3xx is the row's answer: following it sends the stream (and the key) elsewhere
    ssl_context_factory = staticmethod(raw_client_context)  # the run's trust, as every client's (loadtests.client.tls)
    insecure = False  # Locust's default verifies nothing; --insecure sets it per run
    connection_timeout = 10.0
    # network_timeout (the client idle timeout) is set per run from --client-idle-timeout.

    def _stream_into(self, request: PreparedRequest, tracker: StreamTracker, started: float) -> Outcome | None:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            "X-Request-Id": tracker.plan.request_id,
        }
        authorization = self.harness.authorization_for(self.target)
        if authorization:
            headers["Authorization"] = authorization
        payload = request.stream_payload(self.harness.model)
        # catch_response without a with-block: Locust reports nothing; report() does, at the end.
        response = self.client.request(
            "POST",
            request.path,
            data=payload,  # type: ignore[arg-type]  # Locust annotates str | dict; its docstring and client take bytes
            headers=headers,
            stream=True,
            catch_response=True,
            name=tracker.plan.name,
        )
        answered = getattr(response, "headers", None)  # None: no answer (an error response)
        self._retry_after = answered.get("retry-after") if answered is not None else None
        return self._read(response, tracker, started, self.harness.max_line_bytes)

    @staticmethod
    def _read(response: Any, tracker: StreamTracker, started: float, max_line_bytes: int) -> Outcome | None:
        """Read the response into ``tracker``; returns ``"timeout"``/``"connect_error"`` when the
        client, not the server, ended it. Stops at the stream's terminal frame (``[DONE]``, an error
        frame, a protocol error), as the SDK does; the connection is reused only when its body had ended."""
        status = getattr(response, "status_code", 0) or 0
        if not status:
            error = getattr(response, "error", None)
            if isinstance(error, HTTPConnectionClosed):  # closed or reset before a single byte came back
                tracker.client_ended(CLOSED_BEFORE_ANY_BYTE)
                return Outcome.CONNECT_ERROR
            if isinstance(error, HTTPParseError):  # bytes came back, but not an HTTP response
                tracker.protocol_error(malformed_response(str(error)))
                return Outcome.PROTOCOL_ERROR
            if isinstance(error, TimeoutError):
                tracker.client_ended(IDLE_BEFORE_HEADERS)
                return Outcome.TIMEOUT
            if error is not None and (ours := harness_cause(error)) is not None:
                tracker.harness_error(ours)  # never charged to the server
                return None
            tracker.client_ended(_describe(error) if error is not None else "no response and no error to say why")
            return Outcome.CONNECT_ERROR
        raw = response._response  # geventhttpclient's response: the only handle on the live socket
        headers = response.headers
        tracker.headers(
            status,
            time.monotonic() - started,
            headers.get("content-type"),
            content_encoding=headers.get("content-encoding"),
            location=headers.get("location"),
            server=headers.get("server"),
            via=headers.get("via"),
        )
        body: RawBody | None = None
        try:
            if not 200 <= status < 300:
                if raw.body_failure is not None:  # its body's framing broke in the read of its head
                    return None  # the status judges it, as the SDK judges it
                tracker.error_body(response.content or b"")  # Locust has read it (raise_for_status)
                return None
            if tracker.broken:
                return None  # not an event stream: nothing in it to read
            body = RawBody(raw, SSEParser(max_line_bytes), tracker, started)
            try:
                if body.read_to_end():
                    body.keep_connection_if_whole()
                    return None  # the stream ended at a frame ([DONE], an error, a broken one): read no further
            except gevent.GreenletExit as ending:  # the run ends: what had arrived is the stream's, not lost
                with contextlib.suppress(HTTPParseError, OSError, LineTooLong):  # never keeps the user alive
                    body.take_arrived_already()
                raise ending
            if body.parser.invalid_utf8:  # in a frame the body ended before completing
                tracker.protocol_error(INVALID_UTF8)
        except LineTooLong as exc:
            assert body is not None  # only the body's parser raises it
            body.take_whole_frames(exc.frames)
            tracker.protocol_error(str(exc))
        except TimeoutError:
            tracker.client_ended(IDLE_IN_BODY)
            return Outcome.TIMEOUT
        except (HTTPParseError, OSError):
            return None  # the connection ended mid-body: the tracker sees no [DONE] and says "cut"
        finally:
            raw.release()  # back to the pool only when the body was read to its end; closed otherwise
            forget_failure(response)
        return None


_PARSER_WORDS = (
    (("Expected HTTP/", "illegal status line"), "malformed HTTP response: not an HTTP status line"),
    (
        (
            "Content-Length can't be present with Transfer-Encoding",
            "Transfer-Encoding can't be present with Content-Length",
        ),
        BOTH_LENGTHS,
    ),
    ((response_end.HEAD_TOO_LARGE,), HEADERS_TOO_LARGE),  # h11 (both clients' head parser): over 100 KiB
)
"""What geventhttpclient's parser (llhttp) and the openai client's (h11) say of the same fault,
in one wording: both clients give the same reason for the same bytes."""


def malformed_response(detail: str) -> str:
    """The ``error_message`` of a response either client's HTTP parser refused."""
    for said, wording in _PARSER_WORDS:
        if any(words in detail for words in said):
            return wording
    return f"malformed HTTP response: {detail}"


def _sdk() -> Any:
    """The ``openai`` package, imported on first use: it and pydantic cost about 0.5 s of CPU at
    start-up, which a run with only raw users never needs. A locustfile that defines an
    ``OpenAISDKUser`` imports it while it loads, before the test starts (never on the event loop)."""
    import openai

    return openai


class OpenAISDKUser(StreamingUser, User):
    """Streams through the official ``openai`` client; a subclass sets ``mix``."""

    abstract = True
    client_kind = "openai"
    sees_comments = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _sdk()  # while the locustfile loads: the first SDK user must not import it mid-run

    def on_start(self) -> None:
        openai = _sdk()
        self.wire = WireTap(self.harness.max_line_bytes)
        # one TLS context per process: each client building its own costs ~30 ms on the loop. The SDK's
        # client follows redirects unless told not to; a 3xx is the row's answer, as for the raw user.
        http_client = openai.DefaultHttpxClient(
            verify=client_context(),
            follow_redirects=False,
            event_hooks={"response": [self.wire, self._note_retry_after]},
            headers={"Accept-Encoding": "identity"},  # as the raw client asks: a compressed stream is refused
        )
        self.sdk = openai.OpenAI(
            base_url=f"{self.target}/v1",
            api_key=self.harness.api_key or "unused",
            # Basic auth taken out of --host replaces the SDK's bearer header (the URL carries none)
            default_headers=self.harness.headers_for(self.target) or None,
            max_retries=0,
            timeout=openai.Timeout(self.harness.client_idle_timeout, connect=10.0),
            http_client=http_client,
        )

    def on_stop(self) -> None:
        self.sdk.close()

    def _note_retry_after(self, response: Any) -> None:
        """Every answer the SDK's client gets: its ``Retry-After``, for the pacing after it."""
        self._retry_after = response.headers.get("retry-after")

    def _stream_into(self, request: PreparedRequest, tracker: StreamTracker, started: float) -> Outcome | None:
        body = request.stream_body(self.harness.model)
        create = self.sdk.chat.completions.create if request.spec.route == "chat" else self.sdk.completions.create
        self.wire.last = None
        try:
            return self._read(create, body, tracker, started)
        except Exception as exc:
            answered = self.wire.last
            if answered is None or answered.status is None or not isinstance(exc, answered.transport_errors):
                raise
            # The SDK reads an error answer's body before it raises, outside its own error handling: a
            # body whose framing breaks is what the raw client meets too. The status judges the answer.
            if answered.both_lengths:
                tracker.protocol_error(BOTH_LENGTHS)
                return Outcome.PROTOCOL_ERROR
            tracker.headers(answered.status, time.monotonic() - started, server=answered.server, via=answered.via)
            forget_traceback(exc)
            return None
        finally:
            wire = self.wire.last
            if wire is not None and tracker.status is not None and 200 <= tracker.status < 300:
                tracker.wire_ended(wire.done, wire.bytes, wire.problem, wire.data_frames)

    @staticmethod
    def _read(create: Any, body: dict[str, Any], tracker: StreamTracker, started: float) -> Outcome | None:
        openai = _sdk()
        # The SDK's own parameters as keywords; the rest (truncate_prompt_tokens, a spec's extra_body) as
        # extra_body, sent as they are, as the raw client sends them.
        extra = {key: body.pop(key) for key in list(body) if key not in SDK_PARAMETERS}
        try:
            with create(
                **body, extra_body=extra or None, extra_headers={"X-Request-Id": tracker.plan.request_id}
            ) as stream:
                response = stream.response
                headers = response.headers
                if "content-length" in headers and "transfer-encoding" in headers:
                    tracker.protocol_error(BOTH_LENGTHS)  # the raw client's parser refuses it before the status
                    return Outcome.PROTOCOL_ERROR
                tracker.headers(
                    response.status_code,
                    time.monotonic() - started,
                    headers.get("content-type"),
                    content_encoding=headers.get("content-encoding"),
                    server=headers.get("server"),
                    via=headers.get("via"),
                )
                if tracker.broken:
                    return None  # not an event stream: the SDK would find no events in it
                for chunk in stream:
                    tracker.payload(_handed_over(chunk), time.monotonic() - started)
                    if tracker.broken:
                        return None
        except (openai.APIError, json.JSONDecodeError, UnicodeDecodeError, LineTooLong, StreamBroken) as exc:
            failure = _sdk_failure(exc, tracker, time.monotonic() - started)
            forget_traceback(exc)
            return failure
        return None


def _sdk_failure(exc: Exception, tracker: StreamTracker, t: float) -> Outcome | None:
    """Record what the SDK raised ``t`` seconds into the request; returns ``"timeout"``,
    ``"connect_error"`` or ``"protocol_error"`` when the client, not the server, ended it."""
    openai = _sdk()
    if isinstance(exc, openai.APIStatusError):
        answered = exc.response.headers
        if "content-length" in answered and "transfer-encoding" in answered:
            tracker.protocol_error(BOTH_LENGTHS)  # whatever the status: the raw client's parser refuses it
            return Outcome.PROTOCOL_ERROR
        server, via = answered.get("server"), answered.get("via")
        tracker.headers(exc.status_code, t, location=answered.get("location"), server=server, via=via)
        tracker.error_body(exc.response.content)
    elif isinstance(exc, openai.APITimeoutError):
        tracker.client_ended(IDLE_IN_BODY if tracker.status else IDLE_BEFORE_HEADERS)
        return Outcome.TIMEOUT
    elif isinstance(exc, openai.APIConnectionError):
        if tracker.status:
            return None  # after the headers: a cut stream
        cause = exc.__cause__
        if type(cause).__name__ == "RemoteProtocolError":  # httpx's or httpx2's
            if "without sending a response" in str(cause):  # closed or reset before a single byte
                tracker.client_ended(CLOSED_BEFORE_ANY_BYTE)
                return Outcome.CONNECT_ERROR
            tracker.protocol_error(malformed_response(str(cause)))
            return Outcome.PROTOCOL_ERROR
        ours = harness_cause(exc)
        if ours is not None:
            tracker.harness_error(ours)  # never charged to the server
            return None
        if _caused_by(exc, ConnectionResetError):  # reset before the headers: as the raw client words it
            tracker.client_ended(CLOSED_BEFORE_ANY_BYTE)
            return Outcome.CONNECT_ERROR
        tracker.client_ended(_describe(cause) if cause is not None else _describe(exc))
        return Outcome.CONNECT_ERROR
    elif isinstance(exc, openai.APIError):  # an in-band error frame
        error = exc.body if isinstance(exc.body, dict) else {"message": str(exc.body or exc.message)}
        tracker.payload({"error": error}, t)
    elif isinstance(exc, json.JSONDecodeError):  # the SDK could not decode a data frame
        tracker.undecodable_payload(t, exc.doc)
    elif isinstance(exc, UnicodeDecodeError):
        tracker.protocol_error(INVALID_UTF8)
    else:  # LineTooLong or StreamBroken, raised by the wire tap below the SDK
        tracker.protocol_error(str(exc))
    return None


def _handed_over(chunk: Any) -> Any:
    """What the SDK handed over, as plain data: its model's fields as sent (the SDK builds models
    without validation, so a count sent as ``"abc"`` stays a string), or the value itself when the
    frame was not an object (the SDK hands over lists and strings unchanged)."""
    return chunk.model_dump(exclude_unset=True, warnings=False) if isinstance(chunk, _sdk().BaseModel) else chunk
