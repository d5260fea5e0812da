"""Memory of the harness and of the bundled server, sampled while a run goes.

The harness is the Locust process and its worker processes; the services it started (target
server, embedded proxy, a real proxy) are children of Locust too but are not the harness, so their
process trees are counted apart, and the child judging the live metrics' gates
(``loadtests.run.live_gates``: it reads the whole run, as the soak's own judging does) not at
all. Samples are appended to ``resources.csv`` in the run directory (``t`` in epoch seconds, RSS in
MiB) and flushed at once, so a killed run keeps them.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from loadtests.run.live_gates import MODULE as LIVE_JUDGE

COLUMNS = ("t", "harness_rss_mb", "server_rss_mb")
MIB = 1024 * 1024


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _judging(process: psutil.Process) -> bool:
    """The live metrics' gate judge (``loadtests.run.live_gates``)."""
    try:
        return LIVE_JUDGE in process.cmdline()
    except psutil.Error:
        return False


def _rss(processes: list[psutil.Process]) -> float | None:
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total / MIB if processes else None


class ResourceSampler:
    def __init__(self, harness_pid: int) -> None:
        self.harness_pid = harness_pid
        self.server_pid: int | None = None
        self.service_pids: set[int] = set()
        self.path: Path | None = None

    def sample(self) -> tuple[float, float | None, float | None]:
        services = {p.pid for pid in self.service_pids for p in _tree(pid)}
        harness = [p for p in _tree(self.harness_pid) if p.pid not in services and not _judging(p)]
        server = _tree(self.server_pid) if self.server_pid else []
        row = (time.time(), _rss(harness), _rss(server))
        if self.path is not None:
            new = not self.path.exists()
            with self.path.open("a") as out:
                if new:
                    out.write(",".join(COLUMNS) + "\n")
                out.write(",".join("" if v is None else f"{v:.3f}" for v in row) + "\n")
        return row
