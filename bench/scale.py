"""How far does sse-soak scale? Slow streams per load-generator process, and rows per second a master absorbs.

Why this exists: a nightly soak at production concurrency needs to know how many streams one
Locust worker process can hold with every frame counted, and whether the master that gathers
every worker's rows keeps up. Two parts:

A) Streams per worker process: for each count in ``--streams`` (default 1,000, 5,000, 10,000, 15,000
and 20,000; a count above what the open-files limit fits is cut to that, said when run), one
load-generator process opens that many ``SSEUser`` streams at once against the bundled server (run
with ``--api-server-count`` so that the server is not the bottleneck), each silent for a long
prefill with keep-alive every second and then a few slow tokens; every request id's recorded frames
are compared with the server's ``--trace-file`` (``sse_user_throughput.py``'s capacity phase, reused
as it is). Per count: streams exact (mismatching requests, must be 0), peak open at once, peak RSS
and KiB per stream, CPU ms per thousand frames, and the harness's own event-loop lag (p99, max)
while the streams were open.
Targets (issue 28): 15,000 streams in one worker with exact counts under 1 GiB; lag p99 under 10 ms
at 5,000.

B) Master aggregation: ``python -m loadtests run`` of a small scenario (short streams from a
zero-latency server: as many rows per second as the workers can make) with ``--processes`` 2 and
4; the master's and the workers' CPU (the whole process tree, sampled with psutil), rows per second
the master wrote, rows lost (the summary's ``lost_rows``, must be 0), and the master's CPU share:
the master is not the bottleneck while its CPU stays well under one core and every row arrives.

C) The floor at 5,000 streams (issue 38): the bare receive loop of ``bench/floor_loop.py`` (one
epoll, a stamped ``recvmsg`` per ready socket, no parsing) and sse-soak (the generated locustfile of
``bench/peers.py``, Locust headless) each hold ``--floor-streams`` chat streams of 60 tokens a
second apart (keep-alive every second during the silence while every stream starts), alternating,
three rounds; the server on the first CPU (``--api-server-count``), the tool on the others. CPU
counts only in the steady window, from the last stream's first token to the first stream's last
frame (the server's trace), the tool's process sampled every 0.1 s; per round sse-soak's CPU per
frame over the floor's, and their median (goal: at most 1.3x). ``--part C`` runs it alone.

Part A runs the server on the first CPU and the load generator on the others
(``CapacitySettings.split_cpus``): on two cores, sharing a CPU with the server's processes put the
scheduler's delays into the load generator's lag. Measured 2026-12-06 09:02 UTC on this 2-core
machine, ``python bench/scale.py``, with raw bodies read in the hub through one epoll
(``loadtests.client.body_mux``)::

     streams  exact peak open peak RSS MiB KiB/stream CPU ms/1k frames lag p99 ms lag max ms p99 after spawn
        1000    yes      1000          171       29.3             84.7        1.5       19.7             1.1
        5000    yes      5000          268       25.7             60.4        5.5       37.3             1.6
       10000    yes     10000          387       25.0             52.1        5.8      334.2             1.7
       15000    yes     15000          508       25.0             53.0        8.5      637.8             6.1

    workers    rows   rows/s  lost master CPU CPU per worker
          2   34352     1718     0        27%            26%
          4   31212     1561     0        26%            14%

Every frame exact at every count; 15,000 streams in 508 MiB (target: under 1 GiB, met); lag p99 at
5,000 streams 5.5 ms with the spawn at 1,000 users a second and 1.6 ms once every user was started
(target: under 10 ms, met; a run of 1,000 and 5,000 just before: 4.0 ms, after the spawn 1.1 ms).
The master absorbed every row from 2 and 4 workers at about a quarter of a core: not the
bottleneck (the workers, four on two cores, and the server were).

The same script at 06:00 UTC, with each stream's body read by its user's greenlet (one wake of
that greenlet per frame)::

     streams  exact peak open peak RSS MiB KiB/stream CPU ms/1k frames lag p99 ms lag max ms p99 after spawn
        1000    yes      1000          194       31.3            106.2        1.8       16.3             1.2
        5000    yes      5000          290       26.0             78.7        7.7       69.3             2.5
       10000    yes     10000          416       25.9             64.9       14.7      353.0             8.4
       15000    yes     15000          538       25.6             76.4       22.6      806.7            13.5

    workers    rows   rows/s  lost master CPU CPU per worker
          2   22789     1139     0        33%            23%
          4   18830      942     0        31%            13%

That is 20-31% less CPU per frame with the hub reading, and at 10,000 and 15,000 streams a lag
p99 of 5.8 and 8.5 ms instead of 14.7 and 22.6. Three more runs of 5,000 alone at 06:00: 7.5, 6.5
and 4.2 ms, after the spawn 2.9, 2.5 and 2.6 ms. The code before that per-stream receiver (gevent
arming a timer for every read), run with this script: 14.9 and 16.9 ms, after the spawn 13.7 and
14.1 ms, at 81-92 CPU ms per thousand frames.

Before the CPU split, the same day (server and load generator on both cores; the second run with
the body receiver)::

     streams  before: CPU ms/1k  lag p99  after spawn    with the receiver: CPU ms/1k  lag p99  after spawn
        1000             146.0      8.0          5.2                           100.0      3.0          1.4
        5000              91.4     41.4         18.8                            74.3     18.7         10.3
       10000              87.9    110.4        112.8                            57.3     45.3         26.3
       15000              76.0    187.8        108.9                            61.5     92.8         56.0

20,000 streams (issue 38): one socket a stream, and the load-generator process holds a few files
more (5 before the first user; the epolls, eventfd and stamping socket come with the first stream),
so 20,000 need an open-files limit above this machine's 20,000. ``raise_fd_limit`` raises the hard
limit only where the process may (CAP_SYS_RESOURCE; never past ``fs.nr_open``, 1,048,576 here); this
machine's root runs without that capability (``prlimit`` is refused too), so the step runs the
streams that fit, the limit less ``BASE_FDS_ALLOWANCE`` (64): 19,936, and says so. Two runs,
2026-12-07 12:12 and 12:23 UTC, ``--streams 20000 --workers ''``, with the box under 85-94% CPU
pressure from other work on both cores (``/proc/pressure/cpu``)::

     streams  exact peak open peak RSS MiB KiB/stream CPU ms/1k frames lag p99 ms lag max ms p99 after spawn
       19936     NO     19936          729       29.7             62.7      565.6     2406.3           645.6
       19936     NO     19936          692       27.8             83.3      282.9     2892.8           284.6

Not exact, and not the load generator's doing alone: the server (two processes on core 0) never
held more than 5,715 and 4,129 streams open by its own trace, 1,691 and 4,164 requests failed to
connect within 10 s, and 4,183 and 5,084 were still waiting for their first byte when the run's
time was up. The load generator used 21-23% of its core over the run, so its lag was mostly time
spent waiting for the CPU. A control right after, 10,000 streams at 12:28 UTC (exact on a quiet box,
above): 683 requests failed to connect, the server held at most 4,174 open, lag p99 89.7 ms at 20%
of a core: the box, not the count. Every frame the server sent to a stream that got its answer was
recorded. Under 1 GiB (692-729 MiB, 28-30 KiB a stream) held even so. A quiet box still has to show
20,000 exact with a lag p99 under 10 ms; at 15,000 a keep-alive a second is already 15,000 frames a
second for each side.

What held the loop besides the box: the collector. Each step prints its garbage collections by
generation. At 19,936 streams (12:35 UTC, same busy box) two full collections, each traversing the
million-odd objects of the open streams, took 3.3 s, the longest 2,183 ms: the run's lag max
(2,212.8 ms). So the load generator now freezes what is alive (``gc.freeze``, a list splice) each
time more users run (``loop_hygiene.freeze_users_as_they_start``: what every run's controller does
from each test start, and the bench's load generator as well; ``--no-freeze`` for the before).
One run each, 12:35 and 12:38 UTC, pressure 81-99% (not
alternated: read the direction, not the size)::

                 full GCs  their time  middle GCs (longest)  lag p99 ms  lag max ms  p99 after spawn
    --no-freeze         2     3329 ms      263 (379.5 ms)        190.4      2212.8            158.9
    freeze              0        0 ms      244 (205.6 ms)        137.7       751.8            125.6

The middle collections' wall times include waits for the CPU (a young collection does not take
159 ms of CPU); on a quiet box they are to be measured again.

``--memory-by-type`` first opens 1,000 streams with ``tracemalloc`` on and prints what they hold.
At 12:23 UTC: Python's allocations 18 MiB (about 18 KiB a stream, fixed costs included); by type,
per stream, 3 deques (2.3 KiB), 8 dicts (1.9 KiB), 7.7 lists (1.8 KiB), 18.6 tuples (1.3 KiB), 4
``Headers`` (0.8 KiB), 6 frames of suspended Python code, one ``StreamTracker``; by allocating
module, gevent's pool and threadpool, geventhttpclient's connection pool, user agent and client and
Locust's ``FastHttpSession`` lead (1.2-4.2 KiB each), ``loadtests/load/users.py`` 1.4 KiB: each
user's own HTTP client and pool is the largest Python share. The rest of the RSS is greenlet stacks
and the allocator's own.

``--quick`` proves the script works in seconds (A at 100 and 200 streams, B with 2 workers for 5 s, C at
100 streams of 10 tokens 0.2 s apart, one round);
its figures say nothing about scale. Run it in full on an otherwise idle machine: it uses both cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO_ROOT = BENCH.parent
for path in (str(REPO_ROOT), str(BENCH)):
    if path not in sys.path:  # run as a plain script: make ``loadtests`` and the bench modules importable
        sys.path.insert(0, path)

from common import zero_latency_server_args  # noqa: E402
from sse_user_throughput import (  # noqa: E402
    BenchError,
    CapacitySettings,
    capacity_phase,
    compare_capacity,
    may_raise_hard_limits,
    print_capacity,
    print_memory_by_type,
    raise_fd_limit,
    start_server,
)

FULL_STREAMS = (1000, 5000, 10000, 15000, 20000)
QUICK = {
    "streams": "100,200",
    "workers": "2",
    "aggregation_seconds": 5,
    "api_server_count": 1,
    "floor_streams": 100,
    "floor_tokens": 10,
    "floor_itl_ms": 200.0,
    "floor_rounds": 1,
}
SPAWN_RATE = 1000.0
"""Users started per second: fast enough that every stream is open before the first one ends."""
SILENCE_AFTER_SPAWN_MS = 5000.0
TOKENS = 4
ITL_MS = 1000.0
FD_HEADROOM = 1024
"""Open files asked beyond one a stream (``raise_fd_limit``)."""
BASE_FDS_ALLOWANCE = 64
"""Files the load-generator process holds besides its streams' sockets, with room to spare: std
streams, libev's epoll and eventfd, the body mux's epoll, the stamping socket, the server's
stdin pipe... (printed per step as "files open before the first user": 20-30 here)."""
MEMORY_STREAMS = 1000
"""``--memory-by-type``: streams open when the allocations are counted."""

AGGREGATION_SCENARIO = textwrap.dedent(
    """
    from loadtests import RequestMix, RequestSpec, Scenario, SSEUser

    scenario = Scenario(name="aggregation", gates=[])


    class ShortStreamUser(SSEUser):
        mix = RequestMix([RequestSpec("short", "completions", 8, max_tokens=16)])
    """
)
"""Short streams, one after another per user: rows as fast as the workers can make them."""


def ladder_settings(
    streams: int, api_server_count: int, freeze: bool = True, spawn_rate: float = SPAWN_RATE
) -> CapacitySettings:
    """``streams`` slow streams, all open at once: silent until every one has started, then 4 tokens."""
    spawn_s = streams / spawn_rate
    ttft_ms = 1000 * spawn_s + SILENCE_AFTER_SPAWN_MS
    timeout_s = spawn_s + (ttft_ms + TOKENS * ITL_MS) / 1000 + 60
    extra: tuple[str, ...] = ()
    if api_server_count > 1:  # slots to spare: each process queues on its own, and connections spread unevenly
        extra = ("--api-server-count", str(api_server_count), "--max-num-seqs", str(2 * streams))
    return CapacitySettings(
        streams, spawn_rate, TOKENS, ttft_ms, ITL_MS, 1.0, timeout_s, extra, split_cpus=True, freeze_open_streams=freeze
    )


def streams_that_fit(fd_limit: int) -> int:
    """The most streams one load-generator process opens under ``fd_limit`` open files."""
    return max(1, fd_limit - BASE_FDS_ALLOWANCE)


def ladder(
    counts: list[int], api_server_count: int, fd_limit: int, freeze: bool = True, spawn_rate: float = SPAWN_RATE
) -> list[dict[str, Any]]:
    rows = []
    for asked in counts:
        streams = min(asked, streams_that_fit(fd_limit))
        settings = ladder_settings(streams, api_server_count, freeze, spawn_rate)
        print(f"\n== {streams} streams in one load-generator process ==")
        if streams < asked:
            print(
                f"(asked for {asked}: the open-files limit {fd_limit} could not be raised, and it fits {streams} "
                f"streams beside the process's own {BASE_FDS_ALLOWANCE} files)"
            )
        figures = compare_capacity(capacity_phase(settings), settings)
        print_capacity(figures, settings)
        frames = max(figures["frames_recorded"], 1)
        rows.append(
            {
                "streams": streams,
                "asked": asked,
                "fds_before": figures["fds_before"],
                "exact": figures["ok"],
                "mismatches": figures["mismatches"],
                "peak_open": figures["peak_open_harness"],
                "peak_rss_mib": figures["peak_rss_mib"],
                "kib_per_stream": (figures["peak_rss_mib"] - figures["rss_before_mib"]) * 1024 / streams,
                "cpu_ms_per_1k_frames": 1e6 * figures["cpu_s"] / frames,
                "lag_p99_ms": figures["lag_p99_ms"],
                "lag_max_ms": figures["lag_max_ms"],
                "lag_p99_after_spawn_ms": figures["lag_p99_after_spawn_ms"],
                "collections": figures["collections"],
            }
        )
    return rows


def memory_by_type(api_server_count: int) -> dict[str, Any]:
    """``MEMORY_STREAMS`` streams opened with the load generator's allocations traced: what one
    stream costs, by type and by allocating module (not a ladder step: tracing slows the spawn)."""
    settings = replace(ladder_settings(MEMORY_STREAMS, api_server_count), memory_by_type=True)
    print(f"\n== memory by type: {MEMORY_STREAMS} streams, allocations traced ==")
    figures = compare_capacity(capacity_phase(settings), settings)
    print_capacity(figures, settings)
    breakdown: dict[str, Any] = figures["memory_by_type"]
    print_memory_by_type(breakdown)
    return breakdown


def print_ladder(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'streams':>8} {'exact':>6} {'peak open':>9} {'peak RSS MiB':>12} {'KiB/stream':>10} "
        f"{'CPU ms/1k frames':>16} {'lag p99 ms':>10} {'lag max ms':>10} {'p99 after spawn':>15}"
    )
    for row in rows:
        print(
            f"{row['streams']:>8} {('yes' if row['exact'] else 'NO'):>6} {row['peak_open']:>9} "
            f"{row['peak_rss_mib']:>12.0f} {row['kib_per_stream']:>10.1f} {row['cpu_ms_per_1k_frames']:>16.1f} "
            f"{row['lag_p99_ms']:>10.1f} {row['lag_max_ms']:>10.1f} {row['lag_p99_after_spawn_ms']:>15.1f}"
        )


@dataclass
class TreeCpu:
    """CPU seconds of a process and every descendant it ever had, sampled while they run (a child
    that exits between samples loses at most one interval)."""

    root: int
    by_pid: dict[int, tuple[str, float]]

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.root)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in processes:
            try:
                times = process.cpu_times()
                role = "master" if process.pid == self.root else _role(process.cmdline())
            except psutil.Error:
                continue
            self.by_pid[process.pid] = (role, times.user + times.system)

    def by_role(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for role, cpu in self.by_pid.values():
            totals[role] = totals.get(role, 0.0) + cpu
        return totals


def _role(cmdline: list[str]) -> str:
    """A descendant of the master: a worker (``--processes`` forks them: they share its command
    line), unless it is a server the run started."""
    return "server" if "target_server" in cmdline else "worker"


def aggregation(workers: int, seconds: int, report_dir: Path) -> dict[str, Any]:
    """One ``--processes workers`` run of short streams against a zero-latency server."""
    scenario = report_dir / "aggregation.py"
    scenario.write_text(AGGREGATION_SCENARIO)
    server = start_server([*zero_latency_server_args(64, 4096), "--api-server-count", "2"])  # not the bottleneck
    try:
        command = [
            sys.executable, "-m", "loadtests", "run", str(scenario), "--processes", str(workers), "--headless",
            "--only-summary", "-u", str(8 * workers), "-r", str(8 * workers), "-t", f"{seconds}s",
            "--host", server.url, "--report-dir", str(report_dir), "--harness-lag-limit-ms", "0",
        ]  # fmt: skip
        began = time.monotonic()
        run = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        cpu = TreeCpu(run.pid, {})
        while run.poll() is None and time.monotonic() - began < seconds + 120:
            cpu.sample()
            time.sleep(0.25)
        if run.poll() is None:
            run.kill()
        output = run.communicate()[0]
        wall = time.monotonic() - began
    finally:
        server.stop()
    summaries = sorted(report_dir.glob("aggregation-*/summary.json"))
    if not summaries:
        raise BenchError(f"the aggregation run with {workers} workers wrote no summary: {output[-2000:]}")
    summary = json.loads(summaries[-1].read_text())
    by_role = cpu.by_role()
    lost = summary.get("lost_rows") or {}
    return {
        "workers": workers,
        "rows": summary["requests"],
        "rows_per_s": summary["requests"] / seconds,
        "lost_rows": sum(int(entry.get("missing", 0)) for entry in lost.values()) if isinstance(lost, dict) else 0,
        "master_cpu_share": by_role.get("master", 0.0) / wall,
        "worker_cpu_share": by_role.get("worker", 0.0) / wall / workers,
        "verdict": summary.get("verdict"),
    }


def print_aggregation(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'workers':>7} {'rows':>7} {'rows/s':>8} {'lost':>5} {'master CPU':>10} {'CPU per worker':>14}")
    for row in rows:
        print(
            f"{row['workers']:>7} {row['rows']:>7} {row['rows_per_s']:>8.0f} {row['lost_rows']:>5} "
            f"{100 * row['master_cpu_share']:>9.0f}% {100 * row['worker_cpu_share']:>13.0f}%"
        )
    for row in rows:
        keeps_up = row["lost_rows"] == 0 and row["master_cpu_share"] < 0.5
        print(
            f"master with {row['workers']} workers: {'not the bottleneck' if keeps_up else 'MAY BE THE BOTTLENECK'} "
            f"({100 * row['master_cpu_share']:.0f}% of a core, {row['lost_rows']} rows lost)"
        )


# --- C) the floor at 5,000 streams (issue 38) -------------------------------------------------------

FLOOR_STREAMS = 5000
FLOOR_TOKENS = 60
FLOOR_ITL_MS = 1000.0
FLOOR_KEEPALIVE_S = 1.0
FLOOR_PROMPT_TOKENS = 32
FLOOR_ROUNDS = 3
FLOOR_SILENCE_AFTER_SPAWN_MS = 2000.0
FLOOR_SLACK_S = 3
"""Each run lasts this long past its first streams' last token: the steady window ends before."""


def floor_workload(streams: int, tokens: int, itl_ms: float) -> Any:
    """``streams`` chat streams of ``tokens`` tokens ``itl_ms`` apart, silent (keep-alive every
    second) until every one has started, no faults: many frames per stream, so that what a request
    costs (connect, head, row) weighs little beside the frames."""
    from peers import Workload

    spawn_s = streams / SPAWN_RATE
    ttft_ms = 1000 * spawn_s + FLOOR_SILENCE_AFTER_SPAWN_MS
    duration_s = math.ceil(spawn_s + (ttft_ms + tokens * itl_ms) / 1000 + FLOOR_SLACK_S)
    return Workload(
        streams, FLOOR_PROMPT_TOKENS, tokens, duration_s, ttft_ms, itl_ms, keepalive_s=FLOOR_KEEPALIVE_S, fault_pct=0
    )


def steady_window(sent: Any) -> tuple[float, float]:
    """From the server's trace: from the first token of the last stream to start (of those started
    before any ended) to the first stream's last frame: every stream open and streaming tokens.
    (nan, nan) when there is no such window."""
    if sent.empty:
        return float("nan"), float("nan")
    spans = sent.groupby("request_id")["t"].agg(["min", "max"])
    first_end = float(spans["max"].min())
    data = sent[sent["kind"] == "data"]
    first_tokens = data.groupby("request_id")["t"].min()
    first_wave = first_tokens[spans.loc[first_tokens.index, "min"] < first_end]
    start = float(first_wave.max()) if len(first_wave) else float("nan")
    return (start, first_end) if start < first_end else (float("nan"), float("nan"))


def floor_run(tool: str, work: Any, workdir: Path, api_server_count: int) -> dict[str, Any]:
    """One run of ``tool`` ("floor" or "sse-soak") against a fresh server on the first CPU (the tool
    on the others, as part A); its CPU and the server's frames in the steady window."""
    import peers
    from sse_user_throughput import cpu_split, pinned

    workdir.mkdir(parents=True)
    trace = workdir / "trace.jsonl"
    extra = ["--api-server-count", str(api_server_count)] if api_server_count > 1 else []
    server_cpus, loadgen_cpus = cpu_split(True)
    with pinned(server_cpus):
        server = start_server([*work.server_args(trace), *extra])
    try:
        with pinned(loadgen_cpus):
            if tool == peers.FLOOR:
                command, env = peers.floor_command(work, server.url, workdir)
            else:
                command, env = peers.sse_soak_command(work, server.url, workdir, spawn_rate=SPAWN_RATE)
            measured = peers.run_measured(command, env, workdir, workdir / "tool.log", work.duration_s + 180)
    finally:
        server.stop()
    sent = peers.read_trace(trace)
    start, end = steady_window(sent)
    frames = int(((sent["t"] >= start) & (sent["t"] <= end)).sum()) if start == start else 0
    cpu_s = measured.cpu_between(start, end) if frames else float("nan")
    counters = peers.read_counters(workdir / peers.COUNTERS_FILE)
    log = (workdir / "tool.log").read_text(errors="replace").splitlines()
    failed_gates = [
        line.split()[2].rstrip(":") for line in log if line.startswith("gate FAIL ") and len(line.split()) > 2
    ]
    return {
        "tool": tool,
        "exit": measured.code,
        "frames": frames,
        "window_s": end - start,
        "cpu_s": cpu_s,
        "us_per_frame": 1e6 * cpu_s / frames if frames else float("nan"),
        "nvcsw": counters.get("nvcsw"),
        "nivcsw": counters.get("nivcsw"),
        "failed_gates": failed_gates,
    }


def floor_rounds(streams: int, tokens: int, itl_ms: float, rounds: int, api_server_count: int) -> dict[str, Any]:
    """Floor and sse-soak alternating (which goes first alternates too), ``rounds`` each; per round
    sse-soak's CPU per frame over the floor's, in the steady window."""
    import peers

    work = floor_workload(streams, tokens, itl_ms)
    print(
        f"\n== C: the floor at {streams} streams: {tokens} tokens {itl_ms:g} ms apart, keep-alive "
        f"{FLOOR_KEEPALIVE_S:g} s, {rounds} round(s) of floor and sse-soak, {work.duration_s} s each =="
    )
    runs: list[dict[str, Any]] = []
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sse-bench-floor-") as directory:
        for number in range(1, rounds + 1):
            order = [peers.FLOOR, "sse-soak"] if number % 2 else ["sse-soak", peers.FLOOR]
            here = {
                tool: floor_run(tool, work, Path(directory) / f"round-{number}" / tool, api_server_count)
                for tool in order
            }
            for tool in (peers.FLOOR, "sse-soak"):
                run = here[tool]
                print(
                    f"round {number} {tool:<8}: {run['frames']} frames in a {run['window_s']:.1f} s steady window, "
                    f"CPU {run['cpu_s']:.2f} s, {run['us_per_frame']:.1f} us per frame; nvcsw {run['nvcsw']}, "
                    f"nivcsw {run['nivcsw']} (whole run); exit {run['exit']}"
                    + (f" (gates failed: {', '.join(run['failed_gates'])})" if run["failed_gates"] else "")
                )
                runs.append({"round": number, **run})
            ratio = here["sse-soak"]["us_per_frame"] / here[peers.FLOOR]["us_per_frame"]
            ratios.append(ratio)
            print(f"round {number}: sse-soak CPU per frame / floor at {streams} streams: {ratio:.2f}x")
    usable = sorted(ratio for ratio in ratios if ratio == ratio)
    median = statistics.median(usable) if usable else float("nan")
    print(
        f"floor at {streams} streams: sse-soak CPU per frame / floor {', '.join(f'{r:.2f}' for r in ratios)} "
        f"(median {median:.2f}x) (goal <= {peers.FLOOR_GOAL:g}x)"
    )
    return {"streams": streams, "runs": runs, "ratios": ratios, "median_ratio": median}


def _counts(text: str, allow_none: bool = False) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None
    if (not counts and not allow_none) or min(counts, default=1) < 1:
        raise argparse.ArgumentTypeError(f"expected whole numbers >= 1, got {text!r}")
    return counts


def _counts_or_none(text: str) -> list[int]:
    """As ``_counts``, but '' is no count at all: that part is skipped."""
    return _counts(text, allow_none=True)


def _parts(text: str) -> str:
    parts = text.replace(",", "").upper()
    if not parts or not set(parts) <= set("ABC"):
        raise argparse.ArgumentTypeError(f"expected parts among A, B and C, got {text!r}")
    return parts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK} unless given")
    parser.add_argument("--streams", type=_counts, default=list(FULL_STREAMS), help="A: stream counts, comma-separated")
    parser.add_argument("--api-server-count", type=int, default=2, help="A: bundled server processes (default 2)")
    parser.add_argument(
        "--workers", type=_counts_or_none, default=[2, 4], help="B: worker counts (default 2,4; '' skips B)"
    )
    parser.add_argument(
        "--spawn-rate",
        type=float,
        default=SPAWN_RATE,
        help=f"A: users started a second (default {SPAWN_RATE:.0f}); the streams' silence lasts the spawn plus 5 s",
    )
    parser.add_argument("--aggregation-seconds", type=int, default=20, help="B: seconds per run (default 20)")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="A: leave the open streams' objects to the collector (no gc.freeze while users start): the before",
    )
    parser.add_argument(
        "--memory-by-type",
        action="store_true",
        help=f"A: first open {MEMORY_STREAMS} streams with tracemalloc on, and print what a stream holds by type",
    )
    parser.add_argument(
        "--part", type=_parts, default="ABC", help="which parts to run: A, B, C or any mix (default ABC)"
    )
    parser.add_argument("--floor-streams", type=int, default=FLOOR_STREAMS, help="C: streams at once (default 5000)")
    parser.add_argument("--floor-tokens", type=int, default=FLOOR_TOKENS, help="C: tokens per stream (default 60)")
    parser.add_argument("--floor-itl-ms", type=float, default=FLOOR_ITL_MS, help="C: ms between tokens (default 1000)")
    parser.add_argument("--floor-rounds", type=int, default=FLOOR_ROUNDS, help="C: rounds of floor and sse-soak (3)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    if parser.parse_known_args(argv)[0].quick:
        quick = {key: _counts(value) if isinstance(value, str) else value for key, value in QUICK.items()}
        parser.set_defaults(**quick)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    most = max([*options.streams, options.floor_streams])
    fd_limit = raise_fd_limit(most + FD_HEADROOM)
    print(f"sse-soak scale benchmark; open-files limit {fd_limit}")
    privileged = "may" if may_raise_hard_limits() else "may not (no CAP_SYS_RESOURCE)"
    print(f"(this process {privileged} raise its hard limit; a step above what the limit fits is cut)")
    memory: dict[str, Any] = {}
    floor: dict[str, Any] | None = None
    try:
        if options.memory_by_type:
            memory = memory_by_type(options.api_server_count)
        ladder_rows = (
            ladder(options.streams, options.api_server_count, fd_limit, not options.no_freeze, options.spawn_rate)
            if "A" in options.part
            else []
        )
        if ladder_rows:
            print_ladder(ladder_rows)
        aggregation_rows = []
        with tempfile.TemporaryDirectory(prefix="sse-bench-scale-") as directory:
            for workers in options.workers if "B" in options.part else []:
                report_dir = Path(directory) / f"workers-{workers}"
                report_dir.mkdir()
                aggregation_rows.append(aggregation(workers, options.aggregation_seconds, report_dir))
        if aggregation_rows:
            print_aggregation(aggregation_rows)
        if "C" in options.part:
            floor = floor_rounds(
                options.floor_streams,
                options.floor_tokens,
                options.floor_itl_ms,
                options.floor_rounds,
                options.api_server_count,
            )
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if options.json is not None:
        figures = {"streams": ladder_rows, "aggregation": aggregation_rows, "memory_by_type": memory, "floor": floor}
        options.json.write_text(json.dumps(figures, indent=2) + "\n")
    exact = all(row["exact"] for row in ladder_rows) and all(row["lost_rows"] == 0 for row in aggregation_rows)
    median_lag = statistics.median(row["lag_p99_ms"] for row in ladder_rows) if ladder_rows else float("nan")
    if set(options.part) & {"A", "B"}:  # C counts CPU, not rows
        print(f"\nevery frame exact and no row lost: {'yes' if exact else 'NO'}; median lag p99 {median_lag:.1f} ms")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
