"""``tests/misbehaving_server.py`` started on a free loopback port and stopped, and the locustfile
that runs against it (both clients, both routes)."""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tests.misbehaving_server import MODES

ROOT = Path(__file__).resolve().parents[2]
READY_PREFIX = "listening on "
MISBEHAVING_LOCUSTFILE = ROOT / "tests" / "loadtests" / "misbehaving_locustfile.py"
WIRE_CLIENTS_READY = "both clients ready"
"""The line ``tests/loadtests/wire_clients.py`` prints once its users can send."""


@dataclass
class MisbehavingServer:
    process: subprocess.Popen[str]
    url: str
    log: Path

    def logged(self) -> pd.DataFrame:
        lines = self.log.read_text().splitlines()
        return pd.DataFrame([json.loads(line) for line in lines], columns=["request_id", "mode"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def start_misbehaving_server(
    log: Path, lifetime: float = 180.0, timeout: float = 30.0, modes: Iterable[str] = MODES, basic: str | None = None
) -> MisbehavingServer:
    """Start it on a free loopback port, answering with ``modes`` in turn, and wait for its ready
    line (it exits by itself after ``lifetime``)."""
    argv = [
        sys.executable,
        "-m",
        "tests.misbehaving_server",
        "--modes",
        ",".join(modes),
        "--log",
        str(log),
        "--lifetime",
        str(lifetime),
        *(() if basic is None else ("--basic", basic)),
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=ROOT)
    server = MisbehavingServer(process, "", log)
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while not server.url:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"the misbehaving server printed no ready line within {timeout:g} s")
                line = process.stdout.readline()
                if not line:
                    raise RuntimeError(f"the misbehaving server exited with {process.wait()} before it was ready")
                if line.startswith(READY_PREFIX):
                    server.url = line[len(READY_PREFIX) :].strip()
    except BaseException:
        server.stop()
        raise
    return server
