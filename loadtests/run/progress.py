"""Live figures of a run in progress, read from its run directory, and the progress line.

The run writes a parquet part every flush interval; ``RunProgress.refresh()`` reads only the parts
it has not seen, so a refresh costs the new rows, not the run. The line is refreshed in place on
a terminal and printed as plain periodic lines otherwise (CI logs keep every one).
"""

from __future__ import annotations

import collections
import sys
from dataclasses import dataclass, field
from typing import TextIO

import pyarrow.parquet as pq

from loadtests.client.outcome import Outcome
from loadtests.record import figures
from loadtests.record.run_dir import RunDir

_COLUMNS = ["outcome", "status", "error_code", "keepalive_frames"]


@dataclass
class RunProgress:
    run_dir: RunDir
    requests: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    http_500: int = 0
    inband_500: int = 0
    keepalive_frames: int = 0
    _seen: set[str] = field(default_factory=set)

    def refresh(self) -> None:
        parts = self.run_dir.requests
        for part in sorted(parts.glob("*.parquet")) if parts.is_dir() else ():
            if part.name in self._seen:
                continue
            table = pq.read_table(part, columns=_COLUMNS).to_pandas()
            self._seen.add(part.name)
            self.requests += len(table)
            self.outcomes.update(table["outcome"])
            http_500, inband_500 = figures.count_500s(table)
            self.http_500 += http_500
            self.inband_500 += inband_500
            self.keepalive_frames += int(table["keepalive_frames"].sum())

    def line(self, elapsed_s: float, remaining_s: float, harness_mb: float | None, server_mb: float | None) -> str:
        count = self.outcomes.get
        return (
            f"soak {_clock(elapsed_s)} elapsed, {_clock(remaining_s)} left | {self.requests} requests: "
            f"{count(Outcome.OK, 0)} ok, {count(Outcome.REJECTED, 0)} rejected, {self.http_500} HTTP 500, "
            f"{self.inband_500} in-band 500, {count(Outcome.CUT, 0)} cut, {count(Outcome.TIMEOUT, 0)} timeout | "
            f"{self.keepalive_frames} keep-alives | harness {_mb(harness_mb)}, server {_mb(server_mb)}"
        )


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MiB"


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressPrinter:
    """In place on a terminal (carriage return, clear line), one line per call otherwise."""

    def __init__(self, stream: TextIO = sys.stdout) -> None:
        self.stream = stream
        self.in_place = stream.isatty()
        self._dirty = False

    def show(self, line: str) -> None:
        if self.in_place:
            self.stream.write("\r\x1b[2K" + line)
            self._dirty = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def print(self, line: str) -> None:
        """A permanent line (not overwritten by the next refresh)."""
        if self._dirty:
            self.stream.write("\n")
            self._dirty = False
        self.stream.write(line + "\n")
        self.stream.flush()
