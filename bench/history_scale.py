"""How long does the history of a year of nights take, and in how much memory?

Why this exists: a nightly job runs ``python -m loadtests history`` after every soak over every
night it kept, so the history must stay cheap as the nights pile up. This writes ``--nights``
synthetic nights (365 by default) over ``--series`` series (3: soak on bundled, soak on vllm, a
plain run through nginx), each a real run directory (``manifest.json``, ``summary.json`` written by
``Summary``, a soak's ``resources.csv``: ``tests/loadtests/synthetic_nights.py``), then runs the
history as the CLI does (``read_nights``, ``regressions``, ``write_history``, ``write_history_page``)
and prints the wall time of each phase (read, flags, tables, page; then the whole history again from
the history.parquet it wrote, as a nightly job that keeps only that file reads it), the peak memory
of a read, flags and page under tracemalloc (Python's allocations, pandas' and numpy's included;
timed apart, as tracing slows them), the process's peak RSS, and the size of each file written.

``--quick``: 40 nights over 2 series (seconds); the same figures.

Measured 2026-12-07 on the 2-core VM shared with other work (load 3-5), 365 nights over 3 series:

    read 0.32-0.76 s, flags 0.03-0.07 s, tables 0.01-0.04 s, page 0.06-0.12 s (the stand-in table
    of history_page at the time): 0.42-0.99 s in all, 1.2-2.7 ms a night; from history.parquet
    0.07-0.20 s; peak traced memory 2.7 MiB, process RSS 158 MiB (pandas and pyarrow loaded);
    history.parquet 59 KiB, history-baselines.parquet 66 KiB.
    --nights 3650: 3.9 s from the run directories, 0.29 s from history.parquet, 21 MiB traced.
    With the page of the hist-page branch (a trial merge), 365 nights: page 2.21 s, 2.54 s in all
    (7.0 ms a night), peak traced memory 53.9 MiB, RSS 258 MiB, history.html 440 KiB.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` and the test support importable
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from loadtests.report import history, history_page  # noqa: E402
from tests.loadtests.synthetic_nights import night_figures, write_night  # noqa: E402

SERIES: list[dict[str, Any]] = [
    {"scenario": "soak", "server": "bundled"},
    {"scenario": "soak", "server": "vllm"},
    {"scenario": "mixed_truncate", "server": "bundled", "proxy": "nginx", "soak": False},
]
QUICK = {"nights": 40, "series": 2}

T = TypeVar("T")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK} unless given")
    parser.add_argument("--nights", type=int, default=365, help="nights written, over every series (default 365)")
    parser.add_argument("--series", type=int, default=3, choices=[1, 2, 3], help="series (default 3)")
    parser.add_argument("--dir", type=Path, default=None, help="where the nights go (default: a temporary directory)")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**QUICK)
    return parser.parse_args(argv)


def timed(label: str, phase: Callable[[], T], times: dict[str, float]) -> T:
    started = time.perf_counter()
    result = phase()
    times[label] = time.perf_counter() - started
    return result


def write_year(root: Path, nights: int, series: int) -> None:
    """``nights`` nights, one a day per series in turn, with one regression in the last series."""
    rng = np.random.default_rng(2026)
    start = dt.datetime(2025, 12, 1, 2, 0, tzinfo=dt.timezone.utc)
    for index in range(nights):
        figures = night_figures(rng)
        if index == nights - 1:
            figures["ttft_p99_s"] *= 1.6
        night = SERIES[index % series]
        when = start + dt.timedelta(days=index // series, minutes=index % series)
        write_night(root / "reports", when, figures, **night)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sse-soak-history-") as scratch:
        root = options.dir or Path(scratch)
        times: dict[str, float] = {}
        timed("write nights", lambda: write_year(root, options.nights, options.series), times)
        nights, left_out = timed("read", lambda: history.read_nights([root / "reports"]), times)
        baselines, flags, within = timed("flags", lambda: history.regressions(nights), times)
        found = history.History(nights, flags, left_out, baselines, within_timing_error=within)
        out = root / "history"
        timed("tables", lambda: history.write_history(found, out), times)
        timed("page", lambda: history_page.write_history_page(found, out / history.PAGE_FILE), times)
        carried = timed(  # what a nightly job reads each night before tonight's run: read, flags
            "carried", lambda: history.read_history([out / history.HISTORY_FILE]), times
        )
        tracemalloc.start()  # apart from the timed phases: tracing slows them down
        traced = history.read_history([root / "reports"])
        history_page.write_history_page(traced, Path(scratch) / "traced.html")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sizes = {name: (out / name).stat().st_size for name in sorted(p.name for p in out.iterdir())}
    print(f"nights: {len(nights)} in {nights['series'].nunique()} series, {len(flags)} regression(s), "
          f"{len(left_out)} left out; carried back: {len(carried.nights)} nights")  # fmt: skip
    for phase, seconds in times.items():
        print(f"{phase:>12}: {seconds:8.2f} s")
    total = sum(times[phase] for phase in ("read", "flags", "tables", "page"))
    print(f"history from the run directories: {total:.2f} s ({total / max(len(nights), 1) * 1000:.1f} ms a night)")
    print(f"history from history.parquet: {times['carried']:.2f} s")
    print(f"peak traced memory (read, flags, page): {peak / 2**20:.1f} MiB")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for name, size in sizes.items():
        print(f"{name}: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
