"""The run directory while the run goes: batches of rows and frames become parquet parts.

``requests.parquet/``, ``frames.parquet/`` and ``lag.parquet/`` (the harness's own lag samples,
``loadtests.record.lag``) are directories of ``part-NNNNNN.parquet`` files
(the Hive/Spark layout; ``pandas.read_parquet`` reads a directory like a file). Each batch that
reaches the process holding the results is written at once as one part, under a temporary name
then renamed, so the directory is readable at any moment and a killed run keeps everything up to
its last batch; memory holds one batch, never the run. Both tables have fixed Arrow schemas, so
parts written hours apart always read back as one table.

A writer error never discards a batch. Rows that do not fit the schema (a value of the wrong type
or out of range: the tracker nulls server-sent values, so this is a bug of ours) are written one by
one: those that fit go in the part, the others to ``unwritable-rows.jsonl`` as text, counted in
``rows_unwritable`` and logged once. A batch that cannot be written at all (disk full, say) stays
in memory and is retried with the next one and at the end.

Writing never holds the event loop: the Arrow conversions and parquet writes of each batch run in
gevent's native threadpool (``_off_loop``), so only the greenlet that hands the batch over waits.
On the loop they stalled every stream: 5-12 ms of CPU a batch at 50-200 users (up to 90 ms wall on
a busy machine), a second or more when rows had to be converted one by one. A batch is handed over
whole (``Recorder.take_batch`` and ``LagMonitor.take`` replace their lists; a worker's batch comes
unpacked from msgpack), so nothing mutates it while a thread reads it. Writes are one at a time,
in the order the batches were handed over; a greenlet killed while it waits for its turn or for its
write leaves its batch written once or pending, never lost, never written twice.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import gevent
import pyarrow as pa
from gevent.lock import Semaphore

from loadtests.record.lag import LAG_SCHEMA
from loadtests.record.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, write_part
from loadtests.record.run_dir import RunDir

UNWRITABLE_ROWS = RunDir.UNWRITABLE_ROWS
logger = logging.getLogger(__name__)
_CONVERSION_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)
_T = TypeVar("_T")


def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a native thread of gevent's threadpool: the calling greenlet waits, the loop
    runs every other one meanwhile (called from the hub itself, it runs in place). ``fn``'s
    exception is raised here, not printed by the hub. Never abandoned: a kill or timeout thrown at
    the waiting greenlet is raised once ``fn`` has returned, so ``fn`` always runs to its end, once.
    ``fn`` must not share mutable state with the loop except under a lock the caller holds; its
    Python code shares the GIL with the loop, which waits at most ``sys.getswitchinterval()`` for it
    between two of ``fn``'s C calls (Arrow's conversions hold it throughout, its writes release it)."""
    hub = gevent.get_hub()
    if gevent.getcurrent() is hub:
        return fn(*args)
    done = hub.threadpool.spawn(_outcome, fn, args)
    interrupted: BaseException | None = None
    while True:
        try:
            # a blocking get() returns the value, never the None the stub allows for get(block=False)
            returned, value = cast("tuple[bool, Any]", done.get())
            break
        except BaseException as exc:  # thrown at this greenlet (kill, Timeout): fn runs on; wait for it
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted
    if not returned:
        raise value
    return value


def _outcome(fn: Callable[..., _T], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """``(True, result)`` or ``(False, exception)``: in a pool thread, an exception left to gevent
    would be printed as a crash before it reached the caller."""
    try:
        return True, fn(*args)
    except BaseException as exc:
        return False, exc


class RunWriter:
    """Writes one run's parts. Call it from one thread's greenlets (the Locust process is one gevent
    thread); each write runs in a pool thread while its caller waits, one write at a time."""

    def __init__(self, run: RunDir | Path, observe: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.run = run if isinstance(run, RunDir) else RunDir(run)
        self.observe = observe
        """Called with each batch once, in the write's thread, before it is written (the live
        metrics count it: ``loadtests.record.live_metrics``); must not change it."""
        self.directory = self.run.path
        self.requests_dir = self.run.requests
        self.frames_dir = self.run.frames
        self.lag_dir = self.run.lag
        for table_dir in (self.requests_dir, self.frames_dir, self.lag_dir):
            table_dir.mkdir(parents=True, exist_ok=True)
        self.rows_written = 0
        self.rows_unwritable = 0
        self._parts = 0
        self._pending: list[dict[str, Any]] = []
        """Batches not written yet: the one being written, those whose write failed (OSError, retried
        first, in order, with the next batch) and those handed over while another was written."""
        self._writing = Semaphore()
        """Held while the pending batches are written: one write at a time."""

    def write_batch(self, batch: dict[str, Any]) -> None:
        """Write a ``Recorder.take_batch()`` (from this process or a worker) as one part per table;
        batches that could not be written before are written first. Never raises for a row. The
        work runs off the event loop (``_off_loop``): only the calling greenlet waits for it."""
        self._pending.append(batch)  # before any switch: from here on the batch cannot be dropped
        with self._writing:
            while self._pending:
                try:
                    _off_loop(self._write_first_pending)
                except OSError as exc:
                    kept = len(self._pending)
                    logger.error(
                        "sse-soak: could not write to %s (%s); %d batch(es) kept in memory, retried with the "
                        "next write",
                        self.directory,
                        exc,
                        kept,
                    )
                    return

    def _write_first_pending(self) -> None:
        """Write the oldest pending batch, then drop it from the pending list (in the same thread, so
        that a batch written is never pending, whatever happens to the greenlet that waits)."""
        batch = self._pending[0]
        if self.observe is not None and not batch.get("observed"):
            batch["observed"] = True  # once: a write the disk refused is retried, never counted again
            try:
                self.observe(batch)
            except Exception:  # a bug of the observer's: the batch is written all the same
                logger.exception("sse-soak: a batch was not counted in the live metrics")
        self._write_batch(batch)
        self._pending.pop(0)

    def take_pending_rows(self) -> list[dict[str, Any]]:
        """Give up the batches not written yet (their frames and lag go with them) and return their
        rows, for a caller with no later write to retry them at: a worker quitting, say."""
        rows = [row for batch in self._pending for row in batch["rows"]]
        self._pending.clear()
        return rows

    @property
    def rows_pending(self) -> int:
        """Rows held in memory because their batch could not be written yet."""
        return sum(len(batch["rows"]) for batch in self._pending)

    def _write_batch(self, batch: dict[str, Any]) -> None:
        """Write the tables of ``batch`` not written yet, each emptied in the batch once its part is in
        place: a retry after a disk error writes only what is missing, never a row twice, and keeps
        the batch's part name (and the rows it set aside as unwritable: they are set aside once)."""
        lag = batch.get("lag")
        if not batch["rows"] and not batch["frames"]["request_id"] and not (lag and lag["lag_s"]):
            return
        if "part" not in batch:
            self._parts += 1
            batch["part"] = f"part-{os.getpid()}-{self._parts:06d}.parquet"
        name = batch["part"]
        if batch["rows"]:
            if "requests_table" not in batch:
                batch["requests_table"] = self._requests_table(batch["rows"])
            table = batch["requests_table"]
            if table.num_rows:
                self._write(table, self.requests_dir / name)
                self.rows_written += table.num_rows
            batch["rows"] = []
            del batch["requests_table"]
        frames = batch["frames"]
        if frames["request_id"]:
            try:
                table = pa.Table.from_pydict(frames, schema=FRAME_SCHEMA)
            except _CONVERSION_ERRORS as exc:
                self._keep_unwritable([{"frame_records": frames}], exc)
            else:
                self._write(table, self.frames_dir / name)
            batch["frames"] = {"request_id": []}
        if lag and lag["lag_s"]:
            self._write(pa.Table.from_pydict(lag, schema=LAG_SCHEMA), self.lag_dir / name)
            batch["lag"] = None

    def _requests_table(self, rows: list[dict[str, Any]]) -> pa.Table:
        """The rows as one table; when some do not fit, those that do (the rest are kept aside)."""
        try:
            return pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA)
        except _CONVERSION_ERRORS:
            pass
        fitting, unfit, first_error = [], [], None
        for row in rows:
            try:
                pa.Table.from_pylist([row], schema=REQUEST_SCHEMA)
            except _CONVERSION_ERRORS as exc:
                unfit.append(row)
                first_error = first_error or exc
            else:
                fitting.append(row)
        self._keep_unwritable(unfit, first_error)
        self.rows_unwritable += len(unfit)
        return pa.Table.from_pylist(fitting, schema=REQUEST_SCHEMA)

    def _keep_unwritable(self, records: list[dict[str, Any]], error: BaseException | None) -> None:
        path = self.run.unwritable_rows
        with path.open("a") as file:
            for record in records:
                file.write(json.dumps(record, default=repr) + "\n")
        logger.error(
            "sse-soak: %d record(s) did not fit the parquet schema (%s); kept as text in %s", len(records), error, path
        )

    @staticmethod
    def _write(table: pa.Table, path: Path) -> None:
        write_part(table, path)
