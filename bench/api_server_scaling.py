"""How much more does the bundled server stream with ``--api-server-count 2`` than with 1?

Why this exists: one server process on one core tops out around 10.5k SSE frames/s, so a scale
test could measure the bundled server instead of what it means to. ``--api-server-count N`` runs N
processes on one port (``target_server/api_servers.py``); this measures what that buys.

Two servers are started, identical but for ``--api-server-count`` (1 and 2), with
``--inter-token-latency`` paced streams as a scale test has them (at zero latency frames coalesce
into few writes, which measures something else). Each round streams ``--concurrency`` x
``--streams-per-worker`` completions of ``--max-tokens`` tokens from one server, every stream on a
new connection (so the kernel can hand it to either process), asking for more frames per second
than one process sends, and counts the SSE frames received per wall second; the servers' CPU
(every process of a server, from psutil) and this client's CPU are printed beside it. The client is
raw asyncio on uvloop, counting frame ends, to spend as little CPU per frame as it can. Rounds
alternate 1/2 after one warm-up each; the figures are medians, and the headline is their ratio,
measured in this one run.

How to read it: the ratio is at most the number of cores the server processes can have. The client
shares the machine: on 2 cores, client and servers share them, so expect well under 2x there; when
the client's CPU is near 100% it, not the server, is the limit.
Measured on a shared 2-core VM with the defaults: 27.6k frames/s with 1 process, 39.7k with 2,
ratio 1.44 (client CPU ~25%). ``--quick`` is a smoke run (seconds; same figures, a load one process
keeps up with, so its ratio is near 1 and says nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import uvloop

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` importable
    sys.path.insert(0, str(REPO_ROOT))

from common import zero_latency_server_args  # noqa: E402
from keepalive_overhead import cpu_seconds  # noqa: E402

from loadtests.services.stack import ChildService, TargetServerProcess  # noqa: E402

COUNTS = (1, 2)
QUICK = {"max_tokens": 100, "concurrency": 150, "streams_per_worker": 1, "rounds": 2, "warmup": 1}


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 300
    concurrency: int = 400
    streams_per_worker: int = 2
    rounds: int = 3
    warmup: int = 1
    inter_token_latency_ms: int = 5

    def server_args(self, count: int) -> list[str]:
        # Twice the slots the streams need: each process queues on its own, and the kernel spreads
        # connections unevenly, so without headroom some streams would wait while slots are free.
        args = zero_latency_server_args(2 * self.concurrency, self.max_tokens + 64)
        return [*args, "--inter-token-latency", str(self.inter_token_latency_ms), "--api-server-count", str(count)]


@dataclass(frozen=True)
class Round:
    count: int
    warmup: bool
    frames: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    complete: bool

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.wall_s if self.wall_s else float("nan")


def server_cpu_seconds(server: ChildService) -> float:
    """CPU of the server's process and of every process it started."""
    parent = psutil.Process(server.pid)
    return sum(cpu_seconds(process) for process in [parent, *parent.children()])


class _Stream(asyncio.Protocol):
    """One streamed completion on its own connection: counts frame ends (a blank line) until
    ``[DONE]``, then closes; ``frames`` resolves to the count when the connection is gone."""

    def __init__(self, request: bytes, frames: asyncio.Future[int]) -> None:
        self._request, self._frames, self._count, self._tail = request, frames, 0, b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        transport.write(self._request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        seen = self._tail + data
        self._count += seen.count(b"\n\n") - self._tail.count(b"\n\n")
        if b"data: [DONE]" in seen:
            self._transport.close()
        self._tail = seen[-16:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._frames.done():
            self._frames.set_result(self._count)


def completion_request(url: str, max_tokens: int) -> tuple[str, int, bytes]:
    """Host, port and the bytes of one streamed completion request that closes its connection."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"prompt": "hello world", "max_tokens": max_tokens, "stream": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return host, int(port), head.encode() + body


async def stream_once(host: str, port: int, request: bytes) -> int:
    loop = asyncio.get_running_loop()
    frames: asyncio.Future[int] = loop.create_future()
    await loop.create_connection(lambda: _Stream(request, frames), host, port)
    return await frames


async def run_round(server: ChildService, settings: Settings, count: int, warmup: bool) -> Round:
    host, port, request = completion_request(server.url, settings.max_tokens)

    async def worker() -> list[int]:
        return [await stream_once(host, port, request) for _ in range(settings.streams_per_worker)]

    cpu_before, client_before, wall_before = server_cpu_seconds(server), time.process_time(), time.perf_counter()
    counts = [n for batch in await asyncio.gather(*(worker() for _ in range(settings.concurrency))) for n in batch]
    wall = time.perf_counter() - wall_before
    server_cpu, client_cpu = server_cpu_seconds(server) - cpu_before, time.process_time() - client_before
    complete = all(n == settings.max_tokens + 1 for n in counts)  # the token frames and [DONE]
    return Round(count, warmup, sum(counts), wall, server_cpu, client_cpu, complete)


def schedule(settings: Settings) -> list[tuple[int, bool]]:
    warm = [(count, True) for _ in range(settings.warmup) for count in COUNTS]
    return warm + [(count, False) for _ in range(settings.rounds) for count in COUNTS]


def print_round(number: int, result: Round) -> None:
    tag = " (warm-up)" if result.warmup else ""
    print(
        f"{number:>5} {result.count:>9} {result.frames:>8} {result.wall_s:>8.3f} {result.frames_per_s:>12.0f} "
        f"{result.server_cpu_s / result.wall_s:>11.0%} {result.client_cpu_s / result.wall_s:>11.0%}{tag}",
        flush=True,
    )


def summarize(results: list[Round]) -> dict[str, float]:
    measured = [result for result in results if not result.warmup]
    figures: dict[str, float] = {}
    for count in COUNTS:
        mine = [result for result in measured if result.count == count]
        figures[f"frames_per_s_{count}"] = statistics.median(result.frames_per_s for result in mine)
        figures[f"client_cpu_pct_{count}"] = 100 * statistics.median(r.client_cpu_s / r.wall_s for r in mine)
    figures["ratio"] = figures["frames_per_s_2"] / figures["frames_per_s_1"]
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Settings()
    for name, value in asdict(defaults).items():
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=f"default {value}")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--json", type=Path, help="also write the rounds and figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = {name: getattr(args, name) for name in asdict(Settings()) if getattr(args, name) is not None}
    settings = Settings(**{**(QUICK if args.quick else {}), **chosen})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"API server scaling benchmark; {os.cpu_count()} CPUs\nsettings: {json.dumps(asdict(settings))}")
    servers: dict[int, ChildService] = {}
    try:
        for count in COUNTS:
            servers[count] = TargetServerProcess.start(settings.server_args(count), env=env)
            server = servers[count]
            print(f"server x{count}: {server.description}")
        print(f"\n{'round':>5} {'processes':>9} {'frames':>8} {'wall s':>8} {'frames/s':>12} {'server CPU':>11} "
              f"{'client CPU':>11}")  # fmt: skip
        results: list[Round] = []
        for count, warmup in schedule(settings):
            results.append(uvloop.run(run_round(servers[count], settings, count, warmup)))
            print_round(len(results), results[-1])
    finally:
        for server in servers.values():
            server.stop()
    figures = summarize(results)
    print()
    for count in COUNTS:
        print(
            f"{count} process{'es' if count > 1 else '  '}: {figures[f'frames_per_s_{count}']:.0f} frames/s "
            f"(client CPU {figures[f'client_cpu_pct_{count}']:.0f}%)"
        )
    print(f"frames/s, 2 processes / 1 process: {figures['ratio']:.2f}")
    complete = all(result.complete for result in results)
    print(f"integrity: every stream carried {settings.max_tokens} tokens and [DONE] -> {'OK' if complete else 'FAIL'}")
    if args.json:
        args.json.write_text(json.dumps({"settings": asdict(settings), "rounds": [asdict(r) for r in results],
                                         "figures": figures}, indent=2))  # fmt: skip
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
