"""Peers side by side: GuideLLM, AIPerf, inference-perf and sse-soak on one server, one workload.

Why this exists: sse-soak claims to be a cheaper and more faithful client than the load generators
people already use for LLM servers. This measures the claim on one machine, against the bundled
server's ``--trace-file`` (one line per SSE frame, stamped with CLOCK_MONOTONIC just before the
send) as ground truth, instead of asserting it.

Each peer is pip-installed at a pinned version into a venv of its own under
``~/.cache/sse-soak/peers/<tool>-<version>`` (``loadtests.services.tool_venv``: every step logged to
``install.log`` there, a stamp naming the recipe written last; a complete venv is reused, any other
is remade): GuideLLM 0.8.1 (Python 3.11, with the local ``torch==2.13.0+cpu`` wheel: it requires
torch), AIPerf 0.13.0 (3.11), inference-perf 0.7.0 (3.12: it requires it). They run offline
(``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``) with the project's tiny tokenizer
(``loadtests.services.real_vllm.make_model_dir``, trained by a peer venv's ``tokenizers``) copied into a
local Hugging Face cache as ``sse-soak/tiny-llama``, the name the server serves.

Per tool, a fresh server (TTFT 500 ms, a token every 10 ms, keep-alive comments every 0.2 s of
silence, 5% of requests faulted: in-band 500 errors under HTTP 200, or cut mid-stream) and the tool
against it: 32 streams at once of 128 prompt and 500 output tokens, back to back for 30 s
(inference-perf bounds a concurrent load by a request count instead: 32 x round(30 s / 5.5 s)).
sse-soak runs a generated locustfile (one ``SSEUser``, chat) with Locust headless; GuideLLM a
scenario file (concurrent, ``synthetic_text``, ``max_duration``); AIPerf ``profile --concurrency
--benchmark-duration``; inference-perf a config file (concurrent stage, random data, completions:
its random and synthetic data refuse the chat API, and its shared_prefix data, which accepts it,
sent completions requests all the same). Figures:

- frames: every frame the server sent in the run (trace lines: data, keep-alive, error, [DONE]).
- cpu s: user + system CPU of the tool's whole process tree (psutil, every process sampled every
  0.1 s, or the root's ``wait4`` rusage if larger), start-up and report writing included;
  ``stream cpu s``: the same between the trace's first and last frame (interpolated), the cost of
  streaming only. frames/cpu s is frames per client CPU-second.
- ttft err: per stream, the tool's first-token time minus the server's send of the first token
  (absolute, ms; epoch stamps put on CLOCK_MONOTONIC by this process's offset). gap err: for
  streams whose token-gap counts agree with the trace's, each recorded gap minus the sent gap
  (absolute, ms). Streams are paired with the trace by ``X-Request-Id`` where the tool sends one
  (sse-soak, AIPerf), else by first-token time, the closest pairs first (GuideLLM, inference-perf:
  streams that start together may swap, inflating their error by at most the spread).
  n/a: GuideLLM keeps per request its first and last token times and a count, not each token's.
- faults: what the server injected (streams with an in-band error, streams it cut where it cuts,
  keep-alive comments) against what the tool counted failed, and, for tools paired by request id,
  which of the faulted streams it flagged; keep-alive n/a: no peer counts SSE comments.

The floor (issue 38): each round also runs ``bench/floor_loop.py``, a bare receive loop (one epoll,
one ``recvmsg`` a ready socket with its kernel stamp, frames counted by their blank line, no
parsing, no Locust), sending sse-soak's very request, against a fresh server of the same workload;
it and sse-soak run side by side, which goes first alternating from round to round. The line
"sse-soak CPU per frame / floor" divides sse-soak's CPU per frame by the floor's (frames from the
trace for both), streaming-only and in all (goal: at most 1.3x); ``ratios()`` (against the peers)
leaves the floor out. Beside the CPU, a counters table: each process's rusage over its load
(user and system CPU, voluntary context switches, about its wakes, and involuntary ones), gc
collections per generation per 1k frames, and frames per read and per wake where the tool counts
reads and wakes (the floor does; sse-soak where its body mux has ``wakes`` and ``reads``; n/a
otherwise). sse-soak's come from a ``quitting`` hook in the generated locustfile, from test_start
on (so start-up is left out, the report's writing partly in).

``--resolutions 0,1,2,5`` runs sse-soak alone at each timing resolution (``--timing-resolution-ms``,
passed to Locust only when above 0), the order rotated each round, ``--rounds`` times: CPU us per
frame and frames per CPU s (streaming), voluntary context switches, first-token and gap error
p50/p99/max against the trace, and the share of gaps merged (token frames sent 0.1 ms or more
apart that were recorded at one instant).

Run it::

    python bench/peers.py                 # installs what is missing (minutes), then about 2.5 min of runs
    python bench/peers.py --tools '' --rounds 3 --duration 10   # the floor and sse-soak alone
    python bench/peers.py --resolutions 0,1,2,5 --rounds 3
    python bench/peers.py --tools aiperf --duration 10 --keep
    python bench/peers.py --quick         # the floor and sse-soak, 4 streams for 5 s, no installs
    python bench/peers.py --profile       # then where sse-soak's time goes: py-spy (bench/breakdown.py)

Installs here (pip's cache warm): GuideLLM 88 s, 1,477 MB; AIPerf 73 s, 1,137 MB; inference-perf
59 s, 767 MB.

Measured 2026-12-06 on this 2-core VM ("vm", Python 3.11.7; shared, but no other heavy run at the time), server and
tools on the same machine, ``python bench/peers.py`` three times (02:21, 02:23 and, with this
code, 02:28 UTC; a row is one tool's run; a run takes about 2.5 minutes once installed)::

    tool             frames  cpu s frames/cpu s stream cpu s frames/stream cpu s ttft err ms p50/p99 gap err ms p50/p99
    sse-soak          86447    8.7        9,926          4.8              17,941         0.04 / 0.22        0.00 / 0.04
    guidellm          86489   37.6        2,300         19.4               4,461        0.44 / 22.15                n/a
    aiperf            93709   43.1        2,175         36.0               2,602         0.55 / 2.21       0.60 / 10.34
    inference-perf    77634   11.0        7,036          4.4              17,503         0.20 / 0.56        0.07 / 1.59

    tool             frames  cpu s frames/cpu s stream cpu s frames/stream cpu s ttft err ms p50/p99 gap err ms p50/p99
    sse-soak          86530    7.9       11,018          4.4              19,744         0.04 / 0.21        0.00 / 0.04
    guidellm          86794   38.7        2,240         21.4               4,064        0.43 / 18.36                n/a
    aiperf            93709   42.1        2,223         35.5               2,642         0.39 / 2.19       0.64 / 10.10
    inference-perf    77634   10.5        7,408          4.2              18,561         0.19 / 0.47        0.05 / 1.49

    tool             frames  cpu s frames/cpu s stream cpu s frames/stream cpu s ttft err ms p50/p99 gap err ms p50/p99
    sse-soak          86572    8.0       10,813          4.4              19,474        0.04 / 10.12        0.00 / 0.04
    guidellm          86811   35.2        2,469         17.8               4,883        0.42 / 17.52                n/a
    aiperf            93709   41.8        2,243         35.0               2,678         0.45 / 1.51       0.47 / 10.18
    inference-perf    77634   10.9        7,127          4.6              16,910         0.20 / 0.51        0.07 / 1.62

The second run's lines on faults, wrapped (the others' are the same but for sse-soak's gaps
compared, 178 and 190)::

    sse-soak: 193/193 paired, 187 gaps compared; server: inband 10, cut 3, keep-alive 386;
        tool: failed 13 (inband_error 10, cut 3), flagged inband 10/10, cuts 3/3, keep-alive 386
    guidellm: 193/193 paired, 0 gaps compared; server: inband 10, cut 3, keep-alive 386;
        tool: failed 45 (errored 13, of which in-band 10, incomplete 32), flagged n/a (no request ids),
        keep-alive n/a
    aiperf: 193/193 paired, 178 gaps compared; server: inband 12, cut 3, keep-alive 386;
        tool: failed 3 (errors 3), flagged inband 0/12, cuts 3/3, keep-alive n/a
    inference-perf: 157/160 paired, 152 gaps compared; server: inband 9, cut 3, keep-alive 320;
        tool: failed 3 (errors 3), flagged n/a (no request ids), keep-alive n/a
    sse-soak / best peer, frames per CPU s: total 1.49x, streaming-only 1.06x (goal >= 2x)

What that says:

- Frames per client CPU-second, total: sse-soak 9.9k-11.0k, inference-perf 7.0k-7.4k (sse-soak
  1.41x-1.52x), GuideLLM 2.2k-2.5k, AIPerf 2.2k. Streaming only: sse-soak 17.9k-19.7k,
  inference-perf 16.9k-18.6k (1.03x-1.15x), GuideLLM 4.1k-4.9k, AIPerf 2.6k-2.7k. The issue's
  goal, 2x the best peer total and streaming-only, is met against GuideLLM and AIPerf (4x-7x)
  and NOT against inference-perf. sse-soak's total includes its start-up and its report (3.5-3.9 s
  of its 7.9-8.7 s); across four earlier runs of the same workload its streaming figure ranged
  14.0k-18.4k and inference-perf's 12.4k-17.2k (the machine is shared).
- Timing error: sse-soak lowest (first token 0.04 ms p50 and 0.2 ms p99, but 10.1 ms p99 in the
  third run; gaps 0.00 / 0.04 ms in all three), then inference-perf (0.19-0.20 / 0.5 ms; gaps
  0.05-0.07 / 1.5-1.6 ms), AIPerf (0.4-0.6 / 1.5-2.2 ms; gaps 0.5-0.6 / 10.1-10.3 ms), GuideLLM
  (0.4 / 18-22 ms; its gaps n/a). 15 of AIPerf's 193 streams had no gaps compared: the faulted
  ones (their chunk counts differ).
- Faults: sse-soak classifies every one (10 in-band, 3 cuts) and counts every keep-alive
  comment (386 of 386). GuideLLM counts all 13 as errored (10 by its in-band wording), and its
  32 "incomplete" are the streams it stopped at the end. AIPerf and inference-perf count only
  the cuts: AIPerf 0 of 12 and inference-perf 0 of 9 in-band 500s under HTTP 200 (the error
  frame is in inference-perf's stored response, its request recorded as a success), and
  inference-perf drops a cut stream's chunk times. No peer reports keep-alive comments.

Again at 05:54 UTC the same day, after the raw user's body receiver stopped arming a gevent timer
per read: total 1.65x, streaming-only 1.29x (sse-soak 10,854 and 19,889 frames per CPU s,
inference-perf 6,578 and 15,463).

``--rounds 3`` at 08:40 UTC the same day, after a raw-users run stopped importing the openai SDK
and FastAPI at start-up (Locust's start-up CPU 1.85 -> 1.05 s): total 1.50, 1.59 and 1.89
(median 1.59x), streaming-only 0.98, 1.11 and 1.37 (median 1.11x); sse-soak's streaming CPU was
4.4-4.7 s, inference-perf's 4.1-5.4 s (most of the ratio's swing is the peer's).

``--rounds 3`` at 09:03 UTC, after raw bodies came to be read in the hub through one epoll
(``loadtests.client.body_mux``); the first round's table, then the ratios of all three::

    tool             frames  cpu s frames/cpu s stream cpu s frames/stream cpu s ttft err ms p50/p99 gap err ms p50/p99
    sse-soak          86853    6.4       13,606          3.6              23,880         0.05 / 0.20        0.00 / 0.04
    guidellm          86776   38.5        2,257         20.7               4,189         0.46 / 6.82                n/a
    aiperf            93709   42.6        2,199         35.3               2,656         0.72 / 6.99       0.72 / 10.20
    inference-perf    77634   12.5        6,231          5.6              13,924         0.23 / 0.68        0.11 / 2.35
    over 3 rounds, sse-soak / best peer: total 1.87, 1.88, 2.18 (median 1.88x), streaming-only 1.41, 1.50,
    1.72 (median 1.50x)

sse-soak's streaming CPU was 3.6-4.0 s, inference-perf's 5.1-5.6 s. The goal (2x, total and
streaming-only) is met in one round of three for the total, in none for streaming only. What is
left is mostly the wake-ups, as measured the same morning:

- The cost is the wake-ups more than the parsing. At 32 streams of a token every 10 ms the
  process woke 9,673-10,356 times in 10 s for 28,924 frames (2.8-3.0 frames a wake; its voluntary
  context switches), at 38-42 us of CPU a frame (user 0.8-0.9 s, system 0.2-0.4 s in 10 s), before
  the epoll. Decoding the chunk, parsing the SSE frame, decoding its JSON and judging it, in a loop
  without I/O, is 5.5 us a frame; the same runs with parsing and judging cut out still took 35-40
  us a frame.
- A bare receive loop (32 sockets, no Locust, no parsing) costs 11-14 us a read with a greenlet
  per socket and 7-8 us with one epoll when a tick's 32 frames arrive together, but 23 and 18 us
  (about 17 us of it the system's) when they arrive spread over the tick, one wake a read, as a
  server's do. inference-perf pays the same wakes (48-72 us a frame in its streaming windows).
- Fewer wakes would do it, at a price in timing. A loop made to sleep before each poll (libev's
  io_collect_interval): 2 ms cut CPU a frame by 15% (4,328-4,464 wakes in 10 s), 5 ms by 27%
  (1,831-1,838). But a stream's frames less than the interval apart would then share one read and
  its kernel stamp, which is exactly the per-frame timing sse-soak exists for: not done.

``--rounds 3`` at 2026-12-07 23:43 UTC, the machine otherwise idle (round 1 right after the peers'
3.4 GB of installs, likely still being written back: sse-soak's gap error p99 7.85 ms there, 0.06-0.07
ms in the others), with the floor, the compiled read path reading the body's, SSE parser's and
tracker's slots at their offsets, and the run's end made cheaper; the second round's table, then the
ratios of all three (at 20:51 UTC, before the slots: 2.06x total, 1.77x streaming-only over the best
peer; 1.65x the floor)::

    tool             frames  cpu s frames/cpu s stream cpu s frames/stream cpu s ttft err ms p50/p99 gap err ms p50/p99
    floor             87285    2.1       41,908          1.9              44,762                 n/a                n/a
    sse-soak          86547    6.4       13,506          2.9              29,345         0.06 / 0.25        0.00 / 0.06
    guidellm          86142   52.4        1,642         27.7               3,106        0.53 / 28.93                n/a
    aiperf            93709   45.0        2,082         36.6               2,563         0.62 / 2.64       0.84 / 11.37
    inference-perf    77634   12.8        6,065          5.4              14,348         0.28 / 0.63        0.10 / 2.57
    over 3 rounds, sse-soak / best peer: total 1.73, 2.12, 2.23 (median 2.12x), streaming-only 1.39, 1.88,
    2.05 (median 1.88x)
    over 3 rounds, sse-soak CPU per frame / floor: streaming-only 1.53, 1.73, 1.88 (median 1.73x), in all
    3.10, 3.43, 3.77 (median 3.43x) (goal <= 1.3x)

Exit status: 1 if sse-soak's own run failed; a peer that fails to install or run is a row saying why.
"""

from __future__ import annotations

import argparse
import bisect
import glob
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psutil
import pyarrow.json

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from loadtests.client.raw_body import READ_PATH  # noqa: E402
from loadtests.errors import ServerStartError, ToolInstallError  # noqa: E402
from loadtests.record.run_dir import RunDir  # noqa: E402
from loadtests.services.real_vllm import make_model_dir  # noqa: E402
from loadtests.services.stack import TargetServerProcess  # noqa: E402
from loadtests.services.tool_venv import ToolVenv, dump, run_step, stamp_matches  # noqa: E402
from target_server.faults import strike_index  # noqa: E402

PEERS_HOME = Path("~/.cache/sse-soak/peers").expanduser()
STAMP = "sse-soak-install.json"
TORCH_CPU = "torch==2.13.0+cpu"
"""GuideLLM requires torch; PyPI's is a CUDA build of gigabytes, the +cpu wheel (cp311) is local."""


@dataclass(frozen=True)
class Peer:
    """A peer tool: one pinned pip package in a venv of its own, at ``PEERS_HOME/<name>-<version>``."""

    name: str
    package: str
    version: str
    python: str
    command: str
    extra: tuple[str, ...] = field(default=())

    @property
    def home(self) -> Path:
        return PEERS_HOME / f"{self.name}-{self.version}"

    @property
    def recipe(self) -> str:
        """What decides the venv's contents: a different recipe is reinstalled."""
        return " ".join([f"python{self.python}", f"{self.package}=={self.version}", *self.extra])

    @property
    def bin(self) -> Path:
        return self.home / "bin"

    @property
    def complete(self) -> bool:
        return stamp_matches(self.home / STAMP, self.recipe)


PEERS = (
    Peer("guidellm", "guidellm", "0.8.1", "3.11", "guidellm", (TORCH_CPU,)),
    Peer("aiperf", "aiperf", "0.13.0", "3.11", "aiperf"),
    Peer("inference-perf", "inference-perf", "0.7.0", "3.12", "inference-perf"),  # requires Python >= 3.12
)


def find_python(version: str) -> str:
    """An interpreter of ``version`` (``3.11``): ``pythonX.Y`` on PATH if it runs, else pyenv's."""
    candidates = [shutil.which(f"python{version}") or ""]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "--version"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.split()[-1].startswith(f"{version}."):
            return candidate
    raise ToolInstallError(f"no Python {version} found (PATH, ~/.pyenv/versions)")


def ensure_peer(peer: Peer, say: bool = True) -> Peer:
    """``peer`` installed in its venv: reused when its stamp names its recipe, else (re)made, each step
    logged to ``install.log`` there; the stamp is written last. Failure: a ``ToolInstallError``."""
    if peer.complete:
        return peer
    if peer.home.exists():
        shutil.rmtree(peer.home)  # ours (under PEERS_HOME), incomplete or of another recipe
    peer.home.mkdir(parents=True)
    venv = ToolVenv(peer.home)
    log = venv.log
    began = time.monotonic()
    if say:
        print(f"installing {peer.recipe} into {peer.home} (log: {log})", flush=True)
    python = find_python(peer.python)
    run_step(peer.name, "venv", [python, "-m", "venv", str(peer.home)], log)
    pip = [str(venv.python), "-m", "pip", "install", "--disable-pip-version-check"]
    run_step(peer.name, "pip install", [*pip, f"{peer.package}=={peer.version}", *peer.extra], log)
    version = run_step(peer.name, f"{peer.command} --help", [str(peer.bin / peer.command), "--help"], log)
    size = sum(f.stat().st_size for f in peer.home.rglob("*") if f.is_file() and not f.is_symlink())
    took = time.monotonic() - began
    stamp = {"recipe": peer.recipe, "install_s": round(took, 1), "size_mb": round(size / 1e6), "help": version}
    (peer.home / STAMP).write_text(dump(stamp))
    if say:
        print(f"installed {peer.name} in {took:.0f} s, {size / 1e6:.0f} MB", flush=True)
    return peer


MODEL = "sse-soak/tiny-llama"
"""The name the server serves and the peers' tokenizer goes by (a local Hugging Face cache entry)."""
HF_HOME = PEERS_HOME / "hf"
REVISION = "0" * 40
OFFLINE_ENV = {
    "HF_HOME": str(HF_HOME),
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
SAMPLE_S = 0.1
STOP_GRACE_S = 10.0
OVERRUN_S = 180.0
"""A tool may take this long beyond its load's duration to start and to write its reports."""
CLOCK_OFFSET = time.time() - time.monotonic()
"""Wall clock minus CLOCK_MONOTONIC: puts a tool's epoch stamps on the trace's clock."""


class BenchError(RuntimeError):
    """A run of a tool failed; the message says why (printed in its row)."""


@dataclass(frozen=True)
class Workload:
    """One workload for every tool: ``concurrency`` chat streams of ``prompt_tokens`` in and
    ``output_tokens`` out, for ``duration_s``, from a server pacing tokens and injecting faults."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    duration_s: int
    ttft_ms: float
    itl_ms: float
    keepalive_s: float
    fault_pct: float
    fault_types: tuple[str, ...] = ("inband_error", "disconnect")

    def server_args(self, trace: Path) -> list[str]:
        return [
            "--host",
            "127.0.0.1",
            "--model",
            MODEL,
            "--max-num-seqs",
            str(self.concurrency * 2),
            "--time-to-first-token",
            str(self.ttft_ms),
            "--inter-token-latency",
            str(self.itl_ms),
            "--sse-keep-alive-interval",
            str(self.keepalive_s),
            "--failure-injection-rate",
            str(self.fault_pct),
            "--failure-types",
            *self.fault_types,
            "--seed",
            "1",
            "--trace-file",
            str(trace),
        ]

    @property
    def requests(self) -> int:
        """For a tool bounded by a request count: as many as ``concurrency`` streams finish in ``duration_s``."""
        stream_s = (self.ttft_ms + self.output_tokens * self.itl_ms) / 1000
        return self.concurrency * max(1, round(self.duration_s / stream_s))


FULL = Workload(32, 128, 500, 30, ttft_ms=500, itl_ms=10, keepalive_s=0.2, fault_pct=5)
QUICK = Workload(4, 32, 50, 5, ttft_ms=300, itl_ms=5, keepalive_s=0.1, fault_pct=20)


@dataclass
class ClientStream:
    """One stream as a tool recorded it: on CLOCK_MONOTONIC, when it said the first token came,
    and the gaps (s) between its token chunks, None where the tool does not expose them; whether
    the tool counted it failed."""

    request_id: str | None
    first_token: float | None
    gaps: list[float] | None
    failed: bool = False


@dataclass
class Reported:
    """What a tool said of its run: its streams, how many it counted failed (and how), keep-alives."""

    streams: list[ClientStream]
    failed: int
    failures: str
    keepalives: int | None


@dataclass
class Row:
    """One tool's line of the table."""

    tool: str
    note: str = ""
    cpu_total_s: float = float("nan")
    cpu_stream_s: float = float("nan")
    frames: int = 0
    stream_frames: int = 0
    ttft_err_ms: tuple[float, float] | None = None
    gap_err_ms: tuple[float, float] | None = None
    compared: str = ""
    faults: str = ""
    ttft_err_max_ms: float = float("nan")
    gap_err_max_ms: float = float("nan")
    gaps_merged: tuple[int, int] = (0, 0)
    """(gaps sent >= ``MERGED_GAP_S`` apart whose frames got one stamp, such gaps compared)."""
    counters: dict[str, Any] = field(default_factory=dict)
    """The tool's own counters (``bench/floor_loop.py``'s result, sse-soak's ``COUNTERS_HOOK``); {}: none."""

    @property
    def total_rate(self) -> float:
        return self.frames / self.cpu_total_s if self.cpu_total_s > 0 else float("nan")

    @property
    def stream_rate(self) -> float:
        return self.stream_frames / self.cpu_stream_s if self.cpu_stream_s > 0 else float("nan")


# --- the tokenizer ----------------------------------------------------------------------------------


def ensure_tokenizer(python: Path) -> Path:
    """``MODEL`` in the local Hugging Face cache ``HF_HOME`` (the project's tiny tokenizer, made by
    ``make_model_dir`` with ``python``, which has ``tokenizers``); the snapshot's directory."""
    source = make_model_dir(PEERS_HOME / "tiny-llama", python)
    repo = HF_HOME / "hub" / f"models--{MODEL.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    if (
        not (snapshot / "tokenizer.json").exists()
        or (snapshot / "tokenizer.json").read_bytes() != (source / "tokenizer.json").read_bytes()
    ):
        shutil.rmtree(repo, ignore_errors=True)
        shutil.copytree(source, snapshot)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(REVISION)
    return snapshot


# --- running a tool, its process tree's CPU measured -----------------------------------------------


@dataclass
class Measured:
    """A finished tool process: exit status (None: stopped at its deadline), its tree's CPU seconds,
    the samples ``(monotonic time, cumulative CPU s)`` taken as it ran."""

    code: int | None
    cpu_s: float
    samples: list[tuple[float, float]]

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds the tree spent between two monotonic times (interpolated between samples)."""
        times, cpu = zip(*self.samples, strict=True) if self.samples else ((0.0,), (0.0,))
        return float(np.interp(end, times, cpu) - np.interp(start, times, cpu))


def _tree_cpu(root: psutil.Process, seen: dict[tuple[int, float], float]) -> float:
    """Updates ``seen`` (each process of the tree by pid and start time: its own user + system CPU)."""
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        processes = []
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                seen[(process.pid, process.create_time())] = times.user + times.system
        except psutil.Error:
            continue
    return sum(seen.values())


def _stop_tree(root: psutil.Process) -> None:
    """SIGTERM the tool's processes, each by its pid (the root first), SIGKILL those left after the grace."""
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        processes = [root]
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(processes[1:], timeout=STOP_GRACE_S)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            continue


def run_measured(command: Sequence[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float) -> Measured:
    """Run ``command`` (output to ``log``) until it exits or ``timeout_s`` passes (then it is stopped).
    Its CPU: every process of its tree sampled by psutil every 0.1 s (a process's last interval
    before it exits can be missed: a lower bound), or the root's ``wait4`` rusage (itself and every
    descendant reaped below it) when that is larger."""
    with log.open("w") as out:
        process = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    root = psutil.Process(process.pid)
    seen: dict[tuple[int, float], float] = {}
    samples: list[tuple[float, float]] = []
    deadline = time.monotonic() + timeout_s
    stopped = False
    while True:
        samples.append((time.monotonic(), _tree_cpu(root, seen)))
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline and not stopped:
            stopped = True
            _stop_tree(root)
            deadline = time.monotonic() + STOP_GRACE_S
        elif stopped and time.monotonic() > deadline:
            os.kill(process.pid, signal.SIGKILL)
        time.sleep(SAMPLE_S)
    process.returncode = os.waitstatus_to_exitcode(status)
    reaped = usage.ru_utime + usage.ru_stime
    total = max(samples[-1][1], reaped)
    samples.append((time.monotonic(), total))
    return Measured(None if stopped else process.returncode, total, samples)


# --- the server's trace ----------------------------------------------------------------------------


def read_trace(path: Path) -> pd.DataFrame:
    """Every frame the server sent, in the order sent: request_id, kind, t (CLOCK_MONOTONIC)."""
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame({"request_id": pd.Series(dtype=str), "kind": pd.Series(dtype=str), "t": []})
    trace = pyarrow.json.read_json(path).select(["request_id", "kind", "t"]).to_pandas()
    return trace.sort_values(["request_id", "t"], kind="stable")


def token_times(data_times: np.ndarray, output_tokens: int) -> np.ndarray:
    """A chat stream's token chunks among its data frames (the server's first carries the role with the
    first token): a usage chunk after the last token dropped."""
    return data_times[:output_tokens]


def sent_tokens(trace: pd.DataFrame, output_tokens: int) -> dict[str, np.ndarray]:
    data = trace[trace["kind"] == "data"]
    return {rid: token_times(group["t"].to_numpy(), output_tokens) for rid, group in data.groupby("request_id")}


STOPPED_WITHIN_S = 0.1
"""The streams a tool stops at its end send their last frames within this of the trace's last one."""


def injected(trace: pd.DataFrame, output_tokens: int) -> tuple[set[str], set[str], int]:
    """Faults the server injected: the streams with an in-band error, those it cut (no ``[DONE]``, no
    error, the data frames up to where ``strike_index`` puts the fault, and not among the streams
    the tool stopped when its run ended), and the keep-alive comments sent."""
    if trace.empty:
        return set(), set(), 0
    kinds = trace.groupby("request_id")["kind"]
    has_error = kinds.apply(lambda k: (k == "error").any())
    has_done = kinds.apply(lambda k: (k == "done").any())
    data = kinds.apply(lambda k: int((k == "data").sum()))
    ended_early = trace.groupby("request_id")["t"].max() < trace["t"].max() - STOPPED_WITHIN_S
    strike = strike_index(output_tokens)  # data frames before the cut: one more on chat (its role chunk)
    cut = ~has_error & ~has_done & data.isin({strike, strike + 1}) & ended_early
    return set(has_error.index[has_error]), set(cut.index[cut]), int((trace["kind"] == "keepalive").sum())


def pair_streams(streams: list[ClientStream], sent: dict[str, np.ndarray]) -> list[tuple[ClientStream, str]]:
    """Each client stream with its traced one: by request id where the tool sent one; else by first
    token, the closest (client, traced) pairs first, each stream used once (streams that start
    together may swap: then each one's error is at most the spread of their first tokens)."""
    pairs = [(s, s.request_id) for s in streams if s.request_id is not None and len(sent.get(s.request_id, ()))]
    by_first = sorted((times[0], rid) for rid, times in sent.items() if len(times))
    firsts = [first for first, _ in by_first]
    loose = [s for s in streams if s.request_id is None and s.first_token is not None]
    candidates = []
    for index, stream in enumerate(loose):
        at = bisect.bisect_left(firsts, stream.first_token)
        for j in range(max(0, at - 64), min(len(firsts), at + 64)):
            candidates.append((abs(firsts[j] - stream.first_token), index, j))
    taken: set[int] = set()
    used: set[int] = set()
    for _, index, j in sorted(candidates):
        if index not in taken and j not in used:
            taken.add(index)
            used.add(j)
            pairs.append((loose[index], by_first[j][1]))
    return pairs


def timing_errors(
    pairs: list[tuple[ClientStream, str]], sent: dict[str, np.ndarray]
) -> tuple[list[float], list[float], int]:
    """The absolute first-token error of each paired stream and, where its numbers of gaps agree with
    the trace's, every gap's absolute error (ms); the streams whose gaps were compared."""
    ttft: list[float] = []
    gaps: list[float] = []
    compared = 0
    for stream, rid in pairs:
        times = sent[rid]
        if stream.first_token is not None:
            ttft.append(abs(stream.first_token - times[0]) * 1000)
        if stream.gaps is not None and len(stream.gaps) == len(times) - 1 and len(stream.gaps):
            compared += 1
            gaps.extend((np.abs(np.asarray(stream.gaps) - np.diff(times)) * 1000).tolist())
    return ttft, gaps, compared


MERGED_GAP_S = 1e-4
"""Two frames sent at least this far apart that a tool recorded at one instant were merged (one read, one stamp)."""


def merged_gaps(pairs: list[tuple[ClientStream, str]], sent: dict[str, np.ndarray]) -> tuple[int, int]:
    """Of the token gaps the server sent at least ``MERGED_GAP_S`` apart, in streams whose numbers
    of gaps agree with the trace's: how many the tool recorded as 0 (both frames one stamp), and how many."""
    merged = total = 0
    for stream, rid in pairs:
        times = sent[rid]
        if stream.gaps is None or len(stream.gaps) != len(times) - 1 or not len(stream.gaps):
            continue
        apart = np.diff(times) >= MERGED_GAP_S
        total += int(apart.sum())
        merged += int((apart & (np.asarray(stream.gaps) == 0)).sum())
    return merged, total


def p50_p99(values: list[float]) -> tuple[float, float] | None:
    return (float(np.percentile(values, 50)), float(np.percentile(values, 99))) if values else None


# --- the tools ---------------------------------------------------------------------------------------

LOCUSTFILE = '''"""sse-soak's side of bench/peers.py: raw SSE chat streams of one size, back to back."""
from loadtests import RequestMix, RequestSpec, Scenario, SSEUser

scenario = Scenario(name="peers", server_args="")


class PeersUser(SSEUser):
    mix = RequestMix([RequestSpec("peers", "chat", {prompt}, max_tokens={output})])
'''


def project_env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def sse_soak_command(
    work: Workload, url: str, workdir: Path, resolution_ms: float = 0.0, spawn_rate: float | None = None
) -> tuple[list[str], dict[str, str]]:
    """Locust with the peers locustfile (and its counters hook, dumped to ``workdir/counters.json``);
    ``--timing-resolution-ms`` only when ``resolution_ms`` > 0 (0 is the harness's default)."""
    locustfile = workdir / "peers_locustfile.py"
    locustfile.write_text(LOCUSTFILE.format(prompt=work.prompt_tokens, output=work.output_tokens) + COUNTERS_HOOK)
    users = str(work.concurrency)
    rate = users if spawn_rate is None else f"{spawn_rate:g}"
    command = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--host", url, "-u", users]
    command += ["-r", rate, "-t", f"{work.duration_s}s", "--report-dir", str(workdir / "reports"), "--only-summary"]
    if resolution_ms > 0:
        command += ["--timing-resolution-ms", f"{resolution_ms:g}"]
    return command, {**project_env(), COUNTERS_ENV: str(workdir / COUNTERS_FILE)}


def sse_soak_reported(work: Workload, workdir: Path, log: Path) -> Reported:
    """sse-soak's run directory: requests.parquet (outcomes, start time, TTFT) and frames.parquet."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("run directory: ")]
    if not lines:
        raise BenchError(f"locust wrote no run directory (log {log})")
    run = RunDir(Path(lines[-1].removeprefix("run directory: ").strip()))
    requests = run.read_requests(["request_id", "outcome", "start_time", "ttft_s"])
    frames = run.read_frames(["request_id", "seq", "kind", "t_s"]).sort_values(["request_id", "seq"])
    data = frames[frames["kind"] == "data"]
    by_id = {rid: token_times(group["t_s"].to_numpy(), work.output_tokens) for rid, group in data.groupby("request_id")}
    streams = []
    for rid, outcome, start, ttft in requests[["request_id", "outcome", "start_time", "ttft_s"]].to_numpy().tolist():
        first = None if pd.isna(ttft) else float(start) - CLOCK_OFFSET + float(ttft)
        times = by_id.get(rid)
        gaps = None if times is None else np.diff(times).tolist()
        streams.append(ClientStream(str(rid), first, gaps, outcome not in ("ok", "stopped")))
    outcomes = requests["outcome"].value_counts()
    failed = outcomes.drop(["ok", "stopped"], errors="ignore")
    failures = ", ".join(f"{name} {count}" for name, count in failed.items()) or "none"
    return Reported(streams, int(failed.sum()), failures, int((frames["kind"] == "keepalive").sum()))


def peer_env(peer: Peer) -> dict[str, str]:
    return {**os.environ, **OFFLINE_ENV, "PATH": f"{peer.bin}{os.pathsep}{os.environ.get('PATH', '')}"}


def guidellm_command(work: Workload, url: str, workdir: Path, snapshot: Path) -> list[str]:
    """``guidellm run --scenario`` with a scenario file (GuideLLM 0.8's options are ``kind=...`` specs)."""
    spec = {
        "backend": {"kind": "openai_http", "target": url, "model": MODEL, "request_format": "/v1/chat/completions"},
        "profile": {"kind": "concurrent", "streams": [work.concurrency]},
        "data": [{"kind": "synthetic_text", "prompt_tokens": work.prompt_tokens, "output_tokens": work.output_tokens}],
        "constraints": [{"kind": "max_duration", "seconds": work.duration_s}],
        "outputs": [{"kind": "json", "path": str(workdir / "out" / "benchmarks.json")}],
    }
    path = workdir / "scenario.json"
    path.write_text(json.dumps({"metadata": {"name": "sse-soak-peers"}, "spec": spec}, indent=2))
    return ["run", "--scenario", str(path), "--disable-console-interactive"]


def _dicts_with(value: Any, key: str) -> Iterator[dict[str, Any]]:
    """Every dict under ``value`` (nested dicts and lists) that has ``key``."""
    if isinstance(value, dict):
        if key in value:
            yield value
        for item in value.values():
            yield from _dicts_with(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _dicts_with(item, key)


INBAND_WORDING = "Streaming response returned an error"
"""How GuideLLM 0.8.1 words an error event inside a 200 stream (its other errors: the transport's)."""


def guidellm_reported(work: Workload, workdir: Path) -> Reported:
    """GuideLLM's benchmarks.json: per request its timings (epoch seconds: first token; no per-token
    times, so no gaps) under successful/errored/incomplete (incomplete: in flight when it stopped)."""
    found = sorted((workdir / "out").rglob("*.json"))
    if not found:
        raise BenchError(f"GuideLLM wrote no JSON under {workdir / 'out'}")
    report = json.loads(found[0].read_text())
    streams: list[ClientStream] = []
    failed: dict[str, int] = {}
    for benchmark in report.get("benchmarks", []):
        for status in ("successful", "errored", "incomplete"):
            entries = benchmark.get("requests", {}).get(status) or []
            if status != "successful":
                failed[status] = failed.get(status, 0) + len(entries)
            if status == "errored":
                inband = sum(INBAND_WORDING in json.dumps(entry) for entry in entries)
                failed["of which in-band"] = failed.get("of which in-band", 0) + inband
            for timings in _dicts_with(entries, "first_token_iteration"):
                first = timings.get("first_token_iteration")
                first = None if first is None else first - CLOCK_OFFSET
                streams.append(ClientStream(None, first, None, status == "errored"))
    failures = ", ".join(f"{name} {count}" for name, count in failed.items())
    counted = failed.get("errored", 0) + failed.get("incomplete", 0)
    return Reported(streams, counted, failures or "none found", None)


def aiperf_command(work: Workload, url: str, workdir: Path, snapshot: Path) -> list[str]:
    return [
        *["profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming"],
        *["--concurrency", str(work.concurrency), "--benchmark-duration", str(work.duration_s)],
        *["--synthetic-input-tokens-mean", str(work.prompt_tokens), "--synthetic-input-tokens-stddev", "0"],
        *["--output-tokens-mean", str(work.output_tokens), "--output-tokens-stddev", "0"],
        *["--tokenizer", MODEL, "--artifact-dir", str(workdir / "out"), "--ui-type", "none"],
    ]


def aiperf_reported(work: Workload, workdir: Path) -> Reported:
    """AIPerf's profile_export.jsonl: per record its X-Request-ID, request start (epoch ns), TTFT and
    inter-chunk latencies (ms), and its error if any."""
    found = sorted((workdir / "out").rglob("profile_export.jsonl"))
    if not found:
        raise BenchError(f"AIPerf wrote no profile_export.jsonl under {workdir / 'out'}")
    streams = []
    failed = 0
    for line in found[0].read_text().splitlines():
        record = json.loads(line)
        meta, metrics = record.get("metadata", {}), record.get("metrics", {})
        failed += record.get("error") is not None
        ttft = (metrics.get("time_to_first_token") or {}).get("value")
        start = meta.get("request_start_ns")
        first = None if ttft is None or start is None else start / 1e9 + ttft / 1000 - CLOCK_OFFSET
        chunks = (metrics.get("inter_chunk_latency") or {}).get("value")
        gaps = None if chunks is None else [gap / 1000 for gap in chunks]
        streams.append(ClientStream(meta.get("x_request_id"), first, gaps, record.get("error") is not None))
    return Reported(streams, failed, f"errors {failed}", None)


def inference_perf_command(work: Workload, url: str, workdir: Path, snapshot: Path) -> list[str]:
    """A config file: completions, not chat. Its random and synthetic data refuse the chat API, and
    its shared_prefix data, which accepts it, sends completions requests all the same (seen in 0.7.0)."""
    fixed = {"type": "fixed", "min": 1, "max": 1 << 20}
    config = {
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": MODEL, "base_url": url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": MODEL},
        "data": {
            "type": "random",
            "input_distribution": {**fixed, "mean": work.prompt_tokens},
            "output_distribution": {**fixed, "mean": work.output_tokens},
        },
        "load": {
            "type": "concurrent",
            "stages": [{"num_requests": work.requests, "concurrency_level": work.concurrency}],
            "num_workers": 1,
        },
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": True}},
        "storage": {"local_storage": {"path": str(workdir / "out")}},
    }
    path = workdir / "config.json"  # JSON is YAML
    path.write_text(json.dumps(config, indent=2))
    return ["--config_file", str(path)]


def inference_perf_reported(work: Workload, workdir: Path) -> Reported:
    """inference-perf's per_request_lifecycle_metrics.json: per request its content chunks' times
    (``chunk_times``, from ``time.perf_counter()``, which is CLOCK_MONOTONIC on Linux; its
    ``output_token_times`` repeat them per re-tokenized token) and its error if any."""
    found = sorted((workdir / "out").rglob("per_request_lifecycle_metrics.json"))
    if not found:
        raise BenchError(f"inference-perf wrote no per_request_lifecycle_metrics.json under {workdir / 'out'}")
    streams = []
    failed = 0
    for record in json.loads(found[0].read_text()):
        failed += record.get("error") is not None
        times = ((record.get("info") or {}).get("response_metrics") or {}).get("chunk_times") or []
        gaps = np.diff(times).tolist() if times else None
        streams.append(ClientStream(None, times[0] if times else None, gaps, record.get("error") is not None))
    return Reported(streams, failed, f"errors {failed}", None)


@dataclass(frozen=True)
class Tool:
    """How to run one tool and read what it reported."""

    name: str
    peer: Peer | None
    command: Callable[[Workload, str, Path, Path], list[str]] | None
    reported: Callable[[Workload, Path], Reported] | None


TOOLS = (
    Tool("guidellm", PEERS[0], guidellm_command, guidellm_reported),
    Tool("aiperf", PEERS[1], aiperf_command, aiperf_reported),
    Tool("inference-perf", PEERS[2], inference_perf_command, inference_perf_reported),
)


def run_tool(
    name: str,
    work: Workload,
    workdir: Path,
    launch: Callable[[str], tuple[list[str], dict[str, str]]],
    read: Callable[[Path], Reported],
    exits: frozenset[int] = frozenset({0}),
) -> Row:
    """A fresh server with a trace, the tool against it (its CPU measured), both stopped; the row.
    An exit status outside ``exits`` is the row's note, its report unread."""
    workdir.mkdir(parents=True)
    trace = workdir / "trace.jsonl"
    try:
        server = TargetServerProcess.start(work.server_args(trace), env=project_env())
    except (ServerStartError, OSError) as exc:
        return Row(name, f"server failed to start: {exc}")
    log = workdir / "tool.log"
    try:
        command, env = launch(server.url)
        print(f"{name}: {' '.join(command)}", flush=True)
        measured = run_measured(command, env, workdir, log, work.duration_s + OVERRUN_S)
    finally:
        server.stop()
    sent = read_trace(trace)
    row = Row(name, cpu_total_s=measured.cpu_s, frames=len(sent))
    if len(sent):
        start, end = float(sent["t"].min()), float(sent["t"].max())
        row.cpu_stream_s = measured.cpu_between(start, end)
        row.stream_frames = len(sent)
    inband, cut, keepalives = injected(sent, work.output_tokens)
    server_side = f"server: inband {len(inband)}, cut {len(cut)}, keep-alive {keepalives}"
    if measured.code not in exits:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        row.note = f"exit {measured.code}: {tail[0][:150]} (log {log})"
        row.faults = server_side
        return row
    try:
        reported = read(log)
    except Exception as exc:  # a peer's report format is its own: a row says why, never a crash
        row.note = f"report unreadable: {exc!r}"
        row.faults = server_side
        return row
    tokens = sent_tokens(sent, work.output_tokens)
    pairs = pair_streams(reported.streams, tokens)
    ttft, gaps, compared = timing_errors(pairs, tokens)
    row.ttft_err_ms, row.gap_err_ms = p50_p99(ttft), p50_p99(gaps)
    row.ttft_err_max_ms, row.gap_err_max_ms = max(ttft, default=float("nan")), max(gaps, default=float("nan"))
    row.gaps_merged = merged_gaps(pairs, tokens)
    row.compared = f"{len(pairs)}/{len(reported.streams)} paired, {compared} gaps compared"
    keep = "n/a" if reported.keepalives is None else str(reported.keepalives)
    flagged = {rid for stream, rid in pairs if stream.failed}
    caught = f"flagged inband {len(flagged & inband)}/{len(inband)}, cuts {len(flagged & cut)}/{len(cut)}"
    if any(stream.request_id is None for stream, _ in pairs):  # paired by time: which stream is which is a guess
        caught = "flagged n/a (no request ids)"
    if not reported.streams:  # the floor: it keeps and judges no stream
        caught = "flagged n/a (judges nothing)"
    row.faults = f"{server_side}; tool: failed {reported.failed} ({reported.failures}), {caught}, keep-alive {keep}"
    return row


def run_sse_soak(work: Workload, workdir: Path, resolution_ms: float = 0.0) -> Row:
    row = run_tool(
        "sse-soak",
        work,
        workdir,
        lambda url: sse_soak_command(work, url, workdir, resolution_ms),
        lambda log: sse_soak_reported(work, workdir, log),
        frozenset({0, 1}),  # 1: the verdict FAIL, as the injected faults make it
    )
    row.counters = read_counters(workdir / COUNTERS_FILE)
    return row


def run_peer(tool: Tool, work: Workload, workdir: Path, snapshot: Path) -> Row:
    assert tool.peer is not None and tool.command is not None and tool.reported is not None
    peer, command, reported = tool.peer, tool.command, tool.reported
    return run_tool(
        tool.name,
        work,
        workdir,
        lambda url: ([str(peer.bin / peer.command), *command(work, url, workdir, snapshot)], peer_env(peer)),
        lambda log: reported(work, workdir),
    )


# --- the floor and the counters (issue 38) -------------------------------------------------------

FLOOR = "floor"
"""The bare receive loop's row (``bench/floor_loop.py``): what reading a frame with its stamp costs at least."""
FLOOR_SCRIPT = Path(__file__).resolve().parent / "floor_loop.py"
FLOOR_GOAL = 1.3
"""Issue 38's goal: sse-soak's CPU per frame at most this many times the floor's."""
COUNTERS_ENV = "SSE_SOAK_BENCH_COUNTERS"
COUNTERS_FILE = "counters.json"
COUNTERS_HOOK = """


# bench/peers.py's counters: this process's rusage and gc collections from test_start to quitting,
# and the body mux's wakes and reads where it counts them; written to $SSE_SOAK_BENCH_COUNTERS.
import gc as _gc
import json as _json
import os as _os
import resource as _resource

from locust import events as _events

_at_start = {}


@_events.test_start.add_listener
def _counters_start(**_kwargs):
    _at_start["usage"] = _resource.getrusage(_resource.RUSAGE_SELF)
    _at_start["gc"] = [entry["collections"] for entry in _gc.get_stats()]


@_events.quitting.add_listener
def _counters_dump(**_kwargs):
    path = _os.environ.get("SSE_SOAK_BENCH_COUNTERS")
    if not path or "usage" not in _at_start:
        return
    from loadtests.client.body_mux import body_mux

    usage, before = _resource.getrusage(_resource.RUSAGE_SELF), _at_start["usage"]
    mux = body_mux()
    counters = {
        "utime_s": usage.ru_utime - before.ru_utime,
        "stime_s": usage.ru_stime - before.ru_stime,
        "nvcsw": usage.ru_nvcsw - before.ru_nvcsw,
        "nivcsw": usage.ru_nivcsw - before.ru_nivcsw,
        "gc_collections": [e["collections"] - b for e, b in zip(_gc.get_stats(), _at_start["gc"])],
        "wakes": getattr(mux, "wakes", None),
        "reads": getattr(mux, "reads", None),
    }
    with open(path, "w") as out:
        _json.dump(counters, out)
"""


def read_counters(path: Path) -> dict[str, Any]:
    """A tool's counters file ({} when it wrote none)."""
    try:
        counters = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return counters if isinstance(counters, dict) else {}


def floor_command(work: Workload, url: str, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """Prepare the request sse-soak sends (in a process of its own, before the measured run), then
    the floor's command: its result to ``workdir/counters.json``."""
    payload = workdir / "request.json"
    prepare = [sys.executable, str(FLOOR_SCRIPT), "--prepare", "--host", url, "--payload-file", str(payload)]
    prepare += ["--prompt-tokens", str(work.prompt_tokens), "--output-tokens", str(work.output_tokens)]
    done = subprocess.run(prepare, env=project_env(), cwd=workdir, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BenchError(f"floor_loop.py --prepare failed: {(done.stderr or done.stdout).strip()[-300:]}")
    command = [sys.executable, str(FLOOR_SCRIPT), "--host", url, "--payload-file", str(payload)]
    command += ["--concurrency", str(work.concurrency), "--duration", str(work.duration_s)]
    command += ["--result", str(workdir / COUNTERS_FILE)]
    return command, project_env()


def floor_reported(workdir: Path) -> Reported:
    """The floor keeps no streams (nothing to pair or time); what it counted."""
    counters = read_counters(workdir / COUNTERS_FILE)
    if not counters:
        raise BenchError(f"the floor wrote no result ({workdir / COUNTERS_FILE})")
    failures = f"reconnects {counters['reconnects']} of {counters['requests']} requests; frames {counters['frames']}"
    return Reported([], 0, failures, None)


def run_floor(work: Workload, workdir: Path) -> Row:
    try:
        row = run_tool(
            FLOOR, work, workdir, lambda url: floor_command(work, url, workdir), lambda log: floor_reported(workdir)
        )
    except (BenchError, OSError, subprocess.SubprocessError) as exc:
        return Row(FLOOR, f"failed to run: {exc}")
    row.counters = read_counters(workdir / COUNTERS_FILE)
    return row


def cpu_per_frame_us(row: Row) -> tuple[float, float]:
    """(streaming-only, in all) CPU µs per frame of a row (nan where not measured)."""
    stream = 1e6 * row.cpu_stream_s / row.stream_frames if row.stream_frames else float("nan")
    total = 1e6 * row.cpu_total_s / row.frames if row.frames else float("nan")
    return stream, total


def floor_ratio(rows: list[Row]) -> tuple[float, float] | None:
    """sse-soak's CPU per frame over the floor's of the same round, (streaming-only, in all); frames
    from the trace for both; None when either failed."""
    usable = {row.tool: row for row in rows if row.frames and not row.note}
    soak, floor = usable.get("sse-soak"), usable.get(FLOOR)
    if soak is None or floor is None:
        return None
    return floor.stream_rate / soak.stream_rate, floor.total_rate / soak.total_rate


def print_floor_ratio(measured: tuple[float, float]) -> None:
    print(
        f"sse-soak CPU per frame / floor: {measured[0]:.2f}x streaming-only, {measured[1]:.2f}x in all "
        f"(goal <= {FLOOR_GOAL:g}x)"
    )


def print_floor_rounds(measured: list[tuple[float, float]]) -> None:
    streams, totals = sorted(pair[0] for pair in measured), sorted(pair[1] for pair in measured)
    print(
        f"over {len(measured)} rounds, sse-soak CPU per frame / floor: streaming-only "
        f"{', '.join(f'{r:.2f}' for r in streams)} (median {statistics.median(streams):.2f}x), in all "
        f"{', '.join(f'{r:.2f}' for r in totals)} (median {statistics.median(totals):.2f}x) (goal <= {FLOOR_GOAL:g}x)"
    )


def _per(value: Any, count: float, scale: float = 1.0, digits: int = 2) -> str:
    """``value / count * scale`` printed, or n/a when either is missing or zero."""
    if value is None or not count:
        return "n/a"
    return f"{value / count * scale:.{digits}f}"


def print_counters(rows: list[Row]) -> None:
    """Each row's counters beside its CPU: rusage over its load, gc collections per 1k frames (the
    trace's), frames per read and per wake where the tool counts them (n/a where not)."""
    counted = [row for row in rows if row.counters]
    if not counted:
        return
    print(
        f"{'counters':<15} {'cpu us/frame':>12} {'utime s':>8} {'stime s':>8} {'nvcsw':>8} {'nivcsw':>7} "
        f"{'gc0/1/2 per 1k frames':>22} {'frames/read':>11} {'frames/wake':>11}"
    )
    for row in counted:
        c = row.counters
        gc_counts = c.get("gc_collections") or [None, None, None]
        per_1k = " / ".join(_per(value, row.frames, 1000) for value in gc_counts)
        print(
            f"{row.tool:<15} {cpu_per_frame_us(row)[0]:>12.1f} {c.get('utime_s', float('nan')):>8.2f} "
            f"{c.get('stime_s', float('nan')):>8.2f} {c.get('nvcsw', 0):>8} {c.get('nivcsw', 0):>7} {per_1k:>22} "
            f"{_per(row.frames, c.get('reads') or 0):>11} {_per(row.frames, c.get('wakes') or 0):>11}"
        )


# --- timing resolution (issue 38): sse-soak alone at each resolution -----------------------------


def _max(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"


def print_resolutions(results: list[tuple[float, Row]]) -> None:
    """One line per run: CPU per frame, frames per CPU s, wakes, timing errors against the trace, and
    the share of gaps merged; then per resolution the median CPU per frame over its runs."""
    print(
        f"\n{'resolution ms':>13} {'cpu us/frame':>12} {'frames/cpu s':>12} {'nvcsw':>8} "
        f"{'ttft err ms p50/p99/max':>24} {'gap err ms p50/p99/max':>23} {'gaps merged':>16}"
    )
    for resolution, row in results:
        merged, total = row.gaps_merged
        share = f"{100 * merged / total:.1f}% of {total}" if total else "n/a"
        print(
            f"{resolution:>13g} {cpu_per_frame_us(row)[0]:>12.1f} {row.stream_rate:>12,.0f} "
            f"{row.counters.get('nvcsw', 'n/a'):>8} {_ms(row.ttft_err_ms) + ' / ' + _max(row.ttft_err_max_ms):>24} "
            f"{_ms(row.gap_err_ms) + ' / ' + _max(row.gap_err_max_ms):>23} {share:>16}"
            + (f"  ({row.note})" if row.note else "")
        )
    for resolution in sorted({resolution for resolution, _ in results}):
        costs = [cpu_per_frame_us(row)[0] for r, row in results if r == resolution and row.frames and not row.note]
        if costs:
            median = statistics.median(costs)
            print(f"resolution {resolution:g} ms: median {median:.1f} CPU us per frame over {len(costs)} run(s)")


def run_resolutions(work: Workload, workdir: Path, resolutions: list[float], rounds: int) -> bool:
    """sse-soak alone at each resolution, ``rounds`` times, the order rotated each round; whether
    every run worked."""
    results: list[tuple[float, Row]] = []
    for number in range(rounds):
        shift = number % len(resolutions)
        for resolution in resolutions[shift:] + resolutions[:shift]:
            row = run_sse_soak(work, workdir / f"round-{number + 1}" / f"r{resolution:g}", resolution)
            results.append((resolution, row))
    print_resolutions(results)
    return all(row.frames and not row.note for _, row in results)


# --- the table -----------------------------------------------------------------------------------------


def _ms(pair: tuple[float, float] | None) -> str:
    return "n/a" if pair is None else f"{pair[0]:.2f} / {pair[1]:.2f}"


def print_table(rows: list[Row], work: Workload) -> None:
    print(
        f"\nworkload: {work.concurrency} chat streams of {work.prompt_tokens} prompt / {work.output_tokens} output "
        f"tokens for {work.duration_s} s; server TTFT {work.ttft_ms:g} ms, ITL {work.itl_ms:g} ms, keep-alive "
        f"{work.keepalive_s:g} s, faults {work.fault_pct:g}% of {'/'.join(work.fault_types)}"
    )
    header = (
        f"{'tool':<15} {'frames':>7} {'cpu s':>6} {'frames/cpu s':>12} {'stream cpu s':>12} {'frames/stream cpu s':>19}"
    )
    header += f" {'ttft err ms p50/p99':>19} {'gap err ms p50/p99':>18}"
    print(header)
    for row in rows:
        print(
            f"{row.tool:<15} {row.frames:>7} {row.cpu_total_s:>6.1f} {row.total_rate:>12,.0f} "
            f"{row.cpu_stream_s:>12.1f} {row.stream_rate:>19,.0f} {_ms(row.ttft_err_ms):>19} {_ms(row.gap_err_ms):>18}"
        )
    for row in rows:
        print(
            f"{row.tool}: {row.compared or 'no timings compared'}; {row.faults}" + (f"; {row.note}" if row.note else "")
        )
    measured = ratios(rows)
    if measured is not None:
        print(
            f"sse-soak / best peer, frames per CPU s: total {measured[0]:.2f}x, "
            f"streaming-only {measured[1]:.2f}x (goal >= 2x)"
        )
    print_counters(rows)
    if (against_floor := floor_ratio(rows)) is not None:
        print_floor_ratio(against_floor)


def ratios(rows: list[Row]) -> tuple[float, float] | None:
    """sse-soak's frames per CPU second over the best peer's of the same round, total and
    streaming-only; None when sse-soak or every peer failed."""
    soak = next((row for row in rows if row.tool == "sse-soak" and row.frames and not row.note), None)
    peers = [row for row in rows if row.tool not in ("sse-soak", FLOOR) and row.frames and not row.note]
    if soak is None or not peers:
        return None
    best_total = max(row.total_rate for row in peers)
    best_stream = max(row.stream_rate for row in peers)
    return soak.total_rate / best_total, soak.stream_rate / best_stream


def print_rounds(measured: list[tuple[float, float]]) -> None:
    """The ratios of every round and their medians: one round's ratio swings by a third on a shared
    machine, so several rounds, each tool beside the others in time, say what one cannot."""
    totals, streams = sorted(pair[0] for pair in measured), sorted(pair[1] for pair in measured)
    print(
        f"over {len(measured)} rounds, sse-soak / best peer: total {', '.join(f'{r:.2f}' for r in totals)} "
        f"(median {statistics.median(totals):.2f}x), streaming-only {', '.join(f'{r:.2f}' for r in streams)} "
        f"(median {statistics.median(streams):.2f}x)"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the floor and sse-soak, a tiny workload, no installs")
    parser.add_argument("--install-only", action="store_true", help="install the peers, run nothing")
    parser.add_argument("--tools", default="guidellm,aiperf,inference-perf", help="peers to run (comma-separated)")
    parser.add_argument("--duration", type=int, default=FULL.duration_s, help="seconds of load per tool")
    parser.add_argument("--concurrency", type=int, default=FULL.concurrency, help="streams at once")
    parser.add_argument("--output-tokens", type=int, default=FULL.output_tokens, help="tokens per stream")
    parser.add_argument("--itl-ms", type=float, default=FULL.itl_ms, help="the server's inter-token latency")
    parser.add_argument("--fault-pct", type=float, default=FULL.fault_pct, help="percent of requests faulted")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every tool this many times, one round after the other, and print each round's table and the "
        "median ratios",
    )
    parser.add_argument("--no-floor", action="store_true", help="leave out the bare receive loop's row")
    parser.add_argument(
        "--resolutions",
        default="",
        help="sse-soak alone at each timing resolution (ms, comma-separated, e.g. 0,1,2,5), alternating, "
        "--rounds times each; no peers, no floor",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="then one more sse-soak round with py-spy attached (not measured), its breakdown per frame "
        "(bench/breakdown.py)",
    )
    return parser.parse_args(argv)


def install_row(peer: Peer) -> str:
    stamp = json.loads((peer.home / STAMP).read_text())
    return f"{peer.name}: {peer.recipe}, installed in {stamp['install_s']} s, {stamp['size_mb']} MB at {peer.home}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"sse-soak read path: {READ_PATH} (SSE_SOAK_PURE_PYTHON_READS=1 reads through Python: the A/B)")
    tools = [tool for tool in TOOLS if tool.name in args.tools.split(",")]
    if args.install_only:
        for tool in tools:
            try:
                assert tool.peer is not None
                ensure_peer(tool.peer)
                print(install_row(tool.peer))
            except ToolInstallError as exc:
                print(f"{tool.name}: {exc}", flush=True)
        return 0
    chosen = {"duration_s": args.duration, "concurrency": args.concurrency, "output_tokens": args.output_tokens}
    chosen |= {"itl_ms": args.itl_ms, "fault_pct": args.fault_pct}
    work = QUICK if args.quick else Workload(**{**FULL.__dict__, **chosen})
    if args.rounds < 1:
        print("peers.py: --rounds must be at least 1", file=sys.stderr)
        return 2
    try:
        resolutions = [float(part) for part in args.resolutions.split(",") if part.strip()]
    except ValueError:
        resolutions = [-1.0]
    if any(resolution < 0 for resolution in resolutions):
        print(
            f"peers.py: --resolutions takes milliseconds >= 0, comma-separated: {args.resolutions!r}", file=sys.stderr
        )
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="sse-soak-peers-"))
    installed: dict[str, Path | str] = {}  # per peer: the tokenizer snapshot, or why it is not installed
    measured: list[tuple[float, float]] = []
    soak_rows: list[Row] = []
    against_floor: list[tuple[float, float]] = []
    own_runs_ok = True
    for number in range(1, (0 if resolutions else args.rounds) + 1):
        here = workdir if args.rounds == 1 else workdir / f"round-{number}"
        rows = run_own_pair(work, here, number, with_floor=not args.no_floor)
        if not args.quick:
            rows += [run_installed_peer(tool, work, here / tool.name, installed) for tool in tools]
        print_table(rows, work)
        soak = next(row for row in rows if row.tool == "sse-soak")
        own_runs_ok = own_runs_ok and bool(soak.frames) and not soak.note
        soak_rows.append(soak)
        if (pair := ratios(rows)) is not None:
            measured.append(pair)
        if (pair := floor_ratio(rows)) is not None:
            against_floor.append(pair)
    if args.rounds > 1 and measured:
        print_rounds(measured)
    if args.rounds > 1 and against_floor:
        print_floor_rounds(against_floor)
    if resolutions:
        own_runs_ok = run_resolutions(work, workdir, resolutions, args.rounds)
    if args.profile:
        own_runs_ok = profile_sse_soak(work, workdir / "profiled", soak_rows) and own_runs_ok
    if args.keep:
        print(f"work directory: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if own_runs_ok else 1


def run_own_pair(work: Workload, here: Path, number: int, with_floor: bool) -> list[Row]:
    """The floor's and sse-soak's rows of round ``number`` (the floor's first in the list): the floor
    runs first in odd rounds and second in even ones, so that a drift of the machine's load
    weighs on both alike over rounds."""
    if not with_floor:
        return [run_sse_soak(work, here / "sse-soak")]
    if number % 2:
        floor = run_floor(work, here / FLOOR)
        return [floor, run_sse_soak(work, here / "sse-soak")]
    soak = run_sse_soak(work, here / "sse-soak")
    return [run_floor(work, here / FLOOR), soak]


def profile_sse_soak(work: Workload, workdir: Path, measured: list[Row]) -> bool:
    """``--profile``: one more sse-soak round with py-spy attached, apart from the measured rounds
    (sampling pauses the process), its breakdown scaled to their median streaming CPU per frame
    (and, from one more round watched without py-spy, the process's system share)."""
    from breakdown import profile_round  # bench/ is on sys.path as this script's folder

    rates = [row.cpu_stream_s * 1e6 / row.stream_frames for row in measured if row.stream_frames and not row.note]
    if not rates:
        print("\nwhere the time goes: not measured: no measured sse-soak round to scale it by")
        return False
    label = f"sse-soak, median CPU per frame of {len(rates)} measured round(s)"
    return profile_round(work, workdir, statistics.median(rates), None, label)


def run_installed_peer(tool: Tool, work: Workload, workdir: Path, installed: dict[str, Path | str]) -> Row:
    """The peer's row: installed (once per invocation) and run, or a row saying why not."""
    assert tool.peer is not None
    if tool.name not in installed:
        try:
            ensure_peer(tool.peer)
            print(install_row(tool.peer), flush=True)
            snapshots = [value for value in installed.values() if isinstance(value, Path)]
            installed[tool.name] = snapshots[0] if snapshots else ensure_tokenizer(tool.peer.bin / "python")
        except (ToolInstallError, OSError) as exc:
            installed[tool.name] = f"not installed: {exc}"
    snapshot = installed[tool.name]
    if not isinstance(snapshot, Path):
        return Row(tool.name, snapshot)
    try:
        return run_peer(tool, work, workdir, snapshot)
    except Exception as exc:  # a peer that fails to run is a row saying why
        return Row(tool.name, f"failed to run: {exc!r}")


if __name__ == "__main__":
    sys.exit(main())
