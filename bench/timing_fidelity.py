"""How faithfully does the harness record when SSE frames arrive? Its gaps against the server's own.

Why this exists: every gap figure and gate of sse-soak (max gap, keep-alive against silence) rests on
the time the harness stamps on each frame. A load generator whose event loop is busy stamps frames
late, and a late frame looks like a server stall that never happened. This benchmark measures that
error against ground truth: the bundled server's ``--trace-file``, one line per SSE frame with
``time.monotonic()`` just before the frame goes to the transport, keyed by the client's
``X-Request-Id`` (which ``SSEUser`` sets to its row's ``request_id``).

For each load it starts the server (``--time-to-first-token 300 --inter-token-latency 40
--sse-keep-alive-interval 0.1``; ``--max-model-len 8192`` and ``--prefill-time-per-token 0.05`` from
the scenario's profile; ``--max-num-seqs 2048`` so no stream waits in the queue) on a free loopback
port, runs the ``mixed_truncate`` scenario against it as a real Locust subprocess (``python -m locust
-f scenarios/mixed_truncate.py --headless --host ... -u N -r N -t Ds --only-summary``, with
``--processes 2`` at the largest load), stops both by pid and compares, stream by stream:

- streams: raw-client (``SSEUser``) rows with outcome ``ok``, which record every frame, keep-alive
  comments included (``openai`` rows see no comments and are skipped). Streams started in the first
  ``--skip-first`` seconds of the run (5 s; 1 s in quick mode) are dropped: they cover spawning and
  the first synchronised wave of prefills, a start-up transient rather than steady load.
- count mismatches: streams whose recorded frames (by ``seq``) and traced frames (by ``t``) differ
  in number or in kind; their gaps are not compared.
- error: for each pair of consecutive frames, ``abs(recorded gap - sent gap)``, recorded gap the
  difference of the harness's ``t_s`` and sent gap that of the trace's ``t``; p50, p99 and max in ms.
- flagged: an error ``e`` over 10 ms at gap (i-1 -> i) is one the harness flagged itself when either
  (a) frame i-1 or i says its bytes lay in the kernel 1 ms or more before the harness read them
  (``wait_s`` of frames.parquet: the harness read it late, and knows it), or (b) a lag sample of the
  same process whose blocked window ``[t_mono - lag_s, t_mono]`` overlaps the interval from ``e``
  before the recorded time of frame i-1 to the recorded time of frame i (monotonic clock) is big
  enough to explain it, ``lag_s >= e - 10 ms``, or the blocked windows clipped to that interval add
  up to as much (a saturated loop, behind at every sample). (A stall of length L delays a frame by
  at most L, so it changes a gap by at most L; the monitor, asleep for up to one 10 ms interval when
  a stall begins, reports at least L - 10 ms. The interval is widened by 10 ms at each end for the same
  reason. It starts ``e`` early because a frame stamped ``e`` late arrived ``e`` before its stamp,
  and the stall that held it lies between the two.) (b) is what covers a frame that arrived during a
  stall and was read together with a later one: it carries the later frame's stamp and the wait of
  the later frame only. Recorded times are placed on the monotonic clock per worker: ``start_time -
  median(time - t_mono) + t_s``. An error neither explains is a stall the harness did not see: the
  count of those whose frames were sent apart but came in one read is printed with it. Without
  ``lag.parquet`` the flagged share is reported as unavailable. A control line gives the share of
  gaps with an error under 1 ms that overlap a stall of 5 ms or more (the gate's limit): how often
  a gap meets a stall by chance.
- bursts: errors over 20 ms binned into 50 ms windows by the recorded arrival time of frame i on
  the monotonic clock (the lag monitor's offset when there is one, else this process's
  ``time.time() - time.monotonic()``, the same two machine-wide clocks); the number of windows hit
  and the most streams hit in one window. Many streams in one window is the signature of the load
  generator stalling, not of the network or the server.

Run it (full mode: 50, 200 and 1,000 users, then 1,000 over two worker processes, 30 s each, under
three minutes here)::

    python bench/timing_fidelity.py [--users 50,200,1000] [--duration 30] [--processes-at-largest 2] [--keep]
    python bench/timing_fidelity.py --quick     # 20 users for 6 s: proves the script works, same table
    python bench/timing_fidelity.py --timing-resolution-ms 5   # Locust reads coalesced to 5 ms

With ``--timing-resolution-ms R`` every load's Locust reads at that resolution: frames of one stream
closer than R share one read and one stamp, so errors up to about R (plus libev's 1 ms timer
rounding) are the resolution asked for, not a stall; the ">10 ms" and flagged columns mean what they
say only for R well under 10 ms.

Measured 2026-12-03 on this 2-core machine (otherwise idle), server and harness on the same box,
with ``python bench/timing_fidelity.py``: 30 s per load, first 5 s dropped; errors in ms, no
stream miscounted. First, frames timed when the harness read them (ff8ffe6) against frames stamped
with the kernel's arrival time (b036cad)::

                   ------------ read time ------------   ---------------- kernel stamp ----------------
    users  procs   p99    max   >10 ms  flagged        p99   max   >10 ms  flagged      stamped late
       50      1   6.09   18.1      50   47 (94%)      0.22   5.4      0   none             0.03
      200      1  19.73   50.0   2,999  2,723 (91%)    0.29  61.3    206   206 (100%)       0.04
    1,000      1   0.17  172.5      36   20 (56%)      0.59   6.2      0   none             0.23
    1,000      2   5.04  285.8     405  343 (85%)      0.16   4.8      0   none             0.17

Then, later the same day, main at c69614d (the server by then tokenizing in a pool of intake
threads, on asyncio and h11) against this code: the server on uvloop and httptools, as vLLM runs,
with a 1 ms GIL switch interval, no trace write between stamp and send, and token counting three
times cheaper; the harness without a reference cycle per failed request, with full collections
ten times rarer. Two full runs after, then five more runs of 200 users alone::

                   ------------- c69614d -------------   -------------- after (two runs) --------------
    users  procs   p99    max   >10 ms  flagged        p99           max          >10 ms      flagged
       50      1   0.99    4.9       0   none          0.11 / 0.16   2.6 / 5.6        0 / 0    none
      200      1   4.90   57.2     219   177 (81%)     0.15 / 37.79 44.6 / 88.2   332 / 2,061  97% / 97%
    1,000      1   0.37   84.6      85   80 (94%)      4.39 / 36.92 128.5 / 107.9 1,269 / 1,577 97% / 98%
    1,000      2   0.43   46.8       8    2 (25%)      0.20 / 0.19  61.5 / 71.6   106 / 32     99% / 97%

    200 users, one process, five more runs: p99 1.13, 0.20, 0.72, 0.18, 0.14 ms; max 47-83 ms.

How to read it: p50 (0.00-0.05 ms in every run) is what a frame's gap is off by normally; p99 and
max are the stalls. "stamped late" (printed per load) is the median of (recorded arrival - sent)
on the monotonic clock: it must be small and positive (a check that the clocks line up); it was
3.13 ms at 200 users when the harness stamped at the read. With kernel stamps an error has one of
two causes, which ``--keep`` and the frames' ``wait_s`` tell apart: frames sent apart that reached
the socket while the loop was busy and were read together (the harness's share), or a frame whose
bytes reached this machine late against its trace stamp and were read at once (the server's
share: it sent after its stamp). The server's share fell with this code: at 200 users, the p99
over gaps of frames read one by one went from 1.4-1.9 ms to 0.15 ms. The harness's share depends
on whether the two processes leave it a core: with the server at 66-72% of a core and Locust at
71-83%, 200 users gave p99 0.14-1.13 ms in six runs of seven; in the seventh the machine was
busier and reads fell 20-40 ms behind (37.8 ms). A faster server also means more requests: at
1,000 users one Locust process no longer keeps up (the server used to be the bottleneck there,
TTFT in seconds), and harness_kept_up says so; two processes gave 0.19-0.20 ms. An error neither
the lag monitor nor ``wait_s`` flags was once taken for the server's share, since the harness read
those bytes within 1 ms of the read's stamp. A capture on the loopback device says otherwise
(2026-12-04, ``tcpdump -i lo`` during one run of 200 users, each server segment matched to its
frame by its stream's ``X-Request-Id`` and the trace's frame sizes): all 106 such errors were a
frame the server handed to the kernel 0.01-0.10 ms after its stamp, as a segment of its own, that
the harness read together with the next frame of the stream 25-51 ms later (the error: p50 38.6 ms,
one inter-token interval) and so stamped with that frame's arrival. Over every frame of the run,
capture minus server stamp was p50 0.024 ms, p99 0.067 ms: the trace is faithful to a tenth of a
millisecond. So an unflagged error is the harness's own, a frame it read late without its monitor
seeing a stall long enough to explain it. The benchmark's test (b) missed them twice over. It
looked in the wrong place: its window began at the recorded time of frame i-1, after the stall
that held it (it now begins ``e`` earlier: 24 of the 106 flagged). And it asked for one stall as
long as the error, where the loop was saturated: behind by 6-38 ms (median 21 ms) at every sample
in the window, and a read that waits through two long iterations is late by both while each sample
holds one (the blocked time inside the window, summed, now counts too: 103 of the 106 flagged). The
last 3 are three streams held 26.8 ms at one instant while the monitor saw the loop at most 6.1 ms
behind; what held them is not found. Re-judged the same way, four other runs of that day at 200
and 1,000 users left 2, 0, 0 and 0 unflagged. A control line beside the share says how little it
proves on a saturated loop: 43-92% of the gaps whose error was under 1 ms also met a stall of 5 ms
or more in those runs.

Then, with both changes to (b), one full run (``python bench/timing_fidelity.py``) on a machine
whose Python ran a 10-million-step loop in 1.03-2.06 s (the speed moved from minute to minute);
the harness's lag p99 from each run's summary.json::

    users  procs   p99    max    >10 ms  flagged        control   harness lag p99
       50      1   0.14    4.2       0   none              1.4%     3.8 ms  PASS
      200      1  43.92  103.8   4,977   4,976 (99.9%)    74.9%    41.1 ms  harness_kept_up FAIL
    1,000      1   0.24   87.5     448   448 (100%)       47.3%    34.0 ms  harness_kept_up FAIL
    1,000      2   0.23  116.2      66   66 (100%)        24.4%    14.2 ms  harness_kept_up FAIL

On that machine 200 users in one Locust process gave p99 39.9-62.0 ms in five runs (the 2 ms target
held in six of seven runs the day before): the process was behind most of each run (mean lag per
second up to 48 ms), and its gate said so in every one. At 1,000 users most streams wait for their
prefill, so fewer frames arrive per second and the p99 stays low.

Exit status: 1 if a server or a Locust run failed to start, wrote no run directory or overran its
bound, or if no gap could be compared; a failed verdict of the scenario itself is printed, not fatal.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.json

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` importable
    sys.path.insert(0, str(REPO_ROOT))

from soak_memory import run_bounded  # noqa: E402 - bench/ is on sys.path as the script's folder

from loadtests.errors import ServerStartError  # noqa: E402
from loadtests.record.run_dir import RunDir  # noqa: E402
from loadtests.services.stack import API_KEY_ENV, TargetServerProcess  # noqa: E402

SCENARIO = REPO_ROOT / "scenarios" / "mixed_truncate.py"
SERVER_PROFILE = [
    "--host",
    "127.0.0.1",
    "--max-model-len",
    "8192",
    "--max-num-seqs",
    "2048",
    "--prefill-time-per-token",
    "0.05",
    "--time-to-first-token",
    "300",
    "--inter-token-latency",
    "40",
    "--sse-keep-alive-interval",
    "0.1",
]
"""The issue's measurement; max-model-len and prefill per token as the scenario's own profile."""
FLAG_ERROR_S = 0.010
SHARED_READ_SENT_APART_S = 0.001
READ_LATE_S = 0.001
"""A frame whose bytes waited this long in the kernel before the read was read late by the harness."""
CONTROL_LAG_S = 0.005
LAG_SAMPLE_INTERVAL_S = 0.010
CONTROL_ERROR_S = 0.001
BURST_ERROR_S = 0.020
BURST_WINDOW_S = 0.050
LOCUST_OVERRUN_S = 120.0
"""How long Locust may take past ``-t`` (spawning, preparing prompts, the report) before it is stopped."""
QUICK = {"users": "20", "duration": 6, "processes_at_largest": 1, "skip_first": 1.0}
"""``--quick``: seconds, not minutes; the same table."""
TABLE_HEADER = (
    "| users | processes | gaps compared | error p50 ms | p99 ms | max ms | count mismatches | errors >10 ms "
    "| flagged by the harness | not flagged | bursts (50 ms windows >20 ms, max streams) |"
)


class BenchError(RuntimeError):
    """A server or Locust run failed: this load has no figures (exit status 1)."""


@dataclass(frozen=True)
class Load:
    users: int
    processes: int
    resolution_ms: float = 0.0
    """``--timing-resolution-ms`` handed to Locust (0, the default: every receive read and stamped)."""


@dataclass(frozen=True)
class Run:
    """What one load left behind: the run directory, the server's trace, Locust's last lines."""

    load: Load
    run_dir: Path
    trace: Path
    verdict: str
    clock_offset_s: float
    """``time.time() - time.monotonic()`` in this process, averaged over the run."""


@dataclass(frozen=True)
class Gaps:
    """One row per compared gap (i-1 -> i) of a stream."""

    frame: pd.DataFrame
    """Columns: request_id, worker, error_s, prev_mono and mono (recorded times of frames i-1 and i on
    the monotonic clock), sent (the trace's time of frame i), shared_read (frame i-1 or i came in one
    read with the frame after it although the server sent them apart), waited_s (the longer
    ``wait_s`` of the two: how long their bytes lay in the kernel before the harness read them)."""
    streams: int
    mismatches: int


@dataclass(frozen=True)
class Figures:
    load: Load
    streams: int
    gaps: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    mismatches: int
    over_10ms: int
    flagged: int | None
    """Errors over 10 ms the harness flagged itself: a stall its lag monitor recorded explains it, or a
    frame of the gap says its bytes waited in the kernel (``wait_s``) 1 ms or more before they were
    read. None when the run has no ``lag.parquet``."""
    unflagged_together: int
    """Unflagged errors over 10 ms where a frame came in one read with a later one, sent apart."""
    over_20ms: int
    burst_windows: int
    burst_max_streams: int
    delivery_p50_ms: float
    """Median of (recorded arrival - sent) on the monotonic clock: how late frames are stamped, and a
    check that recorded times were placed on the right clock (it must be small and positive)."""
    control_flagged_pct: float
    """Share of the gaps with an error under 1 ms that overlap a stall of ``CONTROL_LAG_S`` or more: how
    often a gap meets a stall by chance (nan without a lag monitor)."""

    @property
    def flagged_share_pct(self) -> float:
        return 100.0 * self.flagged / self.over_10ms if self.flagged is not None and self.over_10ms else float("nan")

    @property
    def flagged_text(self) -> str:
        if self.flagged is None:
            return "n/a"
        if not self.over_10ms:
            return "none to flag"
        share = "100%" if self.flagged == self.over_10ms else f"{math.floor(self.flagged_share_pct * 10) / 10:.1f}%"
        return f"{self.flagged:,} ({share})"  # floored: 3 unflagged of 7,379 is 99.9%, never 100%

    @property
    def unflagged(self) -> int:
        return self.over_10ms - (self.flagged or 0)

    def table_row(self) -> str:
        return (
            f"| {self.load.users:,} | {self.load.processes} | {self.gaps:,} | {self.p50_ms:.2f} | {self.p99_ms:.2f} "
            f"| {self.max_ms:.1f} | {self.mismatches} | {self.over_10ms:,} | {self.flagged_text} | {self.unflagged:,} "
            f"| {self.burst_windows}, {self.burst_max_streams} |"
        )


# --------------------------------------------------------------------------------------------
# Running one load: the server and Locust as child processes, stopped by pid.
# --------------------------------------------------------------------------------------------


def locust_command(load: Load, url: str, duration_s: int, report_dir: Path) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(SCENARIO),
        "--headless",
        "--host",
        url,
        "-u",
        str(load.users),
        "-r",
        str(load.users),
        "-t",
        f"{duration_s}s",
        "--report-dir",
        str(report_dir),
        "--only-summary",
    ]
    if load.resolution_ms:
        command += ["--timing-resolution-ms", f"{load.resolution_ms:g}"]
    return command + (["--processes", str(load.processes)] if load.processes > 1 else [])


def last_line(text: str, prefix: str) -> str | None:
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return lines[-1][len(prefix) :].strip() if lines else None


def server_env() -> dict[str, str]:
    """This checkout's packages on the path, and no API key (the server gets none)."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**{name: value for name, value in os.environ.items() if name != API_KEY_ENV}, "PYTHONPATH": path}


def run_load(load: Load, duration_s: int, workdir: Path) -> Run:
    """Start a fresh server with a trace file, run Locust against it, stop both; the run's files."""
    directory = Path(tempfile.mkdtemp(prefix=f"u{load.users}-p{load.processes}-", dir=workdir))  # a load may repeat
    trace = directory / "trace.jsonl"
    try:
        server = TargetServerProcess.start([*SERVER_PROFILE, "--trace-file", str(trace)], env=server_env())
    except (ServerStartError, OSError) as exc:
        raise BenchError(f"target server failed to start: {exc}") from exc
    try:
        print(f"server: {server.description}")
        command = locust_command(load, server.url, duration_s, directory / "reports")
        print(f"running: {' '.join(command[1:])}", flush=True)
        offset_before = time.time() - time.monotonic()
        result = run_bounded(command, duration_s + LOCUST_OVERRUN_S)
        offset = (offset_before + time.time() - time.monotonic()) / 2
    finally:
        server.stop()
    if result is None:
        raise BenchError(f"locust was still running {LOCUST_OVERRUN_S:.0f} s after its {duration_s} s")
    run_dir = last_line(result.stdout, "run directory: ")
    if run_dir is None or not Path(run_dir).is_dir():
        tail = (result.stdout + result.stderr)[-3000:]
        raise BenchError(f"locust exited with {result.returncode} and wrote no run directory:\n{tail}")
    verdict = last_line(result.stdout, "verdict: ") or f"none (locust exited with {result.returncode})"
    return Run(load, Path(run_dir), trace, verdict, offset)


# --------------------------------------------------------------------------------------------
# Analysis: pair recorded frames with traced ones, gap by gap.
# --------------------------------------------------------------------------------------------


def judged_streams(run_dir: Path, skip_first_s: float) -> pd.DataFrame:
    """Raw-client ``ok`` rows started after the first ``skip_first_s`` seconds of the run."""
    columns = ["request_id", "client", "outcome", "start_time", "worker"]
    requests = RunDir(run_dir).read_requests(columns)
    if requests.empty:
        return requests
    after = requests["start_time"] >= requests["start_time"].min() + skip_first_s
    return requests[(requests["client"] == "raw") & (requests["outcome"] == "ok") & after]


def read_trace(path: Path, request_ids: pd.Series) -> pd.DataFrame:
    """The server's frames of ``request_ids``, in the order sent (a stable sort on ``t``)."""
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame({"request_id": [], "kind": [], "t": []})
    trace = pyarrow.json.read_json(path).select(["request_id", "kind", "t"]).to_pandas()
    trace = trace[trace["request_id"].isin(request_ids)]
    return trace.sort_values(["request_id", "t"], kind="stable")


def read_recorded(run_dir: Path, request_ids: pd.Series) -> pd.DataFrame:
    frames = RunDir(run_dir).read_frames()
    if "wait_s" not in frames:  # a harness that did not stamp arrivals
        frames["wait_s"] = np.nan
    frames = frames[["request_id", "seq", "kind", "t_s", "wait_s"]]
    frames = frames[frames["request_id"].isin(request_ids)]
    return frames.sort_values(["request_id", "seq"], kind="stable")


def matching_streams(recorded: pd.DataFrame, sent: pd.DataFrame, request_ids: pd.Series) -> pd.Index:
    """The request ids whose recorded and traced frames agree in number and kind, frame by frame."""
    recorded_kinds = recorded.groupby("request_id", sort=False)["kind"].agg(tuple)
    sent_kinds = sent.groupby("request_id", sort=False)["kind"].agg(tuple)
    both = pd.DataFrame({"recorded": recorded_kinds, "sent": sent_kinds}).reindex(pd.Index(request_ids))
    same = both["recorded"].notna() & both["sent"].notna() & (both["recorded"] == both["sent"])
    return both.index[same]


def compare_gaps(run: Run, skip_first_s: float, mono_offsets: dict[str, float]) -> Gaps:
    """Every consecutive-frame gap of every matching stream: its error and its recorded times."""
    streams = judged_streams(run.run_dir, skip_first_s)
    recorded = read_recorded(run.run_dir, streams["request_id"])
    sent = read_trace(run.trace, streams["request_id"])
    matching = matching_streams(recorded, sent, streams["request_id"])
    recorded = recorded[recorded["request_id"].isin(matching)].reset_index(drop=True)
    sent = sent[sent["request_id"].isin(matching)].reset_index(drop=True)
    # Both are sorted by request id, then in frame order, with equal counts: row i pairs with row i.
    if not np.array_equal(recorded["request_id"].to_numpy(dtype=object), sent["request_id"].to_numpy(dtype=object)):
        raise BenchError("recorded and traced frames do not pair up row by row (a bug of this benchmark)")
    rows = streams.set_index("request_id").loc[recorded["request_id"]]
    offsets = rows["worker"].map(mono_offsets).fillna(run.clock_offset_s).to_numpy()
    mono = rows["start_time"].to_numpy() - offsets + recorded["t_s"].to_numpy(dtype=float)
    recorded_t = recorded["t_s"].to_numpy(dtype=float)
    sent_t = sent["t"].to_numpy(dtype=float)
    recorded_gap = np.diff(recorded_t)
    waits = np.nan_to_num(recorded["wait_s"].to_numpy(dtype=float), nan=0.0)
    sent_gap = np.diff(sent_t)
    same_stream = recorded["request_id"].to_numpy()[1:] == recorded["request_id"].to_numpy()[:-1]
    # A frame read together with the next one, though sent apart: it carries the later frame's stamp.
    read_with_next = np.append(same_stream & (recorded_gap == 0.0) & (sent_gap > SHARED_READ_SENT_APART_S), False)
    frame = pd.DataFrame(
        {
            "request_id": recorded["request_id"].to_numpy()[1:],
            "worker": rows["worker"].to_numpy()[1:],
            "error_s": np.abs(recorded_gap - sent_gap),
            "prev_mono": mono[:-1],
            "mono": mono[1:],
            "sent": sent_t[1:],
            "shared_read": read_with_next[:-1] | read_with_next[1:],
            "waited_s": np.fmax(waits[:-1], waits[1:]),
        }
    )[same_stream]
    return Gaps(frame, len(streams), len(streams) - len(matching))


# --------------------------------------------------------------------------------------------
# The lag monitor's samples, when the harness has one.
# --------------------------------------------------------------------------------------------


def read_lag(run_dir: Path) -> pd.DataFrame | None:
    """``lag.parquet`` (worker, time, t_mono, lag_s), or None when the run has none."""
    path = RunDir(run_dir).lag
    if not path.exists():
        return None
    return pd.read_parquet(path, columns=["worker", "time", "t_mono", "lag_s"])


def mono_offsets(lag: pd.DataFrame | None) -> dict[str, float]:
    """Per worker, ``median(time - t_mono)``: wall-clock epoch minus monotonic clock."""
    if lag is None or lag.empty:
        return {}
    medians = (lag["time"] - lag["t_mono"]).groupby(lag["worker"]).median()
    return {str(worker): float(offset) for worker, offset in medians.items()}


def explained_by_lag(gaps: pd.DataFrame, lag: pd.DataFrame) -> np.ndarray:
    """Per gap, whether its own worker's loop was measured late long enough to explain its error
    ``e``, within the gap's window: from ``e`` plus one sample interval before the recorded time of
    frame i-1 to one interval after that of frame i. Explained when one blocked window meeting it
    has ``lag_s >= e - interval`` (one stall), or when the blocked time inside it, the monitor's
    windows clipped to it and summed, is at least that (a saturated loop: a read that waits for two
    long iterations is late by both, while each of the monitor's samples holds one). The monitor's
    windows do not overlap, so those meeting a gap are one run."""
    explained = np.zeros(len(gaps), dtype=bool)
    positions = pd.Series(np.arange(len(gaps)), index=gaps.index)
    for worker, group in gaps.groupby("worker"):
        windows = lag[lag["worker"] == worker].sort_values("t_mono")
        ends = windows["t_mono"].to_numpy()
        lags = windows["lag_s"].to_numpy()
        starts = ends - lags
        low = group["prev_mono"].to_numpy() - group["error_s"].to_numpy() - LAG_SAMPLE_INTERVAL_S
        high = group["mono"].to_numpy() + LAG_SAMPLE_INTERVAL_S
        first = np.searchsorted(ends, low, side="left")
        last = np.searchsorted(starts, high, side="right")
        needed = group["error_s"].to_numpy() - LAG_SAMPLE_INTERVAL_S
        rows = positions.loc[group.index].to_numpy()
        for row, begin, end, need, lo, hi in zip(rows, first, last, needed, low, high, strict=True):
            if end <= begin:
                continue
            blocked_inside = np.minimum(ends[begin:end], hi) - np.maximum(starts[begin:end], lo)
            explained[row] = lags[begin:end].max() >= need or blocked_inside.clip(min=0.0).sum() >= need
    return explained


def overlapping_a_stall(gaps: pd.DataFrame, lag: pd.DataFrame) -> int:
    """How many of ``gaps`` overlap a blocked window of their own worker's loop of at least
    ``CONTROL_LAG_S``, the gap widened by one sample interval at each end."""
    blocked = lag[lag["lag_s"] >= CONTROL_LAG_S]
    flagged = 0
    for worker, group in gaps.groupby("worker"):
        windows = blocked[blocked["worker"] == worker].sort_values("t_mono")
        if windows.empty:
            continue
        ends = windows["t_mono"].to_numpy()
        starts = ends - windows["lag_s"].to_numpy()
        earliest_start_from = np.minimum.accumulate(starts[::-1])[::-1]  # min start among windows ending >= i
        low = group["prev_mono"].to_numpy() - LAG_SAMPLE_INTERVAL_S
        high = group["mono"].to_numpy() + LAG_SAMPLE_INTERVAL_S
        first = np.searchsorted(ends, low, side="left")  # first window that ends at or after ``low``
        has_window = first < len(ends)
        overlaps = has_window & (earliest_start_from[np.minimum(first, len(ends) - 1)] <= high)
        flagged += int(overlaps.sum())
    return flagged


# --------------------------------------------------------------------------------------------
# Figures and output.
# --------------------------------------------------------------------------------------------


def bursts(gaps: pd.DataFrame) -> tuple[int, int, int]:
    """(errors over 20 ms, 50 ms windows holding one, most streams hit in one window)."""
    late = gaps[gaps["error_s"] > BURST_ERROR_S]
    if late.empty:
        return 0, 0, 0
    windows = np.floor(late["mono"].to_numpy() / BURST_WINDOW_S)
    streams_per_window = late.groupby(windows)["request_id"].nunique()
    return len(late), len(streams_per_window), int(streams_per_window.max())


def figures_of(run: Run, skip_first_s: float) -> Figures:
    lag = read_lag(run.run_dir)
    gaps = compare_gaps(run, skip_first_s, mono_offsets(lag))
    errors_ms = gaps.frame["error_s"].to_numpy() * 1000.0
    p50, p99, top = np.percentile(errors_ms, [50, 99, 100]) if len(errors_ms) else (np.nan,) * 3
    over_10 = gaps.frame[gaps.frame["error_s"] > FLAG_ERROR_S]
    if lag is None:
        flagged, unflagged = None, over_10
    else:
        mask = explained_by_lag(over_10, lag) | (over_10["waited_s"].to_numpy() >= READ_LATE_S)
        flagged, unflagged = int(mask.sum()), over_10[~mask]
    accurate = gaps.frame[gaps.frame["error_s"] < CONTROL_ERROR_S]
    chance = overlapping_a_stall(accurate, lag) if lag is not None and len(accurate) else 0
    control_pct = 100.0 * chance / len(accurate) if lag is not None and len(accurate) else np.nan
    over_20, windows, most = bursts(gaps.frame)
    delivery_ms = (gaps.frame["mono"] - gaps.frame["sent"]).median() * 1000.0
    errors = (float(p50), float(p99), float(top))
    together = int(unflagged["shared_read"].sum())
    return Figures(
        run.load,
        gaps.streams,
        len(gaps.frame),
        *errors,
        gaps.mismatches,
        len(over_10),
        flagged,
        together,
        over_20,
        windows,
        most,
        float(delivery_ms),
        control_pct,
    )


def print_figures(figures: Figures, run: Run) -> None:
    print(f"verdict of the run: {run.verdict}")
    print(
        f"streams compared: {figures.streams - figures.mismatches} of {figures.streams} raw ok streams, "
        f"{figures.gaps} gaps; error p50 {figures.p50_ms:.2f} ms, p99 {figures.p99_ms:.2f} ms, "
        f"max {figures.max_ms:.1f} ms; count mismatches: {figures.mismatches}"
    )
    print(f"recorded minus sent time of a frame, median: {figures.delivery_p50_ms:.2f} ms")
    if figures.flagged is None:
        print(f"errors over 10 ms: {figures.over_10ms}; flagged share unavailable: the run has no lag.parquet")
    else:
        print(
            f"errors over 10 ms: {figures.over_10ms}; flagged by the harness (the lag it recorded around the "
            "gap, one stall or summed, explains it, or a frame waited >= 1 ms in the kernel before it was read): "
            f"{figures.flagged_text}; not flagged: "
            f"{figures.unflagged}, {figures.unflagged_together} of them frames sent apart that came in one read "
            "(stalls the harness did not see: it read the earlier frame late)"
        )
        print(
            f"control: {figures.control_flagged_pct:.1f}% of the gaps with an error under 1 ms overlap a stall of "
            f"{CONTROL_LAG_S * 1000:g} ms or more (how often a gap meets a stall by chance)"
        )
    print(
        f"bursts: {figures.over_20ms} gaps over 20 ms fell in {figures.burst_windows} windows of 50 ms, "
        f"up to {figures.burst_max_streams} streams each",
        flush=True,
    )


def print_table(all_figures: list[Figures]) -> None:
    print("\n" + TABLE_HEADER)
    print("|" + "---|" * TABLE_HEADER.count(" |"))
    for figures in all_figures:
        print(figures.table_row())


def loads_of(users: list[int], processes_at_largest: int, resolution_ms: float = 0.0) -> list[Load]:
    """Each user count in one process, then the largest again over several, if asked; every one
    read at ``resolution_ms``."""
    loads = [Load(count, 1, resolution_ms) for count in users]
    if processes_at_largest > 1:
        loads.append(Load(max(users), processes_at_largest, resolution_ms))
    return loads


def parse_users(text: str) -> list[int]:
    try:
        users = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected user counts like 50,200,1000, got {text!r}") from None
    if not users or min(users) < 1:
        raise argparse.ArgumentTypeError(f"expected user counts of at least 1, got {text!r}")
    return users


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Compare the SSE frame gaps the harness records with the gaps the bundled server traced.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--users", type=parse_users, default="50,200,1000", help="concurrent users, one load each")
    parser.add_argument("--duration", type=int, default=30, help="seconds each load runs (Locust -t)")
    parser.add_argument(
        "--processes-at-largest",
        type=int,
        default=2,
        help="also run the largest load over this many Locust worker processes (1: don't)",
    )
    parser.add_argument(
        "--timing-resolution-ms",
        type=float,
        default=0.0,
        help="handed to Locust: frames of one stream closer than this may share one read and stamp (0 to 50)",
    )
    parser.add_argument("--skip-first", type=float, default=5.0, help="seconds of ramp-up whose streams are dropped")
    parser.add_argument("--keep", action="store_true", help="keep the run directories and traces (path printed)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK} unless given")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**QUICK)
    args = parser.parse_args(argv)
    if args.duration < 1 or args.processes_at_largest < 1 or args.skip_first < 0:
        parser.error("--duration and --processes-at-largest must be at least 1, --skip-first >= 0")
    if not 0 <= args.timing_resolution_ms <= 50:
        parser.error("--timing-resolution-ms must be a number of ms from 0 to 50")
    if args.skip_first >= args.duration:
        parser.error("--skip-first must be shorter than --duration")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="sse-timing-"))
    all_figures: list[Figures] = []
    print("SSE timing fidelity: recorded frame gaps against the server's trace")
    try:
        for load in loads_of(args.users, args.processes_at_largest, args.timing_resolution_ms):
            resolution = f", timing resolution {load.resolution_ms:g} ms" if load.resolution_ms else ""
            print(f"\n== {load.users} users, {load.processes} process(es), {args.duration} s{resolution}", flush=True)
            run = run_load(load, args.duration, workdir)
            figures = figures_of(run, args.skip_first)
            print_figures(figures, run)
            all_figures.append(figures)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"\nrun directories and traces kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table(all_figures)
    return 0 if all(figures.gaps for figures in all_figures) else 1


if __name__ == "__main__":
    sys.exit(main())
