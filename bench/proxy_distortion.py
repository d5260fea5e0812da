"""How much does each proxy move the frames of a slow stream? Its timing against the server's own.

Why this exists: every gap figure and timing gate of sse-soak judges the server through whatever
stands between it and the harness. A proxy that holds writes, merges frames or delays the headers
changes what the harness records, and the gates would charge that to the server. This benchmark
sends the same slow stream through each proxy ``--proxy`` can start (the embedded one and every
real one installed: nginx, HAProxy, also with ``option http-no-delay``, Caddy, Apache, Squid) and
straight to the server, and compares what the client received with the bundled server's
``--trace-file`` (one line per frame, stamped with ``time.monotonic()`` just before it goes to the
transport; CLOCK_MONOTONIC is one clock for every process of the machine, so no offset is needed).

One server (``--time-to-first-token``, ``--inter-token-latency``, keep-alive every 0.2 s, a slot per
stream, the trace) serves every target in turn; each target gets ``--streams`` streams at once, each
its own ``X-Request-Id`` (the trace's request id). The client is a plain blocking reader, one
thread per stream, stamping each read with ``time.monotonic()`` as it returns (not Locust: what is
measured is the proxy, not the harness, whose own fidelity ``timing_fidelity.py`` measures).
Per target:

- TTFB: from the send to the response headers, p50; ``added`` is that minus the direct p50.
- first frame: recorded minus sent time of each stream's first frame (a keep-alive comment), p50.
- frame delay: recorded minus sent time of every frame, p50 and p99.
- gap error: for each pair of consecutive frames, recorded gap minus sent gap, p50 and p99 (signed:
  a held frame makes the gap before it longer and the one after it shorter), and the share of gaps
  sent 10 ms or more apart that arrived under 2 ms apart (merged).
- frames: those recorded against those sent, by kind; a stream whose frames differ in number or
  kind (comments stripped, a cut) has no gaps compared.

Run it::

    python bench/proxy_distortion.py [--streams 4] [--tokens 50] [--ttft-ms 1000] [--itl-ms 20]
    python bench/proxy_distortion.py --quick      # 2 streams of 10 tokens: proves the script works

Measured 2026-12-05 on this 2-core machine, otherwise idle (Debian 12's nginx 1.22.1, HAProxy
2.6.12, Caddy 2.6.2, Apache 2.4.71, Squid 5.7), ``python bench/proxy_distortion.py``: 4 streams of 50
tokens at 20 ms after 1 s of keep-alive every 0.2 s; times in ms::

    proxy            streams ttfb p50 ms added ms 1st frame ms delay p50 ms  p99 ms gap err p50 ms  p99 ms merged gaps
    direct               4/4         2.6      0.0          0.3         0.32    1.25          -0.00    0.54       0/212
    embedded             4/4         6.8      4.2          0.6         0.39    1.50          -0.00    0.79       0/212
    nginx                4/4         4.0      1.4          0.4         0.26    1.14          -0.01    0.70       0/212
    haproxy              4/4       205.9    203.3          3.1        87.88  208.08         -20.06  203.42     184/212
    haproxy+nodelay      4/4         6.4      3.8          0.4         0.35    1.03          -0.00    0.31       0/212
    caddy                4/4         3.8      1.2          0.4         0.31    1.16          -0.00    0.89       0/212
    apache               4/4         2.1     -0.4          0.2         0.22    0.97           0.00    0.29       0/212
    squid                4/4         3.6      1.0          0.5         0.31    0.65           0.00    0.33       0/212

Every proxy passed every frame, the 16 keep-alive comments included. HAProxy without ``option
http-no-delay`` (its default) held the headers ~0.2 s, until the first frame (its added TTFB), and each
write up to ~0.2 s: tokens sent 20 ms apart arrived together (184 of 212 gaps merged, the gap
error's p50 -20 ms), each batch up to 0.2 s late (p99 +203 ms); with the option it is as faithful as
the others, whose gap error stays within 1 ms.

Exit status: 1 if the server or the direct run failed, or a proxy that is installed would not start.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` importable
    sys.path.insert(0, str(REPO_ROOT))

from loadtests.client.outcome import frame_kind  # noqa: E402
from loadtests.client.sse import SSEParser  # noqa: E402
from loadtests.errors import ServerStartError  # noqa: E402
from loadtests.services.proxies import real_proxies, start_real_proxy  # noqa: E402
from loadtests.services.proxies.embedded import start_embedded_proxy  # noqa: E402
from loadtests.services.stack import ChildService, TargetServerProcess  # noqa: E402

QUICK = {"streams": 2, "tokens": 10, "ttft_ms": 600}
"""``--quick``: seconds, not minutes; the same figures."""
KEEP_ALIVE_S = 0.2
READ_TIMEOUT_S = 30.0
"""Far above any silence of the stream: no proxy cuts it."""
MERGED_SENT_S = 0.010
MERGED_RECORDED_S = 0.002
STREAM_TIMEOUT_S = 60.0


@dataclass
class Stream:
    request_id: str
    sent_at: float = 0.0
    headers_at: float = float("nan")
    status: int = 0
    frames: list[tuple[str, float]] = field(default_factory=list)
    """(kind, recorded time) of each frame, in order."""
    error: str | None = None


@dataclass(frozen=True)
class Target:
    name: str
    kind: str | None
    """None: straight to the server."""
    no_delay: bool = False


def targets(installed_only: bool = True) -> list[Target]:
    chosen = [Target("direct", None), Target("embedded", "embedded")]
    for kind, proxy in real_proxies().items():
        if installed_only and shutil.which(proxy.binary) is None:
            continue
        chosen.append(Target(kind, kind))
        if kind == "haproxy":
            chosen.append(Target("haproxy+nodelay", kind, no_delay=True))
    return chosen


def start_target(target: Target, upstream: str) -> ChildService | None:
    if target.kind is None:
        return None
    if target.kind == "embedded":
        return start_embedded_proxy(upstream, READ_TIMEOUT_S)
    return start_real_proxy(target.kind, upstream, READ_TIMEOUT_S, no_delay=target.no_delay)


def read_stream(url: str, stream: Stream, tokens: int) -> None:
    """POST one streamed completion and record each frame's arrival (the read's return time)."""
    parser = SSEParser()
    body = {"prompt": "hi", "max_tokens": tokens, "stream": True}
    headers = {"X-Request-Id": stream.request_id, "Accept-Encoding": "identity"}
    try:
        with httpx.Client(timeout=STREAM_TIMEOUT_S) as client:
            stream.sent_at = time.monotonic()
            with client.stream("POST", url + "/v1/completions", json=body, headers=headers) as response:
                stream.headers_at = time.monotonic()
                stream.status = response.status_code
                for chunk in response.iter_raw():
                    now = time.monotonic()
                    stream.frames += [(frame_kind(frame), now) for frame in parser.feed(chunk, now)]
    except httpx.HTTPError as error:
        stream.error = f"{type(error).__name__}: {error}"


def run_target(target: Target, url: str, streams: int, tokens: int) -> list[Stream]:
    read_stream(url, Stream(f"warm-up-{target.name}"), 1)  # first connections and first request: not measured
    runs = [Stream(f"{target.name}-{i}") for i in range(streams)]
    threads = [threading.Thread(target=read_stream, args=(url, run, tokens)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(STREAM_TIMEOUT_S + 10)
    return runs


def read_trace(path: Path) -> dict[str, list[tuple[str, float]]]:
    sent: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        frame = json.loads(line)
        sent.setdefault(frame["request_id"], []).append((frame["kind"], frame["t"]))
    for frames in sent.values():
        frames.sort(key=lambda frame: frame[1])
    return sent


@dataclass
class Figures:
    name: str
    streams_ok: int
    streams: int
    ttfb_p50_ms: float
    added_ttfb_ms: float
    first_frame_ms: float
    delay_p50_ms: float
    delay_p99_ms: float
    gap_p50_ms: float
    gap_p99_ms: float
    merged: int
    spaced: int
    frames_recorded: int
    frames_sent: int
    comments_recorded: int
    comments_sent: int
    mismatches: int


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


def figures(name: str, runs: list[Stream], sent: dict[str, list[tuple[str, float]]], direct_ttfb: float) -> Figures:
    ok = [run for run in runs if run.error is None and run.status == 200]
    ttfbs = [run.headers_at - run.sent_at for run in ok]
    ttfb = statistics.median(ttfbs) * 1000 if ttfbs else float("nan")
    delays: list[float] = []
    gaps: list[float] = []
    first: list[float] = []
    merged = spaced = mismatches = 0
    recorded_total = sent_total = comments_recorded = comments_sent = 0
    for run in ok:
        traced = sent.get(run.request_id, [])
        recorded_total += len(run.frames)
        sent_total += len(traced)
        comments_recorded += sum(kind == "keepalive" for kind, _ in run.frames)
        comments_sent += sum(kind == "keepalive" for kind, _ in traced)
        if not traced or [kind for kind, _ in run.frames] != [kind for kind, _ in traced]:
            mismatches += 1
            continue
        times = np.array([t for _, t in run.frames])
        sent_times = np.array([t for _, t in traced])
        delays += list(times - sent_times)
        first.append(times[0] - sent_times[0])
        recorded_gaps, sent_gaps = np.diff(times), np.diff(sent_times)
        gaps += list(recorded_gaps - sent_gaps)
        spaced_here = sent_gaps >= MERGED_SENT_S
        spaced += int(spaced_here.sum())
        merged += int((spaced_here & (recorded_gaps < MERGED_RECORDED_S)).sum())
    return Figures(
        name,
        len(ok),
        len(runs),
        ttfb,
        ttfb - direct_ttfb,
        statistics.median(first) * 1000 if first else float("nan"),
        percentile(delays, 50),
        percentile(delays, 99),
        percentile(gaps, 50),
        percentile(gaps, 99),
        merged,
        spaced,
        recorded_total,
        sent_total,
        comments_recorded,
        comments_sent,
        mismatches,
    )


HEADER = (
    f"{'proxy':<16} {'streams':>7} {'ttfb p50 ms':>11} {'added ms':>8} {'1st frame ms':>12} "
    f"{'delay p50 ms':>12} {'p99 ms':>7} {'gap err p50 ms':>14} {'p99 ms':>7} {'merged gaps':>11} "
    f"{'frames rec/sent':>15} {'comments rec/sent':>17} {'mismatches':>10}"
)


def row(f: Figures) -> str:
    return (
        f"{f.name:<16} {f'{f.streams_ok}/{f.streams}':>7} {f.ttfb_p50_ms:>11.1f} {f.added_ttfb_ms:>8.1f} "
        f"{f.first_frame_ms:>12.1f} {f.delay_p50_ms:>12.2f} {f.delay_p99_ms:>7.2f} {f.gap_p50_ms:>14.2f} "
        f"{f.gap_p99_ms:>7.2f} {f'{f.merged}/{f.spaced}':>11} {f'{f.frames_recorded}/{f.frames_sent}':>15} "
        f"{f'{f.comments_recorded}/{f.comments_sent}':>17} {f.mismatches:>10}"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 streams of 10 tokens after 0.6 s: seconds")
    parser.add_argument("--streams", type=int, default=None, help="streams at once per target (default 4)")
    parser.add_argument("--tokens", type=int, default=None, help="tokens per stream (default 50)")
    parser.add_argument("--ttft-ms", type=int, default=None, help="server's time to first token (default 1000)")
    parser.add_argument("--itl-ms", type=int, default=20, help="server's inter-token latency (default 20)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else {"streams": 4, "tokens": 50, "ttft_ms": 1000}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="proxy-distortion-"))
    trace = scratch / "trace.jsonl"
    server_args = [
        "--time-to-first-token",
        str(args.ttft_ms),
        "--inter-token-latency",
        str(args.itl_ms),
        "--sse-keep-alive-interval",
        str(KEEP_ALIVE_S),
        "--max-num-seqs",
        str(max(args.streams, 1)),
        "--trace-file",
        str(trace),
    ]
    try:
        server = TargetServerProcess.start(server_args)
    except (ServerStartError, OSError) as exc:
        print(f"error: target server failed to start: {exc}", file=sys.stderr)
        return 1
    print(f"server: {server.url} pid {server.pid} args {' '.join(server_args)}")
    print(
        f"stream: {args.streams} at once per target, {args.tokens} tokens, first token after {args.ttft_ms} ms, "
        f"a token every {args.itl_ms} ms, keep-alive every {KEEP_ALIVE_S:g} s"
    )
    chosen = targets()
    missing = [kind for kind, proxy in real_proxies().items() if shutil.which(proxy.binary) is None]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}")
    results: dict[str, list[Stream]] = {}
    failed: list[str] = []
    try:
        for target in chosen:
            try:
                service = start_target(target, server.url)
            except ServerStartError as exc:
                print(f"error: {target.name} failed to start: {exc}", file=sys.stderr)
                failed.append(target.name)
                continue
            try:
                url = server.url if service is None else service.url
                results[target.name] = run_target(target, url, args.streams, args.tokens)
            finally:
                if service is not None:
                    service.stop()
    finally:
        server.stop()  # flushes the trace
    sent = read_trace(trace) if trace.exists() else {}
    shutil.rmtree(scratch, ignore_errors=True)
    direct_runs = results.get("direct", [])
    direct_ttfbs = [run.headers_at - run.sent_at for run in direct_runs if run.error is None and run.status == 200]
    if not direct_ttfbs:
        print("error: no direct stream finished: nothing to compare against", file=sys.stderr)
        return 1
    direct_ttfb = statistics.median(direct_ttfbs) * 1000
    print(HEADER)
    table = [figures(name, runs, sent, direct_ttfb) for name, runs in results.items()]
    for line in table:
        print(row(line))
    for name, runs in results.items():
        for run in runs:
            if run.error is not None or run.status != 200:
                print(f"{name}: stream {run.request_id} failed: {run.error or f'HTTP {run.status}'}")
            elif run.request_id not in sent:
                print(f"{name}: stream {run.request_id} not in the trace ({len(run.frames)} frames received)")
    if args.json is not None:
        args.json.write_text(json.dumps([vars(line) for line in table], indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
