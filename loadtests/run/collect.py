"""Getting every request row and frame record of a test to the one process that writes it.

Standalone, a greenlet writes the users' recorder to the current test's run directory every
``flush_interval`` seconds. Distributed (``--processes N`` or ``--master`` plus ``--worker``s),
each worker ships its recorder as a ``sse_soak_batch`` message on the same cadence (plain lists:
msgpack-safe) and the master writes each batch as it arrives. A worker ships a final batch
whenever its own test stops (Locust's ``stop`` or ``quit`` from the master, or the worker itself
quitting on Ctrl-C/SIGTERM): its users are stopped first, so streams still running are recorded
as ``stopped``, and the batch goes out before the worker tells the master it stopped or quit.
Before the master judges a test (``finish()``) it asks every worker for a final batch
(``sse_soak_flush``, for stops the workers did not see) and waits, bounded, until every worker
that took part has sent one or is gone; a worker Locust marks missing (no heartbeat for about
3 s) is not waited for. Each process's lag samples (``loadtests.record.lag``) travel in its batches; the
master writes its own on the same cadence.

A ``--processes`` worker whose master died (SIGKILL, say) writes what it has not shipped, rows,
frames and lag, as parts of its own into the test's run directory (``TEST_RUN_DIR``), where
``python -m loadtests report`` finds them with the master's: the killed run is judged on every row.
It writes holding the directory's writer lock (``record.run_dir``), and only into a run not judged
yet: a worker that was frozen (SIGSTOP) until after its master judged the run, or a ``report``
judged it, writes its parts into the directory's ``late/``, kept apart and named by ``report``,
never merged into a judged run.

Every batch also says how many requests its worker started since the last one, so the master
knows, per worker, requests started against rows received: a worker killed mid-test leaves that
difference (``lost``, with when it was last heard from), and the test is judged with it
(``requests_completed`` unjudged, naming the worker and the count). Invariant: a row reaches the
run directory once, in the test it was recorded in.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import gevent
from locust.env import Environment
from locust.rpc.protocol import Message
from locust.runners import (
    STATE_CLEANUP,
    STATE_MISSING,
    STATE_RUNNING,
    STATE_SPAWNING,
    MasterRunner,
    Runner,
)

from loadtests.base.process_part import Part
from loadtests.client.outcome import Outcome
from loadtests.errors import RunInProgress, SummaryError
from loadtests.load.state import run_state
from loadtests.record.parts_writer import RunWriter
from loadtests.record.run_dir import RunDir
from loadtests.run.judging import previous_summary, unfinished

BATCH_MESSAGE = "sse_soak_batch"
FLUSH_MESSAGE = "sse_soak_flush"
FINAL_BATCH_TIMEOUT_S = 30.0
LATE_WRITE_WAIT_S = 30.0
"""How long a worker whose master died waits for the run directory's writer lock before it keeps
its parts apart (``late/``) rather than merge them into a run it cannot see is unjudged."""
TEST_RUN_DIR = "sse_soak_test_run_dir"
"""The option (set by the master, which Locust hands its workers with every spawn message) naming
the current test's run directory: where a worker whose master died writes what it could not send."""
ORPHANED_ROWS = "orphaned-rows-{worker}-{pid}.jsonl"
"""Where such a worker keeps the rows when that directory is out of its reach (not on its
filesystem, or unwritable), under the report root."""
logger = logging.getLogger(__name__)


@dataclass
class WorkerTally:
    """One worker's account in the current test: requests it said it started, rows that reached the
    master (open-loop tickets never sent are rows of no started request), and when it last sent."""

    name: str
    started: int = 0
    rows: int = 0
    last_heard: float = 0.0

    def count(self, batch: dict[str, Any]) -> None:
        self.started += int(batch.get("started") or 0)
        self.rows += sum(1 for row in batch["rows"] if row.get("outcome") != Outcome.NOT_SENT)
        self.last_heard = time.time()

    @property
    def missing(self) -> int:
        return max(0, self.started - self.rows)

    def as_dict(self) -> dict[str, Any]:
        heard = time.strftime("%H:%M:%S", time.gmtime(self.last_heard)) if self.last_heard else None
        return {"started": self.started, "rows": self.rows, "missing": self.missing, "last_heard": heard}


class Collector:
    """One per process, playing the ``part`` it is handed: a worker ships its rows, the master or a
    standalone process writes them into ``writer``, the current test's, set by ``begin()``."""

    def __init__(
        self, environment: Environment, flush_interval: float, refused: set[str] | None = None, part: Part = Part.LOCAL
    ) -> None:
        self.environment = environment
        self.part = part
        self.flush_interval = flush_interval
        self.refused = refused if refused is not None else set()
        """Master: workers refused as another run's (``record.membership``): none of their batches is written."""
        self.writer: RunWriter | None = None
        self.participants: set[str] = set()
        self.final_from: set[str] = set()
        self._orphaned = False
        self.forked_by: int | None = None
        """Worker of ``--processes``: its master's pid; once this process has another parent, the
        master is gone, whether or not the greenlet that watches for it (``master_gone``) ran yet
        (a worker frozen until after its master ended may ship before it does)."""
        self._orphan_writers: dict[Path, RunWriter] = {}
        """Where a worker whose master died writes, by directory: the run's own, or its ``late/``."""
        self.tallies: dict[str, WorkerTally] = {}
        """Per worker of the current test (by Locust's client id): requests started, rows received."""
        self._greenlet: gevent.Greenlet | None = None

    @property
    def runner(self) -> Runner | None:
        """The environment's runner (None: a collector used without one, its rows written locally)."""
        return self.environment.runner

    @property
    def _running(self) -> Runner:
        """The runner, where one ships or stops users (a worker): Locust made it."""
        assert self.runner is not None
        return self.runner

    @property
    def _master(self) -> MasterRunner:
        """The runner, on the master (the only process that asks for its workers)."""
        assert self._is_master and self.runner is not None
        return cast("MasterRunner", self.runner)

    def start(self) -> None:
        runner = self.environment.runner
        if self.part is Part.WORKER and runner is not None:
            runner.register_message(FLUSH_MESSAGE, self._on_flush_request)
            self.environment.events.test_stop.add_listener(self._ship_final)
            self._greenlet = gevent.spawn(self._every_interval, self._ship)
        elif runner is not None:
            if self._is_master:
                runner.register_message(BATCH_MESSAGE, self._on_batch)
            self._greenlet = gevent.spawn(self._every_interval, self.write_local)

    def _every_interval(self, action: Callable[[], object]) -> None:
        while True:
            gevent.sleep(self.flush_interval)
            action()

    def begin(self, writer: RunWriter) -> None:
        """A test starts (master or standalone): its rows go to ``writer``."""
        self.writer = writer
        self.final_from.clear()
        self.tallies.clear()
        self._own_batch()  # what this process recorded between tests belongs to none
        if self._is_master:  # the workers get it with this test's spawn messages, sent after test_start
            setattr(self.environment.parsed_options, TEST_RUN_DIR, str(writer.directory.resolve()))
        self.participants = (
            {client.id for client in self._master.clients.all} - self.refused if self._is_master else set()
        )

    def finish(self) -> None:
        """The test stopped: get its last rows to disk (from every worker, when distributed), then
        write no more of it. Invariant: once this returns, the run directory holds every part the
        judging will count and no greenlet adds one (the periodic write and late workers' batches
        find no writer), so the summary's ``parts`` are what a later ``report`` finds."""
        if self._is_master:
            self._collect_final_batches()
        if self.writer is not None:
            self.write_local()
        self.end()

    def end(self) -> None:
        """The test is judged or ended; rows that still arrive belong to no test."""
        self.writer = None

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    @property
    def _is_master(self) -> bool:
        return self.part is Part.MASTER

    def _own_batch(self) -> dict[str, Any]:
        """What this process recorded since the last batch: its users' rows and frames, and its lag samples."""
        state = run_state(self.environment)
        name = "master" if self._is_master else state.worker
        return {**state.recorder.take_batch(), "lag": state.lag.take(name), "worker": name}

    # -- standalone and master ----------------------------------------------------------------
    def write_local(self) -> None:
        """Write what this process recorded since the last write (kept until a test has a writer)."""
        if self.writer is not None:
            self.writer.write_batch(self._own_batch())

    # -- worker -------------------------------------------------------------------------------
    def master_gone(self) -> None:
        """The master died (this worker's parent is gone): what is not shipped yet goes into the
        test's run directory itself (``TEST_RUN_DIR``), else into ``ORPHANED_ROWS`` under the report
        root, instead of going to no one; this process then quits."""
        self._orphaned = True
        logger.error("sse-soak: the master is gone; this worker stops and keeps its unsent rows locally")

    def _ship(self, final: bool = False) -> None:
        batch = self._own_batch()
        if self.forked_by is not None and os.getppid() != self.forked_by:
            self._orphaned = True  # sent, the batch would go to no one
        if self._orphaned:
            self._keep_locally(batch)
        elif final or batch["rows"] or batch["frames"]["request_id"] or batch["lag"]["lag_s"]:
            self._running.send_message(BATCH_MESSAGE, {**batch, "final": final})

    def _keep_locally(self, batch: dict[str, Any]) -> None:
        rows = batch["rows"]
        named = getattr(self.environment.parsed_options, TEST_RUN_DIR, None)
        run = RunDir(named) if named else None
        if run is not None and run.holds_results():
            try:
                lock = run.writer_lock(LATE_WRITE_WAIT_S)  # no judging reads the directory meanwhile
            except RunInProgress:
                lock = None  # held all this time (a report of a large run): not ours to merge into
            with lock or contextlib.nullcontext():
                judged = lock is None or _judged(run)
                writer = self._orphan_writer(run.late if judged else run)
                before = writer.rows_written
                writer.write_batch(batch)  # parts named by this process's pid: never the master's
                rows = writer.take_pending_rows()  # the disk refused them: kept as text below
            if writer.rows_written > before:
                where = f"{writer.directory}, kept apart: the run was judged without them" if judged else run
                logger.error("sse-soak: %d rows the master never got are in %s", writer.rows_written - before, where)
        if rows:
            self._keep_as_text(rows, str(batch["worker"]))

    def _orphan_writer(self, run: RunDir) -> RunWriter:
        if run.path not in self._orphan_writers:
            self._orphan_writers[run.path] = RunWriter(run)
        return self._orphan_writers[run.path]

    def _keep_as_text(self, rows: list[dict[str, Any]], worker: str) -> None:
        root = Path(getattr(self.environment.parsed_options, "report_dir", None) or ".")
        path = root / ORPHANED_ROWS.format(worker=worker, pid=os.getpid())
        try:
            with path.open("a", encoding="utf-8") as file:
                for row in rows:
                    file.write(json.dumps(row, default=str) + "\n")
        except OSError as exc:
            logger.error("sse-soak: %d unsent rows lost: %s could not be written (%s)", len(rows), path, exc)
            return
        logger.error("sse-soak: %d rows the master never got are kept in %s", len(rows), path)

    def _ship_final(self, **_: Any) -> None:
        self._ship(final=True)

    def _on_flush_request(self, environment: Environment, msg: Message, **_: Any) -> None:
        self.stop_and_ship()

    def stop_and_ship(self) -> None:
        """Stop this worker's users and ship their rows as a final batch: on the master's flush
        request, and when the worker quits (before Locust's own listener tells the master)."""
        runner = self._running
        if runner.state in (STATE_SPAWNING, STATE_RUNNING):
            runner.stop()  # running streams are recorded as "stopped"; test_stop ships them
            return
        deadline = time.monotonic() + FINAL_BATCH_TIMEOUT_S
        while runner.state == STATE_CLEANUP and time.monotonic() < deadline:
            gevent.sleep(0.05)  # a stop under way elsewhere: its test_stop ships the rows first
        self._ship(final=True)

    # -- master -------------------------------------------------------------------------------
    def _on_batch(self, environment: Environment, msg: Message, **_: Any) -> None:
        if msg.node_id in self.refused:
            return  # another run's worker: its rows are not this run's
        self.participants.add(msg.node_id)
        if msg.data.get("final"):
            self.final_from.add(msg.node_id)
        if self.writer is not None:
            tally = self.tallies.setdefault(msg.node_id, WorkerTally(str(msg.data.get("worker") or msg.node_id)))
            tally.count(msg.data)
            self.writer.write_batch(msg.data)
        elif msg.data["rows"]:
            logger.error(
                "sse-soak: %d rows from %s arrived with no test running: not written",
                len(msg.data["rows"]),
                msg.node_id,
            )

    def _waiting_for(self) -> set[str]:
        """Workers of this test still connected and without a final batch (a worker that quit or
        stopped sent its final batch before saying so; one that vanished never will)."""
        connected = {client.id for client in self._master.clients.all if client.state != STATE_MISSING}
        return (self.participants - self.final_from - self.refused) & connected

    @property
    def lost(self) -> dict[str, dict[str, Any]]:
        """The workers of this test whose rows fell short of the requests they started, by worker
        name: ``started``, ``rows``, ``missing`` and ``last_heard`` (UTC); empty when none did."""
        return {tally.name: tally.as_dict() for tally in self.tallies.values() if tally.missing > 0}

    def _collect_final_batches(self) -> None:
        self.participants |= {client.id for client in self._master.clients.all} - self.refused
        self._master.send_message(FLUSH_MESSAGE, None)
        deadline = time.monotonic() + FINAL_BATCH_TIMEOUT_S + (self.environment.stop_timeout or 0)
        while self._waiting_for() and time.monotonic() < deadline:
            gevent.sleep(0.05)
        missing = self.participants - self.final_from
        if missing:
            logger.error(
                "sse-soak: no final batch from %d worker(s) %s: their last streams are missing",
                len(missing),
                sorted(missing),
            )


def _judged(run: RunDir) -> bool:
    """The run holds a final verdict (a soak's checkpoint is none); a summary that cannot be read
    counts as one: what is written now is kept apart rather than merged into it."""
    try:
        return unfinished(previous_summary(run)) is None
    except (SummaryError, OSError):
        return True
