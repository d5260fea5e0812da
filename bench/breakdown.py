"""Where sse-soak's CPU per frame goes: a sampling profile of the process that reads the streams,
and a loop-free micro-bench of the per-frame work.

Why this exists: issue 38 asks how much of sse-soak's CPU per frame sits above the floor of a bare
receive loop, and in which part of the harness. Two measurements answer it, each with its own blind
spot, so both are printed:

A) Profile. sse-soak runs the peers workload (``bench/peers.py``'s locustfile and command, reused:
32 chat streams of 128 prompt / 500 output tokens for 30 s; bundled server with TTFT 500 ms, a
token every 10 ms, keep-alive comments every 0.2 s of silence, 5% of requests faulted). Once the
server's trace shows the first frame, and one more second for the users to start, py-spy 0.4.3
(installed by this script into a venv of its own, ``~/.cache/sse-soak/py-spy-0.4.3``, through
``loadtests.services.tool_venv``) records the Locust process: ``py-spy record --pid P --native -r
250 --format raw --full-filenames -d S``. py-spy 0.4.3 refuses ``--native`` with ``--nonblocking``
("Can't get native stack traces with the --nonblocking option"), and the native frames (libc's
syscalls, libev, orjson, the GC) are what separate the categories, so the process is paused for
each sample: that is why the profiled round is a round of its own, never a measured one. sse-soak's
Locust starts no child process in this run (the lag monitor is a greenlet, live gates judge in the
same process; ``loadtests.run.child_run`` forks only under ``sse-soak run``): the process profiled
is the one that reads every stream, and the table names any other process seen in its tree.

Each sample goes to the category of its innermost frame that matches (``categorize``; GC first,
anywhere in the stack), matched by file (``loadtests/client/sse.py`` is SSE parsing whatever its
functions are called) and, in the few files that mix categories, by function name. Idle samples
(py-spy's thread-state check) are left out, as py-spy leaves them out without ``--idle``, and so
are the blocking waits its native mode counts active anyway (libev's ``epoll_wait``, a lock, a
socket's ``poll`` in another thread; never the harness's own ``epoll.poll(0)``). A category's
share of the samples times the CPU per frame of a NON-profiled round of the same workload (its
streaming CPU per trace frame, as peers.py counts it) gives its µs per frame. Kernel time that no
stack shows (the wake itself, softirq charged to the process) is the non-profiled round's system
share (psutil, the Locust process alone, over the same window) less the share of samples in
syscalls: printed as "kernel, unsampled", and the other categories share what is left.

B) Micro-bench (``--stages``, run as a subprocess of its own: it imports Locust, which patches the
process for gevent). 32 streams of the same workload are read once from the bundled server with
``http.client`` (one body chunk a read, as a read brings one frame at this pace), and the first
10,000-odd reads (whole streams) are replayed through the harness's own code, with no socket and
no loop: ``RawBody.take`` (``loadtests/load/users.py``) on a fake ``raw``, the ``SSEParser`` and
the ``StreamTracker``, then ``StreamTracker.finish`` and ``Recorder.add`` per stream. Stages are cut
in turn: parse only (``SSEParser.feed``), + JSON (``decode_json`` on each data frame), + judging
(``RawBody.take`` with the tracker's frames list a ``deque(maxlen=0)``), + recording (the list,
``finish``, ``Recorder.add``). Each stage is the difference of two cuts, best of ``--repeat``.
This is the "5.5 µs a frame" method of ``bench/peers.py``'s docstring (``bench/sse_user_throughput.py``
has no replay of its own: it measures whole Locust rounds), kept as code.

Run it::

    python bench/breakdown.py             # py-spy installed if missing; a measured and a profiled round, then B
    python bench/breakdown.py --stages    # B alone
    python bench/peers.py --profile       # the same profile as an extra round of the peers bench

Reading the table: "scaled" is the category's share times the unprofiled CPU per frame (after the
unsampled kernel time), as asked; "sampled" is the same share times the profiled round's own CPU per
frame. py-spy's pauses (native unwinding, about 85 samples a second reached of the 250 asked, fewer
on a busy box) let frames pile up between reads, so the profiled round costs half as much per frame:
what it loses is per-wake cost (kernel wake, hub, the per-read Python calls), while per-frame costs
stay. So the "sampled" column is the better estimate of the per-frame Python work (it agrees with
the loop-free replay: SSE 2.3-3.3 against 2.8-3.3 µs, JSON 1.2-2.2 against 1.0-1.4), and the
difference of the two totals (18-23 µs) is about what one read per frame, one wake per read, costs
above it: the kernel-wake floor (17 µs) and the hub.

Before: main at a311894, 2026-12-07 12:22-12:44 UTC, ``python bench/breakdown.py --rounds 2`` three
times, on this 2-core VM SHARED with five other helpers running their test suites (the second run
also beside this worktree's fast tier): absolute µs are noisy (measured rounds 32.5-51.3 µs a frame,
the 51.3 one under the heaviest load), the shares steadier. The first run (quietest; measured 35.5
and 35.4 µs a frame, system 21%; 987 active samples, 36 a second)::

    category            samples  share  us/frame scaled  sampled
    SSE parsing             210  21.3%             6.85     3.31
    judging                 168  17.0%             5.48     2.65
    HTTP                    134  13.6%             4.37     2.11
    recording               133  13.5%             4.34     2.09
    kernel/syscalls         117  11.9%             3.82     1.84
    JSON                     79   8.0%             2.58     1.24
    event-loop hub           52   5.3%             1.70     0.82
    kernel stamp             34   3.4%             1.11     0.54
    Locust                   27   2.7%             0.88     0.43
    GC                       24   2.4%             0.78     0.38
    other                     5   0.5%             0.16     0.08
    lag monitor               4   0.4%             0.13     0.06
    kernel, unsampled                              3.24     1.96
    total                   987                   35.46    17.51

The three runs' shares: SSE parsing 21.3 / 16.4 / 12.5%, judging 17.0 / 21.3 / 18.5%, HTTP 13.6 /
10.8 / 16.9%, recording 13.5 / 11.0 / 7.1%, kernel/syscalls 11.9 / 10.1 / 14.1%, JSON 8.0 / 11.0 /
11.7%, event-loop hub 5.3 / 3.2 / 8.7%, kernel stamp 3.4 / 9.1 / 4.6%, GC 2.4 / 3.0 / 3.3%, Locust
2.7 / 3.6 / 0.9%, lag monitor 0.4 / 0.6 / 1.0%, other 0.5 / 0 / 0.6%; unsampled kernel time 3.2 /
4.1 / 4.9 µs a frame. Loop-free replay (10,356 reads of 22 streams, one frame a read), µs a frame:
parse 3.29 / 2.75 / 2.81, JSON 1.00 / 1.35 / 1.17, judge 1.78 / 1.70 / 1.66, record 0.79 / 0.31 /
0.32; total 6.86 / 6.12 / 5.95 (the peers docstring's "5.5 µs" was parse, JSON and judge).

The five largest costs above the floor (the floor pays the wake, ``epoll_wait``, ``recvmsg`` and the
stamp's decoding), by the three runs' self-time shares, with their functions:

1. Judging, 17-21%: ``StreamTracker.frame`` (7-9% self: property calls, ``_arrival``,
   ``_data_arrival``, the frames-list tuple), ``RawBody.take`` (3-4%), ``_judge``, ``_error_of``,
   ``done_marker_problem`` (``loadtests/client/outcome.py``, ``loadtests/load/users.py``).
2. SSE parsing, 12-21%: ``SSEParser._leading_data_frames`` (8-16% self) with its UTF-8 decode
   (``unicode_decode_utf8``, 2-3%), ``SSEParser.feed`` (``loadtests/client/sse.py``).
3. HTTP, 11-17%: geventhttpclient's ``HTTPResponse._on_body`` and its C ``on_body`` (a Python call
   and a bytearray per chunk), ``FramedResponse.feed`` (``loadtests/client/response_end.py``),
   ``RawBody.take_read`` and ``_buffered``.
4. JSON, 8-12%: ``decode_json`` (``loadtests/client/outcome.py``; orjson's own time shows under it,
   7.6-10.3% self).
5. Recording, 7-14%: ``RunWriter._write_first_pending``/``_write_batch`` (parquet parts written in
   the hub during the run, pyarrow's conversion), ``Recorder.add``, ``StreamTracker.finish``.

Then the event-loop hub (3-9%: ``MuxedBody.readable``, ``BodyMux._ready``, libev), GC (2-3%) and
the per-wake cost the profile cannot apportion (the 18-23 µs between the two totals).

Exit status: 1 if sse-soak's run failed or py-spy recorded nothing; 2 on a bad option.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from loadtests.errors import ToolInstallError  # noqa: E402
from loadtests.services.tool_venv import ToolVenv, dump, run_step, stamp_matches  # noqa: E402

PY_SPY_VERSION = "0.4.3"
PY_SPY_HOME = Path(os.environ.get("SSE_SOAK_PY_SPY_HOME", f"~/.cache/sse-soak/py-spy-{PY_SPY_VERSION}")).expanduser()
PY_SPY_STAMP = "sse-soak-install.json"
RATE_HZ = 250
SETTLE_S = 1.0
"""After the first frame, the users still start (all of them within a second at the peers' spawn rate)."""
TAIL_S = 2.0
"""The profile ends this long before the load does: the window holds streaming only."""


# --- py-spy ------------------------------------------------------------------------------------------


def py_spy_recipe() -> str:
    return f"python{sys.version_info.major}.{sys.version_info.minor} py-spy=={PY_SPY_VERSION}"


def ensure_py_spy(say: bool = True) -> Path:
    """py-spy's binary, pip-installed into ``PY_SPY_HOME`` once (reused while its stamp names the
    recipe; each step logged to ``install.log`` there). Failure: a ``ToolInstallError``."""
    venv = ToolVenv(PY_SPY_HOME)
    binary = venv.home / "bin" / "py-spy"
    if stamp_matches(venv.home / PY_SPY_STAMP, py_spy_recipe()) and binary.exists():
        return binary
    venv.begin(PY_SPY_STAMP, "SSE_SOAK_PY_SPY_HOME", ToolInstallError)
    if say:
        print(f"installing py-spy=={PY_SPY_VERSION} into {venv.home} (log: {venv.log})", flush=True)
    run_step("py-spy", "venv", [sys.executable, "-m", "venv", str(venv.home)], venv.log)
    pip = [str(venv.python), "-m", "pip", "install", "--disable-pip-version-check"]
    run_step("py-spy", "pip install", [*pip, f"py-spy=={PY_SPY_VERSION}"], venv.log)
    version = run_step("py-spy", "py-spy --version", [str(binary), "--version"], venv.log)
    (venv.home / PY_SPY_STAMP).write_text(dump({"recipe": py_spy_recipe(), "version": version}))
    return binary


def record_command(py_spy: Path, pid: int, seconds: float, out: Path, rate: int = RATE_HZ) -> list[str]:
    """py-spy's command line: native frames, raw (collapsed) stacks, full file names, idle left out."""
    command = [str(py_spy), "record", "--pid", str(pid), "--native", "-r", str(rate), "--format", "raw"]
    return [*command, "--full-filenames", "-o", str(out), "-d", str(max(1, round(seconds)))]


@dataclass
class Profile:
    """One py-spy capture of a process: its raw stacks, the window (CLOCK_MONOTONIC), the process's
    user and system CPU over it, and the other processes of the tool's tree."""

    pid: int
    stacks: str
    start: float
    end: float
    utime_s: float
    stime_s: float
    others: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def stime_share(self) -> float:
        total = self.utime_s + self.stime_s
        return self.stime_s / total if total > 0 else 0.0


def record(py_spy: Path | None, pid: int, seconds: float, out: Path, others: list[str] | None = None) -> Profile:
    """Attach py-spy to ``pid`` for ``seconds`` of wall time; the capture with the process's CPU over it
    (``py_spy`` None: the CPU only, nothing attached). py-spy's own ``-d`` counts samples (it runs
    longer when sampling falls behind, as it does with native unwinding on a busy machine), so it is
    asked for more and stopped with SIGINT at the window's end, when it writes what it has."""
    try:
        target = psutil.Process(pid)
        before = after = target.cpu_times()
    except psutil.Error as exc:
        return Profile(pid, "", 0.0, 0.0, 0.0, 0.0, others or [], f"process gone: {exc}")
    start = time.monotonic()
    spy = None
    if py_spy is not None:
        command = record_command(py_spy, pid, seconds * 4, out)
        spy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while time.monotonic() < start + seconds and (spy is None or spy.poll() is None):
        try:
            after = target.cpu_times()
        except psutil.Error:
            break
        time.sleep(0.1)
    end = time.monotonic()
    stacks, error = "", ""
    if spy is not None:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)
        try:
            said, _ = spy.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            said, _ = spy.communicate()
        stacks = out.read_text(errors="replace") if out.exists() else ""
        error = "" if stacks else f"py-spy exit {spy.returncode}, no stacks: {said.strip()[-300:]}"
    return Profile(pid, stacks, start, end, after.user - before.user, after.system - before.system, others or [], error)


def _streaming_process(marker: str) -> tuple[psutil.Process | None, list[str]]:
    """The process of this one's tree whose command line holds ``marker``; the others of its tree."""
    for child in psutil.Process().children(recursive=True):
        try:
            if any(marker in part for part in child.cmdline()):
                others = [" ".join(c.cmdline())[:120] for c in child.children(recursive=True)]
                return child, others
        except psutil.Error:
            continue
    return None, []


class ProfileWhenStreaming:
    """A thread that waits for ``trace`` to show the first frame, finds the process whose command line
    holds ``marker`` (the locustfile's path), and records it with py-spy for ``seconds``."""

    def __init__(
        self, py_spy: Path | None, trace: Path, marker: str, seconds: float, out: Path, timeout_s: float
    ) -> None:
        self.profile: Profile | None = None
        self._args = (py_spy, trace, marker, seconds, out, timeout_s)
        self._thread = threading.Thread(target=self._run, name="profile-when-streaming", daemon=True)

    def __enter__(self) -> ProfileWhenStreaming:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join()

    def _run(self) -> None:
        py_spy, trace, marker, seconds, out, timeout_s = self._args
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not (trace.exists() and trace.stat().st_size > 0):
            time.sleep(0.05)
        time.sleep(SETTLE_S)
        process, others = _streaming_process(marker)
        if process is None:
            self.profile = Profile(0, "", 0.0, 0.0, 0.0, 0.0, [], f"no process with {marker} in its command line")
            return
        self.profile = record(py_spy, process.pid, seconds, out, others)


# --- categories ------------------------------------------------------------------------------------

CATEGORIES = (
    "kernel/syscalls",
    "event-loop hub",
    "kernel stamp",
    "HTTP",
    "SSE parsing",
    "JSON",
    "judging",
    "recording",
    "Locust",
    "lag monitor",
    "GC",
    "other",
)
SYSCALLS = frozenset(
    [
        "epoll_wait",
        "epoll_pwait",
        "epoll_ctl",
        "getpid",
        "connect",
        "accept4",
        "socket",
        "setsockopt",
        "getsockopt",
        "ioctl",
        "fcntl",
        "openat",
        "open64",
        "lseek64",
        "recvmsg",
        "recv",
        "recvfrom",
        "__recv",
        "__libc_recv",
        "__libc_recvmsg",
        "__libc_recvfrom",
        "send",
        "sendto",
        "sendmsg",
        "__send",
        "__libc_send",
        "__libc_sendto",
        "__libc_sendmsg",
        "clock_gettime",
        "__clock_gettime",
        "__clock_gettime64",
        "gettimeofday",
        "nanosleep",
        "clock_nanosleep",
        "__clock_nanosleep",
        "read",
        "write",
        "__libc_read",
        "__libc_write",
        "poll",
        "ppoll",
        "select",
        "pselect",
        "close",
        "__close",
        "fstat",
        "fstatat64",
        "getrusage",
        "eventfd_write",
        "syscall",
    ]
)
GC_FUNCTIONS = frozenset({"gc_collect_main", "gc_collect_with_callback", "gc_collect_generations", "collect"})
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

# Files that are one category whatever their functions are called (matched as path suffixes/parts).
FILE_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("loadtests/client/kernel_stamps.py", "kernel stamp"),
    ("loadtests/client/body_mux.py", "event-loop hub"),
    ("loadtests/client/sse.py", "SSE parsing"),
    ("loadtests/client/response_end.py", "HTTP"),
    ("loadtests/client/framing.py", "HTTP"),
    ("loadtests/record/lag.py", "lag monitor"),
    ("loadtests/record/", "recording"),
    ("loadtests/run/collect.py", "recording"),
    ("/geventhttpclient/", "HTTP"),
    ("/h11/", "HTTP"),
    ("/orjson/", "JSON"),
    ("/json/", "JSON"),
    ("_json.c", "JSON"),
    ("/locust/", "Locust"),
    ("/gevent/", "event-loop hub"),
    ("/greenlet/", "event-loop hub"),
    ("/pyarrow/", "recording"),
    ("/loadtests/", "other"),
    ("<frozen", "other"),  # imports  # the rest of the harness (progress, live gates, ...): none of the above
)
# Files that mix categories: by function name (the last part of py-spy's qualified name), else a default.
FUNCTION_CATEGORIES: dict[str, tuple[dict[str, str], str]] = {
    "loadtests/load/users.py": (
        {
            "take_read": "HTTP",
            "_buffered": "HTTP",
            "_arrived_already": "HTTP",
            "read_to_end": "HTTP",
            "_read_tls": "HTTP",
            "keep_connection_if_whole": "HTTP",
            "take": "judging",
            "take_whole_frames": "judging",
            "take_arrived_already": "judging",
            "report": "recording",
        },
        "Locust",
    ),
    "loadtests/client/outcome.py": (
        {
            "decode_json": "JSON",
            "_json_or_none": "JSON",
            "finish": "recording",
            "as_dict": "recording",
            "_outcome": "recording",
        },
        "judging",
    ),
    "loadtests/load/state.py": ({"keeps_frames": "recording"}, "Locust"),
}
# Native frames (a shared object's function) by name.
NATIVE_CATEGORIES: tuple[tuple[Callable[[str, str], bool], str], ...] = (
    (lambda fn, path: fn in SYSCALLS and ("libc.so" in path or "vdso" in path), "kernel/syscalls"),
    (lambda fn, path: "vdso" in path, "kernel/syscalls"),
    (lambda fn, path: "orjson" in path, "JSON"),
    (lambda fn, path: fn.startswith(("ev_", "epoll_poll")) or "corecext" in path or "libev" in path, "event-loop hub"),
    (lambda fn, path: "greenlet" in path or fn.startswith("g_switch"), "event-loop hub"),
    (lambda fn, path: "/gevent/" in path, "event-loop hub"),
    (lambda fn, path: "geventhttpclient" in path or fn.startswith("llhttp"), "HTTP"),
)


def parse_frame(frame: str) -> tuple[str, str]:
    """py-spy's ``function (file:line)`` as ``(function, file)``; a frame it cannot parse as ``(frame, "")``."""
    found = _FRAME.match(frame.strip())
    return (found["function"], found["file"]) if found else (frame.strip(), "")


def frame_category(frame: str) -> str | None:
    """The category of one frame, or None when it says nothing (the interpreter, libc's memcpy, ...).
    Python files match by path parts, with or without py-spy's ``--full-filenames``
    (``/root/.../loadtests/client/sse.py`` and ``loadtests/client/sse.py`` alike)."""
    function, path = parse_frame(frame)
    path = "/" + path.replace("\\", "/").lstrip("/")
    name = function.rsplit(".", 1)[-1]
    for suffix, (by_name, default) in FUNCTION_CATEGORIES.items():
        if path.endswith("/" + suffix):
            return by_name.get(name, default)
    python = path.endswith(".py") or path.startswith("/<frozen")
    if not python:
        for test, category in NATIVE_CATEGORIES:
            if test(name, path):
                return category
    for part, category in FILE_CATEGORIES:
        if ("/" + part.lstrip("/")) in path:
            return category
    return None


def is_gc(frame: str) -> bool:
    function, path = parse_frame(frame)
    return function in GC_FUNCTIONS and ("libpython" in path or "gcmodule" in path or "python" in path)


def samples(raw_stacks: str) -> Iterable[tuple[list[str], int]]:
    """py-spy's raw output: each line ``root;...;leaf COUNT`` as (frames root first, count)."""
    for line in raw_stacks.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


LOCK_WAITS = frozenset(
    [
        "PyThread_acquire_lock_timed",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "__futex_abstimed_wait_common",
        "do_futex_wait",
    ]
)
BLOCKING_WAITS = {
    "epoll_wait": "epoll_poll",  # libev's poll, the hub waiting for anything to happen
    "epoll_pwait": "epoll_poll",
    "poll": "internal_select",  # a socket with a timeout, waiting in a thread of its own
    "ppoll": "internal_select",
}
WAITING = "waiting"
"""Not a category: a thread blocked in a wait (the hub's epoll, a lock, a socket's poll) that py-spy's
idle check counted active (its native mode does); left out as idle samples are."""


def is_waiting(frames: list[str]) -> bool:
    """True when the stack's leaf (its innermost named frame) is a blocking wait: a lock or condition,
    libev's ``epoll_wait`` or a socket's ``poll`` (never the harness's own ``epoll.poll(0)``)."""
    named = [parse_frame(frame)[0] for frame in frames if not frame.startswith("0x")]
    if not named:
        return False
    leaf = named[-1]
    if leaf in LOCK_WAITS:
        return True
    caller = BLOCKING_WAITS.get(leaf)
    return caller is not None and len(named) > 1 and named[-2] == caller


def sample_counts(raw_stacks: str) -> Counter[str]:
    """Samples per category: ``WAITING`` for a blocking wait, GC if a collection is anywhere on the
    stack, else the innermost frame's category that has one, else "other"."""
    counts: Counter[str] = Counter()
    for frames, count in samples(raw_stacks):
        counts[sample_category(frames)] += count
    return counts


def sample_category(frames: list[str]) -> str:
    """One sample's category (or ``WAITING``), its frames root first."""
    if is_waiting(frames):
        return WAITING
    if any(is_gc(frame) for frame in frames):
        return "GC"
    return next((c for frame in reversed(frames) if (c := frame_category(frame)) is not None), "other")


def categorize(raw_stacks: str) -> dict[str, float]:
    """Each category's share of the (non-idle, non-waiting) samples in py-spy's raw output, every
    category present (0.0 when none), summing to 1 (all 0.0 for no samples)."""
    counts = sample_counts(raw_stacks)
    total = sum(counts[category] for category in CATEGORIES)
    return {category: (counts[category] / total if total else 0.0) for category in CATEGORIES}


# --- the table ---------------------------------------------------------------------------------------

UNSAMPLED = "kernel, unsampled"


def breakdown_us(shares: dict[str, float], cpu_us_per_frame: float, stime_share: float) -> dict[str, float]:
    """µs per frame per category: the kernel time no stack shows (``stime_share`` less the sampled
    syscalls' share, at least 0) first, the categories sharing the rest by their sample shares."""
    unsampled = max(0.0, stime_share - shares.get("kernel/syscalls", 0.0))
    rest = cpu_us_per_frame * (1 - unsampled)
    figures = {category: share * rest for category, share in shares.items()}
    figures[UNSAMPLED] = cpu_us_per_frame * unsampled
    return figures


def print_breakdown(
    profile: Profile, cpu_us_per_frame: float, stime_share: float, profiled_frames: int, label: str
) -> dict[str, float]:
    """The table: per category its share of the samples and two µs per frame: ``scaled`` from
    ``cpu_us_per_frame`` and ``stime_share`` (a non-profiled round's streaming CPU per frame and
    system share), and ``sampled`` from the profiled round's own (its pauses make reads gather more
    frames, so per-wake costs shrink there while per-frame ones stay); returns the scaled figures."""
    counts = sample_counts(profile.stacks)
    total = sum(counts[category] for category in CATEGORIES)
    shares = categorize(profile.stacks)
    figures = breakdown_us(shares, cpu_us_per_frame, stime_share)
    window = profile.end - profile.start
    profiled_cpu = profile.utime_s + profile.stime_s
    sampled_us = profiled_cpu * 1e6 / profiled_frames if profiled_frames else float("nan")
    sampled = breakdown_us(shares, sampled_us, profile.stime_share)
    print(f"\nwhere the time goes ({label})")
    print(
        f"profiled round (not measured): pid {profile.pid}, {window:.1f} s; cpu {profiled_cpu:.2f} s "
        f"(system {profile.stime_share:.0%}) for {profiled_frames} frames sent: {sampled_us:.1f} us/frame while "
        f"sampled, against {cpu_us_per_frame:.1f} unprofiled (each sample pauses the process, so reads gather "
        "more frames: the difference is mostly per-wake cost)"
    )
    others = "; ".join(profile.others) or "none"
    print(f"other processes in its tree: {others}")
    print(
        f"samples: {total} active ({total / window if window else 0:.0f}/s of {RATE_HZ} asked), "
        f"{counts[WAITING]} left out as blocking waits; unprofiled system share {stime_share:.0%}"
    )
    print(f"{'category':<18} {'samples':>8} {'share':>6} {'us/frame scaled':>16} {'sampled':>8}")
    for category in sorted(CATEGORIES, key=lambda c: -shares[c]):
        print(
            f"{category:<18} {counts[category]:>8} {shares[category]:>6.1%} {figures[category]:>16.2f} "
            f"{sampled[category]:>8.2f}"
        )
    print(f"{UNSAMPLED:<18} {'':>8} {'':>6} {figures[UNSAMPLED]:>16.2f} {sampled[UNSAMPLED]:>8.2f}")
    print(f"{'total':<18} {total:>8} {'':>6} {cpu_us_per_frame:>16.2f} {sampled_us:>8.2f}")
    print("top functions (self time: the innermost frame with a name; share, us/frame scaled and sampled):")
    for (name, category), count in top_functions(profile.stacks, 15):
        share = count / total if total else 0.0
        scaled_us = share * (cpu_us_per_frame - figures[UNSAMPLED])
        print(
            f"  {share:>6.1%} {scaled_us:>6.2f} {share * (sampled_us - sampled[UNSAMPLED]):>6.2f}  {name}  [{category}]"
        )
    return figures


def top_functions(raw_stacks: str, limit: int) -> list[tuple[tuple[str, str], int]]:
    """The leaf frames (addresses without a symbol skipped up to a named frame) with the most active
    samples, each with its sample's category."""
    leaves: Counter[tuple[str, str]] = Counter()
    for frames, count in samples(raw_stacks):
        category = sample_category(frames)
        if category == WAITING:
            continue
        named = next((f for f in reversed(frames) if not f.startswith("0x")), frames[-1])
        function, path = parse_frame(named)
        leaves[(f"{function} ({path.rsplit('/', 1)[-1] if path else '?'})", category)] += count
    return leaves.most_common(limit)


# --- the micro-bench (B) -----------------------------------------------------------------------------

STAGES = ("parse", "JSON", "judge", "record")
READS = 10_000


def record_reads(url: str, payload: bytes, path: str, streams: int) -> list[list[tuple[bytes, float]]]:
    """``streams`` streams read at once with http.client: per stream, each body chunk and when it was
    read (CLOCK_MONOTONIC). Run under gevent's patching, the threads are greenlets."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(url)
    result: list[list[tuple[bytes, float]]] = [[] for _ in range(streams)]

    def one(index: int) -> None:
        connection = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        connection.request("POST", path, body=payload, headers=headers)
        response = connection.getresponse()
        try:
            while chunk := response.read1(65536):
                result[index].append((chunk, time.monotonic()))
        except (http.client.IncompleteRead, OSError):
            pass  # a stream the server cut (an injected fault): what came before it is the stream's
        connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


def replay(streams: list[list[tuple[bytes, float]]], upto: str) -> tuple[float, int]:
    """Every read through the harness's per-frame code cut after stage ``upto``; (CPU s, frames)."""
    from collections import deque
    from types import SimpleNamespace

    from loadtests.client.outcome import RequestPlan, StreamTracker, decode_json
    from loadtests.client.sse import SSEParser
    from loadtests.load.users import RawBody
    from loadtests.record.recorder import Recorder

    recorder = Recorder()
    frames = 0
    began = time.process_time()
    for number, reads in enumerate(streams):
        parser = SSEParser()
        if upto in ("parse", "JSON"):
            for chunk, at in reads:
                for frame in parser.feed(chunk, at):
                    frames += 1
                    if upto == "JSON" and frame.data is not None and frame.data != "[DONE]":
                        decode_json(frame.data)
            continue
        tracker = StreamTracker(RequestPlan(f"r{number}", "peers", "chat"), 0.0)
        tracker.headers(200, 0.0, "text/event-stream")
        if upto == "judge":
            tracker.frames = deque(maxlen=0)  # type: ignore[assignment]  # judged, nothing kept
        body = RawBody(SimpleNamespace(), parser, tracker, reads[0][1] - 0.5 if reads else 0.0)
        for chunk, at in reads:
            if body.take(chunk, at - 0.00001, at):
                break
        if upto == "record":
            frames += len(tracker.frames)
            row = tracker.finish(reads[-1][1] - body._started if reads else 0.0)
            recorder.add(row, tracker.frames)
    return time.process_time() - began, frames


def stage_costs(streams: list[list[tuple[bytes, float]]], repeat: int) -> dict[str, float]:
    """µs per frame of each stage (parse, JSON, judge, record), each the difference of two cuts, best
    of ``repeat`` (the cuts alternate within each repeat)."""
    import gc

    best = dict.fromkeys(STAGES, float("inf"))
    frames = 1
    for _ in range(repeat):
        for stage in STAGES:
            gc.collect()
            took, counted = replay(streams, stage)
            frames = counted if stage == "record" else frames
            best[stage] = min(best[stage], took)
    per_frame = {stage: best[stage] * 1e6 / max(1, frames) for stage in STAGES}
    costs: dict[str, float] = {}
    previous = 0.0
    for stage in STAGES:
        costs[stage] = per_frame[stage] - previous
        previous = per_frame[stage]
    costs["total"] = previous
    return costs


def stages_main(repeat: int, quick: bool) -> int:
    """B on its own: a server, the reads recorded, the replay timed; prints µs per frame per stage."""
    import locust  # noqa: F401 - first: Locust patches the process for gevent, as in a real run

    return _stages(repeat, quick)


def _stages(repeat: int, quick: bool) -> int:
    import httpx
    from peers import FULL, MODEL, QUICK, project_env

    from loadtests.declare.workload import RequestMix, RequestSpec, ServerFacts
    from loadtests.services.stack import TargetServerProcess

    work = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="sse-soak-breakdown-") as tmp:
        server = TargetServerProcess.start(work.server_args(Path(tmp) / "trace.jsonl"), env=project_env())
        try:
            with httpx.Client(base_url=server.url) as client:
                mix = RequestMix([RequestSpec("peers", "chat", work.prompt_tokens, max_tokens=work.output_tokens)])
                request = mix.prepare(client, ServerFacts(MODEL)).requests[0]
            streams = record_reads(server.url, request.stream_payload(MODEL), request.path, work.concurrency)
        finally:
            server.stop()
    kept: list[list[tuple[bytes, float]]] = []
    reads = 0
    for stream in streams:
        if reads >= (1000 if quick else READS):
            break
        kept.append(stream)
        reads += len(stream)
    costs = stage_costs(kept, repeat)
    frames = sum(chunk.count(b"\n\n") for stream in kept for chunk, _ in stream)
    print(f"\nloop-free replay: {reads} reads of {len(kept)} streams ({frames} frames), best of {repeat}")
    print(f"{'stage':<8} {'us/frame':>9}")
    for stage in (*STAGES, "total"):
        print(f"{stage:<8} {costs[stage]:>9.2f}")
    return 0


# --- A: watched rounds (CPU only), then a profiled round -------------------------------------------


@dataclass
class Round:
    """One sse-soak round of the peers workload: its row (``bench/peers.py``), the window watched
    or profiled in its Locust process, and the server's trace."""

    row: Any
    window: Profile | None
    trace: Path

    @property
    def window_frames(self) -> int:
        if self.window is None or not self.trace.exists():
            return 0
        return frames_between(self.trace, self.window.start, self.window.end)


def sse_soak_round(work: Any, workdir: Path, py_spy: Path | None) -> Round:
    """An sse-soak round of ``bench/peers.py``; while it streams, its Locust process's CPU is watched
    (psutil, nothing attached) or, given ``py_spy``, sampled."""
    from peers import run_sse_soak

    seconds = max(1.0, work.duration_s - SETTLE_S - TAIL_S)
    workdir.mkdir(parents=True)
    trace = workdir / "sse-soak" / "trace.jsonl"
    marker = str(workdir / "sse-soak" / "peers_locustfile.py")
    with ProfileWhenStreaming(py_spy, trace, marker, seconds, workdir / "py-spy.txt", timeout_s=120) as watcher:
        row = run_sse_soak(work, workdir / "sse-soak")
    return Round(row, watcher.profile, trace)


def frames_between(trace: Path, start: float, end: float) -> int:
    """Frames the server sent between two CLOCK_MONOTONIC times (its trace's ``t``)."""
    count = 0
    with trace.open() as lines:
        for line in lines:
            try:
                if start <= json.loads(line)["t"] <= end:
                    count += 1
            except (ValueError, KeyError):
                continue
    return count


def measured_round(work: Any, workdir: Path) -> tuple[float, float] | None:
    """A non-profiled round: (streaming CPU µs per frame as ``bench/peers.py`` counts it, the Locust
    process's system share in the watched window); None when the round failed."""
    watched = sse_soak_round(work, workdir, None)
    row = watched.row
    if not row.stream_frames or row.note or watched.window is None or watched.window.error:
        why = row.note or (watched.window.error if watched.window else "") or "no frames"
        print(f"sse-soak's measured round failed: {why}")
        return None
    per_frame = row.cpu_stream_s * 1e6 / row.stream_frames
    window = watched.window
    frames = watched.window_frames
    own = (window.utime_s + window.stime_s) * 1e6 / frames if frames else float("nan")
    print(
        f"measured round: {row.stream_frames} frames, stream cpu {row.cpu_stream_s:.2f} s, {per_frame:.1f} us/frame; "
        f"Locust process alone in {window.end - window.start:.0f} s of streaming: {own:.1f} us/frame, "
        f"system {window.stime_share:.0%}"
    )
    return per_frame, window.stime_share


def profile_round(
    work: Any, workdir: Path, cpu_us_per_frame: float | None, stime_share: float | None, label: str
) -> bool:
    """One profiled sse-soak round, its breakdown printed against ``cpu_us_per_frame`` and
    ``stime_share`` (a measured round is run first for whichever is None); False when nothing was
    recorded. py-spy installed if missing."""
    try:
        py_spy = ensure_py_spy()
    except ToolInstallError as exc:
        print(f"\nwhere the time goes: not measured: {exc}")
        return False
    if cpu_us_per_frame is None or stime_share is None:
        measured = measured_round(work, workdir / "measured")
        if measured is None:
            return False
        cpu_us_per_frame = measured[0] if cpu_us_per_frame is None else cpu_us_per_frame
        stime_share = measured[1] if stime_share is None else stime_share
    profiled = sse_soak_round(work, workdir / "profiled", py_spy)
    profile = profiled.window
    if profile is None or profile.error or not profile.stacks:
        why = "no profile" if profile is None else (profile.error or "no samples")
        print(f"\nwhere the time goes ({label}): not measured: {why}")
        return False
    print_breakdown(profile, cpu_us_per_frame, stime_share, profiled.window_frames, label)
    return True


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the peers' quick workload (4 streams for 5 s)")
    parser.add_argument("--stages", action="store_true", help="the loop-free micro-bench only")
    parser.add_argument("--repeat", type=int, default=5, help="micro-bench: best of this many replays per stage")
    parser.add_argument("--rounds", type=int, default=1, help="measured rounds (their median CPU per frame)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (py-spy's raw stacks)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.stages:
        return stages_main(args.repeat, args.quick)
    if args.rounds < 1 or args.repeat < 1:
        print("breakdown.py: --rounds and --repeat must be at least 1", file=sys.stderr)
        return 2
    from peers import FULL, QUICK

    work = QUICK if args.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="sse-soak-breakdown-"))
    measured = [measured_round(work, workdir / f"measured-{number}") for number in range(1, args.rounds + 1)]
    done = [figures for figures in measured if figures is not None]
    ok = len(done) == len(measured)
    if done:
        per_frame = statistics.median(figures[0] for figures in done)
        stime_share = statistics.median(figures[1] for figures in done)
        label = f"sse-soak, peers workload; median of {len(done)} measured round(s)"
        ok = profile_round(work, workdir, per_frame, stime_share, label) and ok
    command = [sys.executable, __file__, "--stages", "--repeat", str(args.repeat), *(["--quick"] if args.quick else [])]
    stages = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    if args.keep:
        print(f"work directory: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok and stages.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
