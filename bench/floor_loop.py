"""The floor: a bare receive loop that reads SSE streams as cheaply as Python can, to measure against.

Why this exists: sse-soak's CPU per frame means little alone; the floor is what any Python client
must pay to read one frame with its own kernel arrival stamp (issue 38). This loop has no gevent,
no Locust and no parsing: ``concurrency`` blocking sockets, one ``select.epoll``, and for each ready
socket one ``recvmsg`` through ``loadtests.client.kernel_stamps.recv_stamped`` (the very call and
stamp decoding sse-soak makes: the floor pays for the stamp too). Frames are counted by
``b"\\n\\n"`` (the head's and the chunk-size lines' ends are ``\\r\\n``, so they never count; a
``\\n\\n`` split across two reads is missed, which the server's one-chunk-per-frame writes make
rare). A response ends at the chunked terminator ``0\\r\\n\\r\\n``; the connection then sends its next
request at once, as a closed-loop user does. An empty read or a reset (the server's injected cuts)
closes the connection and opens a new one, which sends the next request. A response that is not
chunked (an error answer with a Content-Length) would leave its connection waiting: the floor is
for a server that streams every request it is sent, as the benches' does.

Every request is the bytes sse-soak's ``SSEUser`` sends: the head geventhttpclient builds from the
same header fields (Locust's session adds nothing when ``Accept-Encoding`` is given) and the same
``PreparedRequest.stream_payload``, its ``X-Request-Id`` a fresh 32-hex id per request. ``prepare``
builds them once against the server (``/v1/models``, ``/tokenize``) in a process of its own,
outside the measured window, and writes them to a file the loop reads.

Run it::

    python bench/floor_loop.py --prepare --host http://127.0.0.1:8000 --payload-file req.json
    python bench/floor_loop.py --host http://127.0.0.1:8000 --payload-file req.json \\
        --concurrency 32 --duration 10 --result floor.json

The result (JSON): frames, reads, epoll wakes, requests sent, reconnects, getrusage of the process
(utime, stime, nvcsw, nivcsw) and gc collections per generation during the loop.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import resource
import select
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from loadtests.client.kernel_stamps import keep_kernel_stamping_on, recv_stamped, stamp_arrivals  # noqa: E402

READ_SIZE = 4096
"""What sse-soak's body mux asks ``recvmsg`` for per read."""
RESPONSE_END = b"0\r\n\r\n"
ID_PLACEHOLDER = "0" * 32
"""Where a request's ``X-Request-Id`` goes in the prepared head (uuid4().hex is 32 hex digits)."""


def prepare(url: str, prompt_tokens: int, output_tokens: int, path: Path) -> None:
    """Write the request ``SSEUser`` sends for one chat spec of ``prompt_tokens`` in and
    ``output_tokens`` out against ``url``, its id left as ``ID_PLACEHOLDER``, to ``path``."""
    import httpx
    from geventhttpclient import HTTPClient

    from loadtests.declare.workload import RequestMix, RequestSpec, discover

    mix = RequestMix([RequestSpec("peers", "chat", prompt_tokens, max_tokens=output_tokens)])
    with httpx.Client(base_url=url, timeout=30.0) as client:
        facts = discover(client)
        request = mix.prepare(client, facts).draw()
    payload = request.stream_payload(facts.model)
    headers = {  # as SSEUser._stream_into sets them (no Authorization: the bundled server asks for none)
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
        "X-Request-Id": ID_PLACEHOLDER,
    }
    head = HTTPClient.from_url(url)._build_request("POST", request.path, body=payload, headers=headers)
    before, after = head.encode("latin-1").split(ID_PLACEHOLDER.encode(), 1)
    parts = {"before_id": before, "after_id": after + payload}
    path.write_text(json.dumps({name: base64.b64encode(value).decode() for name, value in parts.items()}))


def load_request(path: Path) -> tuple[bytes, bytes]:
    """The prepared request's bytes before and after its id."""
    parts = json.loads(path.read_text())
    return base64.b64decode(parts["before_id"]), base64.b64decode(parts["after_id"])


def run(host: str, port: int, concurrency: int, duration_s: float, request: tuple[bytes, bytes]) -> dict[str, Any]:
    """Keep ``concurrency`` streams going for ``duration_s``; the counts and the process's CPU.
    Invariant: every open connection has exactly one request in flight."""
    before_id, after_id = request
    keep_kernel_stamping_on()
    epoll = select.epoll()
    sockets: dict[int, socket.socket] = {}
    tails: dict[int, bytes] = {}
    sent = 0

    def send(sock: socket.socket) -> None:
        nonlocal sent
        sent += 1
        sock.sendall(b"%s%032x%s" % (before_id, sent, after_id))

    def connect() -> None:
        sock = socket.create_connection((host, port))
        stamp_arrivals(sock)
        fd = sock.fileno()
        sockets[fd] = sock
        tails[fd] = b""
        epoll.register(fd, select.EPOLLIN)
        send(sock)

    frames = reads = wakes = reconnects = 0
    gc_before = [entry["collections"] for entry in gc.get_stats()]
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(concurrency):
        connect()
    deadline = time.monotonic() + duration_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready = epoll.poll(left)
        wakes += 1
        for fd, _events in ready:
            sock = sockets[fd]
            try:
                data, _arrived, _read_at = recv_stamped(sock, READ_SIZE)
            except OSError:  # reset: an injected cut
                data = b""
            reads += 1
            if not data:
                epoll.unregister(fd)
                del sockets[fd], tails[fd]
                sock.close()
                reconnects += 1
                connect()
                continue
            frames += data.count(b"\n\n")
            tail = data[-5:] if len(data) >= 5 else (tails[fd] + data)[-5:]
            tails[fd] = tail
            if tail == RESPONSE_END:
                send(sock)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    gc_after = [entry["collections"] for entry in gc.get_stats()]
    for sock in sockets.values():
        sock.close()
    epoll.close()
    return {
        "frames": frames,
        "reads": reads,
        "wakes": wakes,
        "requests": sent,
        "reconnects": reconnects,
        "utime_s": usage.ru_utime - usage_before.ru_utime,
        "stime_s": usage.ru_stime - usage_before.ru_stime,
        "nvcsw": usage.ru_nvcsw - usage_before.ru_nvcsw,
        "nivcsw": usage.ru_nivcsw - usage_before.ru_nivcsw,
        "gc_collections": [after - before for before, after in zip(gc_before, gc_after, strict=True)],
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="the server's base URL (http://127.0.0.1:PORT)")
    parser.add_argument("--payload-file", type=Path, required=True, help="the prepared request (see --prepare)")
    parser.add_argument("--prepare", action="store_true", help="write the request to --payload-file and exit")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="--prepare: prompt tokens")
    parser.add_argument("--output-tokens", type=int, default=500, help="--prepare: max_tokens")
    parser.add_argument("--concurrency", type=int, default=32, help="streams at once")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--result", type=Path, default=None, help="write the result JSON here (else stdout)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.prepare:
        prepare(args.host, args.prompt_tokens, args.output_tokens, args.payload_file)
        return 0
    target = urlsplit(args.host)
    if target.scheme != "http" or target.hostname is None or target.port is None:
        print(f"floor_loop.py: --host must be http://HOST:PORT, got {args.host!r}", file=sys.stderr)
        return 2
    result = run(target.hostname, target.port, args.concurrency, args.duration, load_request(args.payload_file))
    text = json.dumps(result)
    if args.result is None:
        print(text)
    else:
        args.result.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
