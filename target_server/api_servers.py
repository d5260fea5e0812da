"""``--api-server-count N``: N server processes on one listening socket, as vLLM's API servers.

The parent binds the socket (so ``--port 0`` picks one port for all) and starts N children,
``python -m target_server`` with its own arguments and ``CHILD_ENV`` naming each child's index and
the descriptor of the socket it inherits. Every child is a whole server with its part of the
settings (``share``), accepting on that socket; the kernel hands each connection to one of them.
The parent serves nothing: it prints the one ready line once every child has printed its own, then
waits. Children print their ready lines to the parent, never to whoever started the parent. It
makes the temporary directory through which the children answer ``/metrics`` for the whole server
(``metrics.SharedMetrics``) and removes it once they are gone; killed outright, it leaves that to
the last child to stop.

Lifetimes, each child stopped by its own process id:

- The parent is asked to stop (SIGTERM, SIGINT, or EOF on its stdin lifeline, which SIGTERMs it):
  it SIGTERMs every child, SIGKILLs any still running ``GRACE_S`` later, reaps them, and returns.
- A child exits by itself: the parent stops the others the same way and exits 1.
- The parent is killed outright: every child's stdin is a pipe whose write end only the parent
  held, the kernel closes it, and the child's own lifeline (``lifeline.exit_when_stdin_closes``)
  stops it. Children run in their own session, so a terminal's Ctrl-C reaches only the parent.

Invariant: when ``supervise`` returns or exits, every child it started has exited and been reaped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from sse_soak_lifeline import GRACE_S, READY_PREFIX, announce_refusal, harness_environment, parse_refusal
from target_server.share import ProcessShare

CHILD_ENV = "TARGET_SERVER_API_SERVER"
"""Set in a child's environment to ``"INDEX COUNT FD METRICS_DIR"``; removed once read."""
POLL_S = 0.05
_STDOUT_LOCK = threading.Lock()


def inherited() -> tuple[ProcessShare, socket.socket] | None:
    """In a child: its share and the listening socket it inherited. None in any other process."""
    value = os.environ.pop(CHILD_ENV, None)
    if value is None:
        return None
    index, count, fd, metrics_dir = value.split(" ", 3)
    return ProcessShare(int(index), int(count), metrics_dir), socket.socket(fileno=int(fd))


@dataclass
class _Child:
    """One started child, and what its stdout said: ready, or why it would not start."""

    process: subprocess.Popen[str]
    ready: threading.Event = field(default_factory=threading.Event)
    refusal: str | None = None
    reader: threading.Thread | None = None

    def read_stdout(self, out: IO[str], lock: threading.Lock) -> None:
        """Take the ready line and any refusal; pass every later line on to the parent's stdout."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not self.ready.is_set() and line.startswith(READY_PREFIX):
                self.ready.set()
                continue
            if self.ready.is_set():
                with lock:
                    out.write(line)
                    out.flush()
            else:
                self.refusal = parse_refusal(line) or self.refusal

    def describe_exit(self, index: int) -> str:
        code = self.process.wait()
        said = f": {self.refusal}" if self.refusal else ""
        return f"api server {index} (pid {self.process.pid}) exited with {code}{said}"


def supervise(count: int, sock: socket.socket, argv: Sequence[str], ready_line: str) -> None:
    """Start ``count`` children serving ``sock`` with ``argv``, print ``ready_line`` once all are
    ready, and return once asked to stop and every child has been stopped; exit 1 if a child ends
    first."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    children: list[_Child] = []
    metrics_dir = tempfile.mkdtemp(prefix="target-server-metrics-")
    try:
        children = [_start(index, count, sock, argv, metrics_dir) for index in range(count)]
        sock.close()  # the children hold it now; with them all gone, connections are refused
        failure = _wait(children, stop, until_ready=True)
        if failure is None and not stop.is_set():
            print(ready_line, flush=True)
            failure = _wait(children, stop, until_ready=False)
    finally:
        _stop_all(children)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    if failure is not None:
        announce_refusal(failure)
        sys.exit(f"target-server: {failure}")


def _start(index: int, count: int, sock: socket.socket, argv: Sequence[str], metrics_dir: str) -> _Child:
    env = {**os.environ, **harness_environment(), CHILD_ENV: f"{index} {count} {sock.fileno()} {metrics_dir}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "target_server", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        pass_fds=(sock.fileno(),),
        start_new_session=True,
    )
    child = _Child(process)
    child.reader = threading.Thread(
        target=child.read_stdout, args=(sys.stdout, _STDOUT_LOCK), name=f"api-server-{index}", daemon=True
    )
    child.reader.start()
    return child


def _wait(children: list[_Child], stop: threading.Event, until_ready: bool) -> str | None:
    """Until every child is ready (``until_ready``) or the parent is asked to stop: None. A child
    that exits first: what it said."""
    while not stop.wait(POLL_S):
        for index, child in enumerate(children):
            if child.process.poll() is not None:
                if child.reader is not None:
                    child.reader.join(GRACE_S)  # its last lines, a refusal among them
                return child.describe_exit(index)
        if until_ready and all(child.ready.is_set() for child in children):
            return None
    return None


def _stop_all(children: list[_Child]) -> None:
    """SIGTERM each running child by its pid, SIGKILL those still running after ``GRACE_S``, reap all."""
    for child in children:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for child in children:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
        if child.reader is not None:
            child.reader.join(GRACE_S)
        for pipe in (child.process.stdin, child.process.stdout):
            if pipe is not None:
                pipe.close()
