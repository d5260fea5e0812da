"""What do the live metrics (``--live-metrics-port``) cost the load generator?

Why this exists: timing is what the harness measures, so the live metrics put nothing on the load's
event loop per request or per frame: they count each batch of rows and frame records where the run
writer already converts it, in a thread of gevent's pool (``loadtests.record.live_metrics``). That
thread still shares the GIL with the loop. This benchmark puts numbers on both.

A) Counting. One batch of ``--requests`` streams of ``--frames`` frames each (tokens, keep-alives and
[DONE], made by ``StreamTracker`` as a run makes them) is counted by ``LiveFigures.observe_batch``
and written by ``RunWriter`` (its parquet parts: the work the writer thread does anyway), each
``--repeat`` times; then one scrape of the figures is rendered. Figures: microseconds per request
and nanoseconds per frame counted, the counting's share of the writing's, and one scrape's cost.
The loop's own cost per request is zero by construction: no call was added to it.

B) A whole run, before and after. ``scenarios/mixed_truncate.py`` headless with ``--users`` users for
``--seconds`` s, alternately without and with ``--live-metrics-port 0`` (scraped every second, as
a busy Prometheus would), ``--rounds`` times each. Figures per round: requests and frames recorded
per second, the harness's loop lag p99 and max while streams were open (lag.parquet); then the
medians and the ratio on/off. The 2-core machine's noise is about 10% (docs/benchmarks.md): a
ratio within it is no cost seen.

Exit status: 1 if a run failed or a figure could not be computed; else 0.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.client.outcome import RequestPlan, StreamTracker  # noqa: E402
from loadtests.client.sse import Frame  # noqa: E402
from loadtests.record.lag import while_streams_open  # noqa: E402
from loadtests.record.live_metrics import LiveFigures, RunLabels, _Collector  # noqa: E402
from loadtests.record.parts_writer import RunWriter  # noqa: E402
from loadtests.record.recorder import Recorder  # noqa: E402

TOKEN = '{"choices":[{"index":0,"delta":{"content":"a"}}]}'
LIVE_LINE = re.compile(r"^live metrics: (http://\S+/metrics)$", re.MULTILINE)
REPORT_LINE = re.compile(r"^report: (.+)$", re.MULTILINE)


def a_batch(requests: int, frames: int) -> dict[str, Any]:
    """``requests`` ok streams of ``frames`` frames: a keep-alive every tenth, [DONE] last."""
    recorder = Recorder()
    for index in range(requests):
        stream = StreamTracker(RequestPlan(f"{index:032x}", "chat:x", "chat"), 0.0, "local")
        stream.headers(200, 0.01, "text/event-stream")
        t = 0.01
        for number in range(frames - 1):
            t += 0.02
            if number % 10 == 9:
                stream.frame(Frame(t=t, nbytes=14, comments=["keep-alive"]), t)
            else:
                stream.frame(Frame(t=t, nbytes=60, data=TOKEN), t)
        stream.frame(Frame(t=t, nbytes=14, data="[DONE]"), t)
        recorder.add(stream.finish(t), stream.frames)
    return {**recorder.take_batch(), "worker": "local", "lag": None}


def counting(requests: int, frames: int, repeat: int) -> bool:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    observe, write = [], []
    with tempfile.TemporaryDirectory(prefix="live-metrics-bench-") as scratch:
        for round_number in range(repeat):
            figures = LiveFigures()
            figures.begin(RunLabels("bench", "http://127.0.0.1:1", "none", scratch))
            batch = a_batch(requests, frames)
            began = time.process_time()
            figures.observe_batch(batch)
            observe.append(time.process_time() - began)
            writer = RunWriter(Path(scratch) / f"run-{round_number}")
            began = time.process_time()
            writer._write_batch(batch)  # the writer thread's work for this batch, in place
            write.append(time.process_time() - began)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(figures))
        began = time.process_time()
        body = generate_latest(registry)
        scrape_s = time.process_time() - began
    counted, written = statistics.median(observe), statistics.median(write)
    print(f"batch: {requests} requests x {frames} frames, {repeat} times")
    per_frame_ns = counted * 1e9 / (requests * frames)
    print(f"counting: {counted * 1e6 / requests:.1f} us per request, {per_frame_ns:.0f} ns per frame")
    print(f"writing the same batch: {written * 1e6 / requests:.1f} us per request")
    print(f"counting / writing: {counted / written:.2f}")
    print(f"one scrape: {scrape_s * 1e3:.2f} ms of CPU, {len(body)} bytes")
    print("on the loop: 0 calls per request or frame (counted in the writer's thread)")
    return True


def one_run(scratch: Path, users: int, seconds: int, live: bool) -> dict[str, float] | None:
    report_dir = scratch / ("on" if live else "off")
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "scenarios" / "mixed_truncate.py"), "--headless",
        "-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--report-dir", str(report_dir), "--only-summary",
    ]  # fmt: skip
    if live:
        command += ["--live-metrics-port", "0"]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
    )
    assert process.stdout is not None
    output: list[str] = []
    scraper: threading.Thread | None = None
    stop = threading.Event()
    scrapes = [0]
    for line in process.stdout:
        output.append(line)
        found = LIVE_LINE.match(line.strip())
        if found and scraper is None:
            scraper = threading.Thread(target=scrape_every_second, args=(found[1], stop, scrapes), daemon=True)
            scraper.start()
    process.wait()
    stop.set()
    if scraper is not None:
        scraper.join(10)
    text = "".join(output)
    report = REPORT_LINE.search(text)
    if process.returncode not in (0, 1) or report is None:
        print(text[-3000:])
        return None
    run_dir = Path(report[1])
    requests = pd.read_parquet(run_dir / "requests.parquet")
    frames = requests["data_frames"].sum() + requests["keepalive_frames"].fillna(0).sum()
    lag = while_streams_open(pd.read_parquet(run_dir / "lag.parquet"), requests)["lag_s"]
    return {
        "requests_s": len(requests) / seconds,
        "frames_s": float(frames) / seconds,
        "lag_p99_ms": float(lag.quantile(0.99)) * 1e3,
        "lag_max_ms": float(lag.max()) * 1e3,
        "scrapes": float(scrapes[0]),
    }


def scrape_every_second(url: str, stop: threading.Event, scrapes: list[int]) -> None:
    with httpx.Client(timeout=10, trust_env=False) as client:
        while not stop.wait(1.0):
            try:
                client.get(url)
                scrapes[0] += 1
            except httpx.HTTPError:
                return  # the run ended


def whole_runs(users: int, seconds: int, rounds: int) -> bool:
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    print(f"{'round':>5} {'live':>4} {'req/s':>8} {'frames/s':>9} {'lag p99 ms':>10} {'lag max ms':>10} {'scrapes':>7}")
    with tempfile.TemporaryDirectory(prefix="live-metrics-bench-") as scratch:
        for round_number in range(1, rounds + 1):
            for live in (False, True):
                figures = one_run(Path(scratch), users, seconds, live)
                if figures is None:
                    return False
                results[live].append(figures)
                print(
                    f"{round_number:>5} {'on' if live else 'off':>4} {figures['requests_s']:>8.1f} "
                    f"{figures['frames_s']:>9.0f} {figures['lag_p99_ms']:>10.2f} {figures['lag_max_ms']:>10.1f} "
                    f"{figures['scrapes']:>7.0f}"
                )
    for name in ("requests_s", "frames_s", "lag_p99_ms"):
        off = statistics.median(r[name] for r in results[False])
        on = statistics.median(r[name] for r in results[True])
        print(f"median {name}: off {off:.2f}, on {on:.2f}, on/off {on / off:.3f}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small figures, one round of 3 s: the bench runs")
    options = parser.parse_args()
    if options.quick:
        options.requests, options.repeat, options.users, options.seconds, options.rounds = 50, 2, 4, 3, 1
    ok = counting(options.requests, options.frames, options.repeat)
    ok = whole_runs(options.users, options.seconds, options.rounds) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
