"""Recorded reads of a faulted run of the bundled server, and their replay through the raw user's
hot path (``RawBody`` over a ``FramedResponse``, ``SSEParser``, ``StreamTracker``).

The fixture ``data/golden_reads.json.gz`` freezes, per stream, the bytes each receive brought with
its kernel stamp and read time, and the ``frames`` records and ``RequestRow`` the harness made of
them when it was captured. ``test_golden_reads.py`` replays the reads through today's code and
requires the same records, so an optimisation of the hot path that changes any frame's bytes,
stamp, classification or keep-alive count fails it. ``bench/hot_path.py`` replays the same reads
to time the path per frame.

Regenerate (only when a change of what is recorded is intended, and say so in the commit)::

    PYTHONPATH=. python -m tests.loadtests.load.golden_reads

It starts the bundled server on a free loopback port with injected faults (in-band errors, cuts,
stalls with keep-alives, 5xx, 429), sends chat and completions requests as the raw user sends them
(usage chunks asked for on some), reads each answer with ``recv_stamped`` at several read sizes
and pauses (frames split mid-frame, several frames per read), and replays the reads to get the
records. Invariant: a stream's replay is deterministic (only the recorded numbers go in).
"""

from __future__ import annotations

import base64
import gzip
import importlib
import json
import socket
import time
from pathlib import Path
from typing import Any

from geventhttpclient.response import HTTPParseError, HTTPResponse

from loadtests.client.kernel_stamps import keep_kernel_stamping_on, recv_stamped, stamp_arrivals
from loadtests.client.outcome import Outcome, RequestPlan, StreamTracker
from loadtests.client.raw_body import RawBody, take_buffered
from loadtests.client.response_end import FramedResponse
from loadtests.client.sse import SSEParser
from loadtests.errors import LineTooLong

FIXTURE = Path(__file__).parent / "data" / "golden_reads.json.gz"
MAX_LINE_BYTES = 1 << 20
Read = tuple[bytes, float | None, float]
"""One receive: its bytes, its kernel stamp (None: none came), when it was read (monotonic s)."""


def response_for(head: bytes) -> FramedResponse:
    """A ``FramedResponse`` to a POST fed ``head`` (the reads up to and including the one that
    completed the head), with no socket: what the raw client holds once ``request()`` returned."""
    raw = _unconnected_response()
    raw.feed(head)
    return raw


def _unconnected_response() -> FramedResponse:
    raw = FramedResponse.__new__(FramedResponse)
    HTTPResponse.__init__(raw, method="POST")
    raw._sock = raw._pool = None
    raw.block_size = 4096
    return raw


def replay(
    stream: dict[str, Any], reads: list[Read] | None = None, path: str = "python", readers: list[Any] | None = None
) -> tuple[list[list[Any]], dict[str, Any]]:
    """The stream's ``frames`` records and row dict, as ``SSEUser._read`` makes them from its reads
    (``reads`` in place of the recorded body reads, to replay them split otherwise), each read taken
    by ``path``: "python" (``RawBody.take_read``) or "compiled" (a ``_fastread.Reader``'s, appended to
    ``readers``)."""
    plan = RequestPlan(**stream["plan"])
    started = stream["started"]
    tracker = StreamTracker(plan, stream["start_time"], "local", True)
    raw = response_for(base64.b64decode(stream["head"]))
    head_at = stream["head_read_at"]
    headers = raw._headers_index

    def header(name: str) -> str | None:
        value = headers.get(name)
        return value if value is None or isinstance(value, str) else ", ".join(value)

    tracker.headers(
        raw.get_code(),
        head_at - started,
        header("content-type"),
        content_encoding=header("content-encoding"),
        location=header("location"),
        server=header("server"),
        via=header("via"),
    )
    if reads is None:
        reads = [(base64.b64decode(data), arrived, read_at) for data, arrived, read_at in stream["reads"]]
    failure = _read_body(raw, tracker, started, head_at, reads, path, readers)
    row = tracker.finish(stream["finish_at"] - started, failure)
    return [list(record) for record in tracker.frames], row.as_dict()


def _read_body(
    raw: FramedResponse,
    tracker: StreamTracker,
    started: float,
    head_at: float,
    reads: list[Read],
    path: str = "python",
    readers: list[Any] | None = None,
) -> Any:
    """``SSEUser._read`` from the status on, its reads taken from ``reads`` instead of the mux."""
    status = raw.get_code()
    if not 200 <= status < 300:
        for data, _arrived, _read_at in reads:
            if raw.message_complete:
                break
            raw.feed(data)
        tracker.error_body(take_buffered(raw))
        return None
    if tracker.broken:
        return None
    body = RawBody(raw, SSEParser(MAX_LINE_BYTES), tracker, started)
    try:
        if raw._body_buffer and body.take(take_buffered(raw), None, head_at):
            return None
        if raw.body_failure is not None:
            raise raw.body_failure
        if not raw.message_complete:
            take_read = body.take_read
            if path == "compiled":
                reader = importlib.import_module("loadtests.client._fastread").Reader(body)
                take_read = reader.take_read
                if readers is not None:
                    readers.append(reader)
            for data, arrived, read_at in reads:
                if take_read(data, arrived, read_at):
                    return None
        if body.parser.invalid_utf8:
            tracker.protocol_error("bytes that are not UTF-8 in the event stream")
    except LineTooLong as exc:
        body.take_whole_frames(exc.frames)
        tracker.protocol_error(str(exc))
    except (HTTPParseError, OSError):
        return None
    return None


def load() -> list[dict[str, Any]]:
    """The fixture's streams."""
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as file:
        return json.load(file)["streams"]


# --- capture -------------------------------------------------------------------------------------

_SHAPES = (  # (read size, pause before each read in s): how the reads are cut
    (4096, 0.0),  # one wake a frame, as at low concurrency
    (23, 0.0),  # frames and chunk-size lines split mid-way
    (4096, 0.012),  # several frames a read
    (61, 0.004),  # both
)


def _request(route: str, max_tokens: int, usage: bool, seq: int) -> tuple[bytes, RequestPlan]:
    if route == "chat":
        path = "/v1/chat/completions"
        body: dict[str, Any] = {"messages": [{"role": "user", "content": f"tell me a story {seq}"}]}
    else:
        path = "/v1/completions"
        body = {"prompt": f"once upon a time {seq}"}
    body.update(model="sse-soak/tiny-sim", max_tokens=max_tokens, stream=True)
    if usage:
        body["stream_options"] = {"include_usage": True}
    payload = json.dumps(body).encode()
    request_id = f"golden-{seq:03d}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nAccept-Encoding: identity\r\nX-Request-Id: {request_id}\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    plan = RequestPlan(request_id, f"{route}:golden", route, "raw", max_tokens=max_tokens)
    return head + payload, plan


def _capture_one(port: int, route: str, max_tokens: int, usage: bool, seq: int) -> dict[str, Any]:
    size, pause = _SHAPES[seq % len(_SHAPES)]
    message, plan = _request(route, max_tokens, usage, seq)
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        stamp_arrivals(sock)
        start_time = time.time()
        started = time.monotonic()
        sock.sendall(message)
        raw = _unconnected_response()
        head = b""
        head_at = started
        reads: list[list[Any]] = []
        while True:
            if pause and raw._head is None:
                time.sleep(pause)
            data, arrived, read_at = recv_stamped(sock, size)
            if raw._head is not None:
                head += data
                head_at = read_at
                if not data:
                    raise ConnectionError("closed before the head")
            else:
                reads.append([base64.b64encode(data).decode(), arrived, read_at])
            try:
                raw.feed(data)
            except (HTTPParseError, OSError):
                break
            if not data or raw.message_complete:
                break
        finish_at = time.monotonic()
    finally:
        sock.close()
    return {
        "plan": {
            "request_id": plan.request_id,
            "name": plan.name,
            "route": plan.route,
            "client": plan.client,
            "max_tokens": plan.max_tokens,
        },
        "start_time": start_time,
        "started": started,
        "head": base64.b64encode(head).decode(),
        "head_read_at": head_at,
        "reads": reads,
        "finish_at": finish_at,
        "shape": [size, pause],
    }


def capture(streams: int = 48) -> list[dict[str, Any]]:
    """Capture ``streams`` streams from a bundled server with faults injected; each with its records."""
    from loadtests.services.stack import TargetServerProcess

    keep_kernel_stamping_on()
    server = TargetServerProcess.start(
        (
            "--failure-injection-rate",
            "45",
            "--stall-seconds",
            "0.08",
            "--sse-keep-alive-interval",
            "0.02",
            "--inter-token-latency",
            "3",
            "--time-to-first-token",
            "40",
            "--seed",
            "38",
        )
    )
    try:
        port = int(server.url.rsplit(":", 1)[1].rstrip("/"))
        captured = []
        for seq in range(streams):
            route = "chat" if seq % 2 == 0 else "completions"
            stream = _capture_one(port, route, 6 + seq % 9, seq % 3 == 0, seq)
            frames, row = replay(stream)
            stream["frames"], stream["row"] = frames, row
            captured.append(stream)
        return captured
    finally:
        server.stop()


def main() -> None:
    streams = capture()
    FIXTURE.parent.mkdir(exist_ok=True)
    with gzip.open(FIXTURE, "wt", encoding="utf-8") as file:
        json.dump({"streams": streams}, file, separators=(",", ":"))
    outcomes: dict[str, int] = {}
    for stream in streams:
        outcomes[stream["row"]["outcome"]] = outcomes.get(stream["row"]["outcome"], 0) + 1
    kinds: dict[str, int] = {}
    for stream in streams:
        for record in stream["frames"]:
            kinds[record[1]] = kinds.get(record[1], 0) + 1
    print(f"{len(streams)} streams, outcomes {outcomes}, frame kinds {kinds} -> {FIXTURE}")
    assert Outcome.OK in outcomes


if __name__ == "__main__":
    main()
