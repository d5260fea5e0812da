"""CPU per frame of the raw user's hot path alone, loop-free: the golden reads replayed.

Why this exists: issue 38 asks for less CPU per frame above the floor with nothing recorded changed.
The golden reads (``tests/loadtests/load/golden_reads.py``: real receives of a faulted run of the
bundled server, with their kernel stamps) are replayed through ``RawBody.take_read`` (HTTP parser,
SSE parser, tracker), as the body mux hands them over, without sockets, hub or Locust; the same
replay that ``test_golden_reads.py`` checks for identical records. Stages, each timed apart:

- ``read``: every body read of the 2xx streams read 4 KiB at a time (a frame a read, or several)
  through ``take_read`` (per frame: what a change to ``raw_body``, ``response_end``, ``sse`` or
  ``outcome`` saves);
- ``split``: the same for the streams read 23 or 61 bytes at a time (frames split mid-way: the
  slow paths, which must not get slower);
- ``record``: ``tracker.finish`` and ``Recorder.add`` of each stream's row and frames;
- ``stamp``: ``recv_stamped`` of a 100-byte datagram on stamped loopback UDP (per read; the
  datagrams are sent before the clock starts).

Each stage is timed as the fastest of ``--repeat`` batches (the whole fixture each; the state each
batch needs is built untimed): on a shared machine the fastest is the one least disturbed.
``--against REV`` measures another commit too: its tree is exported (``git archive``) and this
script runs under each tree in turn, alternating, ``--rounds`` times; the figures are the medians
of the rounds and the ratio B/A. Absolute µs move with the machine's
load; the ratio within one run is the figure to read.

Measured 2026-12-07 on the shared 2-core machine (other engineers' tests running: single rounds
moved by up to 2x, the medians by about 5%), each change against the commit before it, µs per
frame of ``read`` (median of alternating rounds; B/A the median of the rounds' ratios):

=====================================================  ==========  ======  ==============
change (issue 38, point 3)                             before      after   B/A
=====================================================  ==========  ======  ==============
tracker: no property calls, token-chunk shortcut       5.93        5.19    0.865 (6 rounds)
SSE: one whole data frame without split/count          5.12        4.86    0.942 (6 rounds)
HTTP: reads straight to llhttp, chunks by ``extend``   5.17        4.44    0.881 (10 rounds);
                                                                           split 36.6 -> 20.2
all three, against the golden-reads commit             5.59        4.46    0.781 (10 rounds);
                                                                           split 0.662
=====================================================  ==========  ======  ==============

Tried and not kept: one wall-clock offset per 5 ms in ``recv_stamped`` (stamp stage 3.57 vs
3.58 µs a read: ``time.time()`` is a vDSO call); ``recvmsg_into`` a reused buffer (1.94 µs a
read against ``recvmsg``'s 1.70: the slice and copy cost more than the allocation saved).
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # the golden reads' loader (tests/); a tree on PYTHONPATH comes first


def _prepared(streams: list[dict[str, Any]]) -> list[tuple[Any, Any, list[tuple[bytes, float | None, float]], Any]]:
    """Per 2xx stream: (RawBody, tracker, body reads, finish time), the head already parsed."""
    from loadtests.client.outcome import RequestPlan, StreamTracker
    from loadtests.client.raw_body import RawBody, take_buffered
    from loadtests.client.sse import SSEParser
    from tests.loadtests.load.golden_reads import MAX_LINE_BYTES, response_for

    prepared = []
    for stream in streams:
        raw = response_for(base64.b64decode(stream["head"]))
        if not 200 <= raw.get_code() < 300:
            continue
        tracker = StreamTracker(RequestPlan(**stream["plan"]), stream["start_time"])
        tracker.headers(raw.get_code(), stream["head_read_at"] - stream["started"], "text/event-stream")
        body = RawBody(raw, SSEParser(MAX_LINE_BYTES), tracker, stream["started"])
        if raw._body_buffer:
            body.take(take_buffered(raw), None, stream["head_read_at"])
        reads = [(base64.b64decode(data), arrived, read_at) for data, arrived, read_at in stream["reads"]]
        prepared.append((body, tracker, reads, stream["finish_at"] - stream["started"]))
    return prepared


def _replay(body: Any, reads: list[tuple[bytes, float | None, float]], path: str = "python") -> None:
    """The body's reads through ``take_read`` (``path`` "compiled": the compiled reader's,
    ``loadtests.client._fastread.Reader``) until it says the body needs no more (or ends cut)."""
    from geventhttpclient.response import HTTPParseError

    take_read = body.take_read
    if path == "compiled":
        from loadtests.client import _fastread  # built by pip install -e .

        take_read = _fastread.Reader(body).take_read
    try:
        for data, arrived, read_at in reads:
            if take_read(data, arrived, read_at):
                return
    except (HTTPParseError, OSError):  # cut mid-body
        return


def _read_batch(streams: list[dict[str, Any]], path: str = "python") -> tuple[float, int]:
    """Seconds to replay every body read of the fixture's 2xx streams through ``path``, and the
    frames recorded."""
    prepared = _prepared(streams)
    clock = time.perf_counter
    started = clock()
    for _body, _tracker, reads, _end in prepared:
        _replay(_body, reads, path)
    elapsed = clock() - started
    return elapsed, sum(len(tracker.frames) for _, tracker, _, _ in prepared)


def _record_batch(streams: list[dict[str, Any]]) -> tuple[float, int]:
    """Seconds to finish every 2xx stream and add its row and frames to a recorder."""
    from loadtests.record.recorder import Recorder

    prepared = _prepared(streams)
    for body, _tracker, reads, _end in prepared:
        _replay(body, reads)
    recorder = Recorder()
    clock = time.perf_counter
    started = clock()
    for _body, tracker, _reads, end in prepared:
        recorder.add(tracker.finish(end), tracker.frames)
    elapsed = clock() - started
    return elapsed, sum(len(tracker.frames) for _, tracker, _, _ in prepared)


def _stamp_batch(reads: int = 100) -> tuple[float, int]:
    """Seconds for ``reads`` stamped receives of 100-byte datagrams on loopback UDP, sent before
    the clock starts (so only the receive and its stamp are timed)."""
    from loadtests.client.kernel_stamps import keep_kernel_stamping_on, recv_stamped, stamp_arrivals

    keep_kernel_stamping_on()
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ours,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as theirs,
    ):
        ours.bind(("127.0.0.1", 0))
        ours.settimeout(5.0)  # a datagram the kernel dropped fails the batch, never hangs it
        stamp_arrivals(ours)
        theirs.connect(ours.getsockname())
        payload = b"x" * 100
        for _ in range(reads):
            theirs.send(payload)
        clock = time.perf_counter
        started = clock()
        for _ in range(reads):
            recv_stamped(ours, 4096)
        return clock() - started, reads


def measure(repeat: int, paths: tuple[str, ...] = ("python",)) -> dict[str, float]:
    """µs per frame of each stage under the code on ``sys.path``: the fastest of ``repeat`` batches;
    ``read`` and ``split`` once per read path (``read:compiled``: through the compiled reader)."""
    from tests.loadtests.load.golden_reads import load

    streams = load()
    figures = {}
    whole = [stream for stream in streams if stream["shape"][0] >= 4096]
    split = [stream for stream in streams if stream["shape"][0] < 4096]
    stages: list[tuple[str, Callable[[], tuple[float, int]]]] = []
    for path in paths:
        suffix = "" if path == "python" else f":{path}"
        stages += [
            (f"read{suffix}", partial(_read_batch, whole, path)),
            (f"split{suffix}", partial(_read_batch, split, path)),
        ]
    stages += [("record", partial(_record_batch, streams)), ("stamp", _stamp_batch)]
    for stage, batch in stages:
        batch()  # warm
        per_unit = []
        for _ in range(repeat):
            elapsed, units = batch()
            per_unit.append(elapsed / units * 1e6)
        figures[stage] = min(per_unit)
    gc.collect()
    return figures


def _export(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    tree = into / rev.replace("/", "_")
    tree.mkdir()
    archive_path = into / "tree.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _run_under(tree: Path, repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--json", "--repeat", str(repeat)]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True, timeout=600, cwd=tree)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=40, help="batches per stage (median taken)")
    parser.add_argument("--against", help="another commit: alternate its tree (A) and this one (B)")
    parser.add_argument("--rounds", type=int, default=5, help="with --against: alternating rounds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON (one run)")
    parser.add_argument("--quick", action="store_true", help="a few batches: checks that the bench runs")
    parser.add_argument(
        "--path",
        default="python",
        help="read paths, comma-separated: python (RawBody.take_read), compiled (_fastread.Reader); "
        "with both, the compiled/python ratio of read and split",
    )
    args = parser.parse_args()
    repeat = 3 if args.quick else args.repeat
    paths = tuple(args.path.split(","))
    if not args.against:
        figures = measure(repeat, paths)
        if args.json:
            print(json.dumps(figures))
        else:
            print("  ".join(f"{stage} {value:.2f} µs" for stage, value in figures.items()))
            if "python" in paths and "compiled" in paths:
                compared = (
                    f"{stage} {figures[stage + ':compiled'] / figures[stage]:.3f}" for stage in ("read", "split")
                )
                print("compiled/python: " + "  ".join(compared))
        return
    with tempfile.TemporaryDirectory(prefix="hot_path_") as scratch:
        trees = {"A": _export(args.against, Path(scratch)), "B": ROOT}
        rounds: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
        for number in range(1 if args.quick else args.rounds):
            for side in ("A", "B") if number % 2 == 0 else ("B", "A"):
                rounds[side].append(_run_under(trees[side], repeat))
            last_a, last_b = rounds["A"][-1], rounds["B"][-1]
            steps = "  ".join(f"{s} {last_a[s]:.2f}->{last_b[s]:.2f}" for s in last_a)
            print(f"round {number + 1}: {steps}", flush=True)
    print(f"A = {args.against}, B = working tree; µs per frame (stamp: per read), median of rounds:")
    for stage in rounds["A"][0]:
        a = statistics.median(r[stage] for r in rounds["A"])
        b = statistics.median(r[stage] for r in rounds["B"])
        ratios = [rb[stage] / ra[stage] for ra, rb in zip(rounds["A"], rounds["B"], strict=True)]
        print(f"  {stage:7s} A {a:6.2f}  B {b:6.2f}  saved {a - b:+.2f}  B/A {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
