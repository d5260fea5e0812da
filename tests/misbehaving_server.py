"""An OpenAI-compatible SSE server that misbehaves on purpose, one way per mode, for tests.

    python -m tests.misbehaving_server --modes ok,no_done,... --log requests.jsonl [--port 0]

Raw asyncio sockets, every byte written by hand (no HTTP framework would send a Content-Length
shorter than its body, or reset a connection mid-frame). ``GET /v1/models`` lists one model,
``POST /tokenize`` is a 404 (so the harness estimates prompt sizes), and each
``POST /v1/completions`` or ``/v1/chat/completions`` gets the next mode, round-robin per client
(the product in its ``User-Agent``, so that every client meets every mode whatever the
interleaving). The mode is appended to the ``--log`` JSONL file, ``{"request_id", "mode"}``,
BEFORE any byte of the answer is written: a request the server saw is in the log even when the
client never records it. Chunks look like vLLM's completions/chat chunks; streams are chunked
unless the mode says otherwise, and a connection is kept alive only after a well-framed answer.
A generation request whose body carries ``WIRE_FIELD`` gets exactly the bytes it names instead of
a mode (``tests/loadtests/load/test_framing_parity.py`` sends both clients generated responses so).
The process prints ``listening on http://127.0.0.1:PORT`` once it accepts connections, and exits
on SIGTERM/SIGINT or after ``--lifetime`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import gzip
import itertools
import json
import signal
import socket
import struct
import termios
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

MODEL = "misbehaving/tiny"
FRAME_GAP_S = 0.005
"""Pause after each chunk of a stream, as between tokens: frames arrive one by one."""
SILENCE_LIMIT_S = 30.0
"""``headers_then_silence`` gives up on a client that never leaves after this long."""
LONG_LINE_BYTES = 5 * 1024 * 1024
KEEP_ALIVE = b": keep-alive\n\n"
DONE = b"data: [DONE]\n\n"
LOGIN_PAGE = b"""<!doctype html>
<html><head><title>Sign in</title></head>
<body><form method="post" action="/login"><input name="user"><input name="password" type="password">
<button>Sign in</button></form></body></html>
"""


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    """vLLM's error body: ``code`` is the HTTP status."""
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


@dataclass
class Exchange:
    """One generation request and the connection to answer it on."""

    route: str
    request_id: str | None
    max_tokens: int
    include_usage: bool
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    created: int = field(default_factory=lambda: int(time.time()))

    # -- payloads -------------------------------------------------------------------------------

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        chat = self.route == "chat"
        return {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{self.request_id}",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": self.created,
            "model": MODEL,
            "choices": choices,
            **extra,
        }

    def token(self, text: str, finish_reason: str | None = None) -> dict[str, Any]:
        if self.route == "chat":
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        return self.chunk([choice])

    def payloads(self, usage: dict[str, Any] | None = None, finish_reason: str = "length") -> list[dict[str, Any]]:
        """A well-formed stream's data payloads: role chunk (chat), tokens (the last with
        ``finish_reason``), usage chunk."""
        out = []
        if self.route == "chat":
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            out.append(self.chunk([role]))
        n = self.max_tokens
        out += [self.token(f" t{i}", finish_reason if i == n - 1 else None) for i in range(n)]
        if self.include_usage or usage is not None:
            usage = usage or {"prompt_tokens": 8, "total_tokens": 8 + n, "completion_tokens": n}
            out.append(self.chunk([], usage=usage))
        return out

    def frames(
        self, usage: dict[str, Any] | None = None, eol: bytes = b"\n", done: bool = True, finish_reason: str = "length"
    ) -> list[bytes]:
        frames = [data_frame(payload, eol) for payload in self.payloads(usage, finish_reason)]
        return [*frames, b"data: [DONE]" + eol + eol] if done else frames

    # -- wire -----------------------------------------------------------------------------------

    def head_bytes(self, status: str, headers: Sequence[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
        if self.request_id is not None:
            lines.append(f"X-Request-Id: {self.request_id}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def head(self, status: str, headers: Sequence[tuple[str, str]]) -> None:
        await self.send(self.head_bytes(status, headers))

    async def sse_head(self, *extra: tuple[str, str], chunked: bool = True) -> None:
        headers = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache"), *extra]
        if chunked:
            headers.append(("Transfer-Encoding", "chunked"))
        await self.head("200 OK", headers)

    async def send(self, data: bytes) -> None:
        """Write and wait until the kernel has it (the write buffer limit is 0)."""
        self.writer.write(data)
        await self.writer.drain()

    async def http_chunk(self, data: bytes) -> None:
        await self.send(b"%x\r\n%s\r\n" % (len(data), data))
        await asyncio.sleep(FRAME_GAP_S)

    async def end_chunks(self) -> None:
        await self.send(b"0\r\n\r\n")

    async def whole(self, status: str, content_type: str, body: bytes) -> None:
        await self.head(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        await self.send(body)

    async def stream(self, frames: Sequence[bytes], extra: Sequence[tuple[str, str]] = ()) -> bool:
        """A chunked event stream of ``frames``, one HTTP chunk each, properly ended."""
        await self.sse_head(*extra)
        for frame in frames:
            await self.http_chunk(frame)
        await self.end_chunks()
        return True


def data_frame(payload: Any, eol: bytes = b"\n") -> bytes:
    return b"data: " + json.dumps(payload).encode() + eol + eol


# -- modes: each answers one request; True keeps the connection for the next one ------------------

Mode = Callable[[Exchange], Awaitable[bool]]


async def ok(ex: Exchange) -> bool:
    return await ex.stream(ex.frames())


async def crlf_ok(ex: Exchange) -> bool:
    return await ex.stream(ex.frames(eol=b"\r\n"))


async def close_delimited_ok(ex: Exchange) -> bool:
    """HTTP/1.1 without Content-Length or chunking: the body ends when the connection closes."""
    await ex.sse_head(("Connection", "close"), chunked=False)
    for frame in ex.frames():
        await ex.send(frame)
        await asyncio.sleep(FRAME_GAP_S)
    return False


async def keepalive_ok(ex: Exchange) -> bool:
    frames = ex.frames()
    return await ex.stream([piece for frame in frames[:-1] for piece in (KEEP_ALIVE, frame)] + [frames[-1]])


OTHER_COMMENTS = (b":ping\n\n", b": \n\n", b":\n\n", b":: heartbeat 7\n\n")
"""Comments other than ``: keep-alive``: each is a keep-alive to a proxy, and to the harness."""


async def other_comments_ok(ex: Exchange) -> bool:
    """A well-formed stream with a comment other than ``: keep-alive`` before every frame but the last."""
    frames = ex.frames()
    comments = itertools.cycle(OTHER_COMMENTS)
    return await ex.stream([piece for frame in frames[:-1] for piece in (next(comments), frame)] + [frames[-1]])


async def no_done(ex: Exchange) -> bool:
    return await ex.stream(ex.frames(done=False))


async def html_200(ex: Exchange) -> bool:
    await ex.whole("200 OK", "text/html; charset=utf-8", LOGIN_PAGE)
    return True


async def non_json_frame(ex: Exchange) -> bool:
    return await ex.stream([b"data: hello world\n\n", DONE])


async def non_object_frame(ex: Exchange) -> bool:
    return await ex.stream([b"data: [1, 2]\n\n", DONE])


DEEP = 100_000
"""Nesting far past any JSON decoder's recursion limit (Python's is 1,000 frames)."""


async def deep_json_frame(ex: Exchange) -> bool:
    """A token, then a data frame of arrays nested 100,000 deep (``[[[[...]]]]``)."""
    first = ex.frames(done=False)[0]
    return await ex.stream([first, b"data: " + b"[" * DEEP + b"]" * DEEP + b"\n\n", DONE])


async def long_number_frame(ex: Exchange) -> bool:
    """A token chunk whose usage holds an integer of 5,000 digits (Python converts 4,300 at most)."""
    usage = b'{"prompt_tokens": ' + b"9" * 5000 + b', "total_tokens": 1, "completion_tokens": 1}'
    frame = b'data: {"choices": [], "usage": ' + usage + b"}\n\n"
    return await ex.stream([*ex.frames(done=False), frame, DONE])


async def deep_json_error_body(ex: Exchange) -> bool:
    """An HTTP 500 whose JSON body is objects nested 100,000 deep."""
    await ex.whole("500 Internal Server Error", "application/json", b'{"error": ' * DEEP + b"1" + b"}" * DEEP)
    return True


async def invalid_utf8(ex: Exchange) -> bool:
    frames = ex.frames()
    first_token = 1 if ex.route == "chat" else 0
    poisoned = data_frame(ex.token("@@")).replace(b"@@", b"\xff\xfe")
    return await ex.stream([*frames[:first_token], poisoned, *frames[first_token + 1 :]])


async def long_line(ex: Exchange) -> bool:
    """A 5 MB line with no newline in the middle of the stream; a client must stop reading it."""
    frames = ex.frames()
    await ex.sse_head()
    await ex.http_chunk(frames[0])
    await ex.http_chunk(b'data: {"filler": "')
    piece = b"x" * 65536
    for _ in range(LONG_LINE_BYTES // len(piece)):
        await ex.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    await ex.http_chunk(b'"}\n\n')
    for frame in frames[1:]:
        await ex.http_chunk(frame)
    await ex.end_chunks()
    return True


async def headers_then_silence(ex: Exchange) -> bool:
    """The headers, then nothing until the client leaves (or SILENCE_LIMIT_S)."""
    await ex.sse_head()
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
        await asyncio.wait_for(ex.reader.read(1), SILENCE_LIMIT_S)
    return False


def announced_mid_frame(frames: Sequence[bytes]) -> int:
    """A Content-Length that ends half-way through the third frame, before [DONE]."""
    return len(b"".join(frames[:2])) + len(frames[2]) // 2


def short_head(ex: Exchange, announced: int) -> bytes:
    """Headers announcing ``announced`` body bytes on a connection the server closes."""
    content_type = ("Content-Type", "text/event-stream; charset=utf-8")
    return ex.head_bytes("200 OK", [content_type, ("Content-Length", str(announced)), ("Connection", "close")])


async def content_length_short(ex: Exchange) -> bool:
    """Content-Length promises less than the body: it ends half-way through a frame before [DONE].
    The excess follows in a later read, once the announced bytes are acknowledged."""
    body = b"".join(frames := ex.frames())
    announced = announced_mid_frame(frames)
    await ex.send(short_head(ex, announced) + body[:announced])
    await unacked_drained(ex.writer.get_extra_info("socket"))
    with contextlib.suppress(ConnectionError):
        await asyncio.sleep(0.05)
        await ex.send(body[announced:])
    return False


async def content_length_short_one_read(ex: Exchange) -> bool:
    """``content_length_short`` with the excess in the same write, so the same read, as the announced end
    (geventhttpclient alone would throw the whole response away as malformed; the SDK reads a cut body)."""
    body = b"".join(frames := ex.frames())
    await ex.send(short_head(ex, announced_mid_frame(frames)) + body)
    return False


async def excess_after_done(ex: Exchange) -> bool:
    """A whole stream, [DONE] included, as announced; then bytes it did not announce, in the same write."""
    body = b"".join(ex.frames())
    await ex.send(short_head(ex, len(body)) + body + data_frame({"unannounced": True}))
    return False


async def reset_mid_frame(ex: Exchange) -> bool:
    """Half a frame, then a TCP reset (SO_LINGER 0 and close) once the peer has every byte sent."""
    frames = ex.frames()
    await ex.sse_head()
    await ex.http_chunk(frames[0])
    half = frames[1][: len(frames[1]) // 2]
    await ex.send(b"%x\r\n%s" % (len(frames[1]), half))  # the chunk announces the whole frame
    sock = ex.writer.get_extra_info("socket")
    await unacked_drained(sock)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ex.writer.transport.abort()
    return False


async def error_frame_no_done(ex: Exchange) -> bool:
    await ex.sse_head()
    await ex.http_chunk(ex.frames()[0])
    await ex.http_chunk(data_frame(error_body(500, "boom", "InternalServerError")))
    return False  # closed without [DONE] and without the last chunk


async def inband_500(ex: Exchange) -> bool:
    return await ex.stream([ex.frames()[0], data_frame(error_body(500, "boom", "InternalServerError")), DONE])


TERMINAL_ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\r"
"""What a hostile server sends in its text to retitle (OSC 0), clear (ED 2) and recolour a terminal,
then return to the start of the line: the harness must show it inert."""


async def escape_in_error(ex: Exchange) -> bool:
    """An in-band error whose message carries terminal escape sequences."""
    error = error_body(500, f"boom{TERMINAL_ESCAPES}", "InternalServerError")
    return await ex.stream([ex.frames()[0], data_frame(error), DONE])


C1_ESCAPES = "\x9b2J\x9d0;pwned\x9c"
"""The same in 8-bit controls (CSI 2J clears, OSC 0 retitles): legal bytes in a header value (obs-text),
where HTTP clients refuse ESC."""


async def escape_in_content_type(ex: Exchange) -> bool:
    """A 200 whose Content-Type carries terminal control sequences (not an event stream)."""
    await ex.whole("200 OK", f"text/html{C1_ESCAPES}", LOGIN_PAGE)
    return True


async def finish_abort(ex: Exchange) -> bool:
    """A well-formed stream, ``[DONE]`` included, whose choice finished ``abort`` (vLLM: the engine
    aborted the request)."""
    return await ex.stream(ex.frames(finish_reason="abort"))


async def finish_error(ex: Exchange) -> bool:
    """A well-formed stream, ``[DONE]`` included, whose choice finished ``error``."""
    return await ex.stream(ex.frames(finish_reason="error"))


async def http_500(ex: Exchange) -> bool:
    body = json.dumps(error_body(500, "boom: internal server error", "InternalServerError")).encode()
    await ex.whole("500 Internal Server Error", "application/json", body)
    return True


RETRY_AFTER_S = 2
"""What ``http_503_retry_after`` asks a client to wait (``Retry-After``)."""


async def http_429(ex: Exchange) -> bool:
    """A rate limit answered at once (as a gateway in front of vLLM answers it), no ``Retry-After``."""
    body = json.dumps(error_body(429, "rate limit exceeded", "RateLimitError")).encode()
    await ex.whole("429 Too Many Requests", "application/json", body)
    return True


async def http_503_retry_after(ex: Exchange) -> bool:
    """Unavailable at once, asking the client to come back in ``RETRY_AFTER_S`` seconds."""
    body = json.dumps(error_body(503, "overloaded: try again later", "ServiceUnavailableError")).encode()
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Retry-After", str(RETRY_AFTER_S)),
    ]
    await ex.head("503 Service Unavailable", headers)
    await ex.send(body)
    return True


async def not_http(ex: Exchange) -> bool:
    """Bytes that are not an HTTP response at all (a service on the wrong port, say), then close."""
    await ex.send(b"SSH-2.0-OpenSSH_9.2\r\nProtocol mismatch.\r\n\r\n")
    return False


async def close_before_any_byte(ex: Exchange) -> bool:
    """The request read, then the connection closed with nothing sent (a crashed worker behind a
    balancer, a server refusing the client)."""
    return False


async def reset_before_any_byte(ex: Exchange) -> bool:
    """The request read, then a TCP reset with nothing sent."""
    sock = ex.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ex.writer.transport.abort()
    return False


async def malformed_usage(ex: Exchange) -> bool:
    return await ex.stream(ex.frames(usage={"prompt_tokens": "abc", "total_tokens": 12, "completion_tokens": 4}))


async def huge_usage(ex: Exchange) -> bool:
    usage = {"prompt_tokens": 2**64, "total_tokens": 2**64 + 4, "completion_tokens": 4}
    return await ex.stream(ex.frames(usage=usage))


async def retry_only_event(ex: Exchange) -> bool:
    """An event with a ``retry`` field and no data first: the SSE spec dispatches nothing for it."""
    return await ex.stream([b"retry: 1000\n\n", *ex.frames()])


async def done_with_trailing_space(ex: Exchange) -> bool:
    """``data: [DONE] `` (a space after the marker): not the marker vLLM sends."""
    return await ex.stream([*ex.frames(done=False), b"data: [DONE] \n\n"])


async def frames_after_done(ex: Exchange) -> bool:
    """A whole stream, then more data frames after ``[DONE]``, properly framed: the stream ended at [DONE]."""
    frames = ex.frames()
    return await ex.stream([*frames, *frames[:-1]])


async def both_lengths(ex: Exchange) -> bool:
    """Chunked and a Content-Length at once (RFC 9112 6.1 forbids it; 6.3: it ought to be handled as an error)."""
    body = b"".join(ex.frames())
    await ex.sse_head(("Content-Length", str(len(body))))
    await ex.http_chunk(body)
    await ex.end_chunks()
    return False


async def huge_header(ex: Exchange) -> bool:
    """A 2 MiB response header before a well-formed stream."""
    return await ex.stream(ex.frames(), extra=(("X-Padding", "a" * (2 << 20)),))


async def interim_100(ex: Exchange) -> bool:
    """``100 Continue`` before the 200: an interim response the client must skip."""
    await ex.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    return await ex.stream(ex.frames())


async def early_hints_103(ex: Exchange) -> bool:
    """``103 Early Hints`` (with a header) before the 200."""
    await ex.send(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    return await ex.stream(ex.frames())


async def gzip_stream(ex: Exchange) -> bool:
    """A gzip-encoded event stream, whatever the client asked for."""
    body = gzip.compress(b"".join(ex.frames()))
    await ex.sse_head(("Content-Encoding", "gzip"))
    await ex.http_chunk(body)
    await ex.end_chunks()
    return True


MODES: dict[str, Mode] = {
    mode.__name__: mode
    for mode in (
        ok,
        crlf_ok,
        close_delimited_ok,
        no_done,
        html_200,
        non_json_frame,
        non_object_frame,
        invalid_utf8,
        deep_json_frame,
        long_number_frame,
        deep_json_error_body,
        long_line,
        headers_then_silence,
        content_length_short,
        content_length_short_one_read,
        excess_after_done,
        reset_mid_frame,
        error_frame_no_done,
        inband_500,
        http_500,
        http_429,
        http_503_retry_after,
        not_http,
        close_before_any_byte,
        reset_before_any_byte,
        malformed_usage,
        huge_usage,
        keepalive_ok,
        other_comments_ok,
        retry_only_event,
        done_with_trailing_space,
        frames_after_done,
        both_lengths,
        huge_header,
        interim_100,
        early_hints_103,
        gzip_stream,
        escape_in_error,
        escape_in_content_type,
        finish_abort,
        finish_error,
    )
}


WIRE_FIELD = "misbehaving_wire"
"""A request body field that says the answer's bytes, whatever the modes: ``{"parts": [hex, ...],
"then": "keep" | "close" | "hold"}``. Each part is its own write, sent once the previous one left
(a test's client sees reads split there, or merged); then the connection is kept for the next
request, closed, or held open without a byte until the client leaves (``HOLD_LIMIT_S`` at most).
The request is not logged: the test that sent it knows what it asked for."""
HOLD_LIMIT_S = 10.0
PART_GAP_S = 0.002


async def replay(wire: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Send the bytes ``wire`` says (``WIRE_FIELD``); True when the connection may carry another request."""
    for index, part in enumerate(wire["parts"]):
        if index:
            await asyncio.sleep(PART_GAP_S)
        writer.write(bytes.fromhex(part))
        await writer.drain()
    if wire["then"] == "hold":
        with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
            await asyncio.wait_for(reader.read(1), HOLD_LIMIT_S)
    return wire["then"] == "keep"


async def unacked_drained(sock: Any, limit_s: float = 2.0) -> None:
    """Wait until the peer acknowledged every byte sent (Linux TIOCOUTQ), so a reset loses none."""
    deadline = time.monotonic() + limit_s
    while fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0") != b"\0\0\0\0" and time.monotonic() < deadline:
        await asyncio.sleep(0.001)


# -- HTTP/1.1 server --------------------------------------------------------------------------------


class MisbehavingServer:
    def __init__(self, modes: Sequence[str], log: TextIO, authorization: str | None = None) -> None:
        self.modes = list(modes)
        self.log = log
        self.authorization = authorization
        """The ``Authorization`` header every request must carry (``--basic``), None: none needed."""
        self._turns: dict[tuple[str, str], Iterator[str]] = {}

    def next_mode(self, user_agent: str, path: str) -> str:
        """The next mode for this client (its user agent's product) on this route: every mode in
        turn per client and route, so both clients meet every mode on every route once each has
        sent as many requests to it as there are modes, however the machine's load orders them."""
        client = user_agent.split("/", 1)[0]
        turns = self._turns.setdefault((client, path), itertools.cycle(self.modes))
        return next(turns)

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.transport.set_write_buffer_limits(0)  # drain() returns once the kernel has every byte
        try:
            while await self.request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the client left, or sent something we do not parse: drop the connection
        finally:
            writer.close()

    async def request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; True when the connection may carry another."""
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        keep = headers.get("connection", "").lower() != "close"
        path = path.split("?", 1)[0]
        if self.authorization is not None and headers.get("authorization") != self.authorization:
            refused = Exchange("completions", headers.get("x-request-id"), 1, False, reader, writer)
            unauthorized = error_body(401, "Unauthorized", "AuthenticationError")
            await refused.whole("401 Unauthorized", "application/json", json.dumps(unauthorized).encode())
            return keep
        request = json.loads(body) if body else {}
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions") and WIRE_FIELD in request:
            return await replay(request[WIRE_FIELD], reader, writer) and keep
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            mode = self.next_mode(headers.get("user-agent", ""), path)
            self.log.write(json.dumps({"request_id": headers.get("x-request-id"), "mode": mode}) + "\n")
            self.log.flush()
            exchange = Exchange(
                route="chat" if path.endswith("/chat/completions") else "completions",
                request_id=headers.get("x-request-id"),
                max_tokens=max(1, min(int(request.get("max_tokens") or 4), 16)),
                include_usage=bool((request.get("stream_options") or {}).get("include_usage")),
                reader=reader,
                writer=writer,
            )
            return await MODES[mode](exchange) and keep
        plain = Exchange("completions", headers.get("x-request-id"), 1, False, reader, writer)
        if method == "GET" and path == "/v1/models":
            card = {"id": MODEL, "object": "model", "owned_by": "tests", "max_model_len": 4096}
            await plain.whole("200 OK", "application/json", json.dumps({"object": "list", "data": [card]}).encode())
        else:
            missing = error_body(404, f"no route {method} {path} on the misbehaving server", "NotFoundError")
            await plain.whole("404 Not Found", "application/json", json.dumps(missing).encode())
        return keep


async def serve(
    host: str, port: int, modes: Sequence[str], log_path: str, lifetime: float, basic: str | None = None
) -> None:
    with open(log_path, "a", encoding="utf-8") as log:
        authorization = None if basic is None else "Basic " + base64.b64encode(basic.encode()).decode()
        server = MisbehavingServer(modes, log, authorization)
        listener = await asyncio.start_server(server.connection, host, port, limit=1 << 20)
        bound_host, bound_port = listener.sockets[0].getsockname()[:2]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        print(f"listening on http://{bound_host}:{bound_port}", flush=True)
        async with listener:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), lifetime)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.misbehaving_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes, in turn: " + ", ".join(MODES))
    parser.add_argument("--log", required=True, help="JSONL file: a {request_id, mode} line per generation request")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (the ready line prints it)")
    parser.add_argument("--lifetime", type=float, default=600.0, help="seconds after which the server exits by itself")
    parser.add_argument("--basic", default=None, help="USER:PASSWORD every request must send as Basic auth (else 401)")
    args = parser.parse_args(argv)
    modes = [mode for mode in args.modes.split(",") if mode]
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        parser.error(f"--modes got {', '.join(unknown) or 'nothing'}; choose from {', '.join(MODES)}")
    asyncio.run(serve(args.host, args.port, modes, args.log, args.lifetime, args.basic))


if __name__ == "__main__":
    main()
