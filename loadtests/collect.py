"""Getting every request row and frame record to the one process that writes the run.

Standalone, a greenlet writes the users' recorder to the run directory every ``flush_interval``
seconds. Distributed (``--processes N`` or ``--master`` plus ``--worker``s), each worker ships
its recorder as a ``sse_soak_batch`` message on the same cadence (plain lists: msgpack-safe) and
the master writes each batch as it arrives. At the end of a test the master asks every worker
for a final batch (``sse_soak_flush``): the worker stops its users, so streams still running are
recorded as ``stopped``, and answers with what is left, marked final. The master waits for every
worker's final batch (bounded) before Locust tells the workers to quit, so the last batches are
not lost to Locust's half-second quit grace. Invariant: a row reaches the run directory once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust.runners import MasterRunner, WorkerRunner

from loadtests.run_state import run_state
from loadtests.run_writer import RunWriter

BATCH_MESSAGE = "sse_soak_batch"
FLUSH_MESSAGE = "sse_soak_flush"
FINAL_BATCH_TIMEOUT_S = 30.0
logger = logging.getLogger(__name__)


class Collector:
    """One per process; ``start()`` picks the role from the environment's runner."""

    def __init__(self, environment: Any, writer: RunWriter | None, flush_interval: float) -> None:
        self.environment = environment
        self.writer = writer
        self.flush_interval = flush_interval
        self.final_from: set[str] = set()
        self._greenlet: gevent.Greenlet | None = None

    @property
    def runner(self) -> Any:
        return self.environment.runner

    def start(self) -> None:
        if isinstance(self.runner, WorkerRunner):
            self.runner.register_message(FLUSH_MESSAGE, self._on_flush_request)
            self._greenlet = gevent.spawn(self._every_interval, self._ship)
        elif isinstance(self.runner, MasterRunner):
            self.runner.register_message(BATCH_MESSAGE, self._on_batch)
            self.environment.events.test_stop.add_listener(self._collect_final_batches)
        elif self.runner is not None:
            self._greenlet = gevent.spawn(self._every_interval, self.write_local)

    def _every_interval(self, action: Any) -> None:
        while True:
            gevent.sleep(self.flush_interval)
            action()

    # -- standalone ---------------------------------------------------------------------------
    def write_local(self) -> None:
        """Write what this process's users recorded since the last write."""
        assert self.writer is not None
        self.writer.write_batch(run_state(self.environment).recorder.take_batch())

    # -- worker -------------------------------------------------------------------------------
    def _ship(self, final: bool = False) -> None:
        batch = run_state(self.environment).recorder.take_batch()
        if final or batch["rows"] or batch["frames"]["request_id"]:
            self.runner.send_message(BATCH_MESSAGE, {**batch, "final": final})

    def _on_flush_request(self, environment: Any, msg: Any, **_: Any) -> None:
        if self.runner.user_count:
            self.runner.stop()  # streams still running are recorded as "stopped" as their users die
        self._ship(final=True)

    # -- master -------------------------------------------------------------------------------
    def _on_batch(self, environment: Any, msg: Any, **_: Any) -> None:
        assert self.writer is not None
        self.writer.write_batch(msg.data)
        if msg.data.get("final"):
            self.final_from.add(msg.node_id)

    def _collect_final_batches(self, environment: Any, **_: Any) -> None:
        workers = {client.id for client in self.runner.clients.all}
        self.final_from.clear()
        self.runner.send_message(FLUSH_MESSAGE, None)
        deadline = time.monotonic() + FINAL_BATCH_TIMEOUT_S + (environment.stop_timeout or 0)
        while not workers <= self.final_from and time.monotonic() < deadline:
            gevent.sleep(0.05)
        missing = workers - self.final_from
        if missing:
            logger.error("sse-soak: no final batch from %d worker(s) %s: their last streams are missing",
                         len(missing), sorted(missing))  # fmt: skip

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
