"""The run directory while the run goes: batches of rows and frames become parquet parts.

``requests.parquet/``, ``frames.parquet/`` and ``lag.parquet/`` (the harness's own lag samples,
``loadtests.lag``) are directories of ``part-NNNNNN.parquet`` files
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
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadtests.lag import LAG_SCHEMA
from loadtests.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, to_pandas

UNWRITABLE_ROWS = "unwritable-rows.jsonl"
logger = logging.getLogger(__name__)
_CONVERSION_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)
_SCHEMAS = {"requests": REQUEST_SCHEMA, "frames": FRAME_SCHEMA, "lag": LAG_SCHEMA}


def read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A requests or frames table (a parquet file or a directory of parts) with nullable integers
    as pandas ``Int64``; an empty table with the right columns when nothing was written."""
    written = path.is_file() or (path.is_dir() and any(path.glob("*.parquet")))
    if written:
        table = pq.read_table(path, columns=columns)
    else:
        schema = _SCHEMAS.get(path.name.split(".")[0], REQUEST_SCHEMA)
        table = schema.empty_table()
        if columns is not None:
            table = table.select(columns)
    return to_pandas(table)


class RunWriter:
    """Writes one run's parts. Not thread-safe; the Locust process is one gevent thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.requests_dir = directory / "requests.parquet"
        self.frames_dir = directory / "frames.parquet"
        self.lag_dir = directory / "lag.parquet"
        for table_dir in (self.requests_dir, self.frames_dir, self.lag_dir):
            table_dir.mkdir(parents=True, exist_ok=True)
        self.rows_written = 0
        self.rows_unwritable = 0
        self._parts = 0
        self._pending: list[dict[str, Any]] = []
        """Batches whose write failed (OSError): retried first, in order, with the next batch."""

    def write_batch(self, batch: dict[str, Any]) -> None:
        """Write a ``Recorder.take_batch()`` (from this process or a worker) as one part per table;
        batches that could not be written before are written first. Never raises for a row."""
        self._pending.append(batch)
        while self._pending:
            try:
                self._write_batch(self._pending[0])
            except OSError as exc:
                logger.error("sse-soak: could not write to %s (%s); %d batch(es) kept in memory, retried with "
                             "the next write", self.directory, exc, len(self._pending))  # fmt: skip
                return
            self._pending.pop(0)

    @property
    def rows_pending(self) -> int:
        """Rows held in memory because their batch could not be written yet."""
        return sum(len(batch["rows"]) for batch in self._pending)

    def _write_batch(self, batch: dict[str, Any]) -> None:
        rows, frames, lag = batch["rows"], batch["frames"], batch.get("lag")
        if not rows and not frames["request_id"] and not (lag and lag["lag_s"]):
            return
        self._parts += 1
        name = f"part-{os.getpid()}-{self._parts:06d}.parquet"
        if rows:
            table = self._requests_table(rows)
            if table.num_rows:
                self._write(table, self.requests_dir / name)
                self.rows_written += table.num_rows
        if frames["request_id"]:
            try:
                table = pa.Table.from_pydict(frames, schema=FRAME_SCHEMA)
            except _CONVERSION_ERRORS as exc:
                self._keep_unwritable([{"frame_records": frames}], exc)
            else:
                self._write(table, self.frames_dir / name)
        if lag and lag["lag_s"]:
            self._write(pa.Table.from_pydict(lag, schema=LAG_SCHEMA), self.lag_dir / name)

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
        path = self.directory / UNWRITABLE_ROWS
        with path.open("a") as file:
            for record in records:
                file.write(json.dumps(record, default=repr) + "\n")
        logger.error("sse-soak: %d record(s) did not fit the parquet schema (%s); kept as text in %s",
                     len(records), error, path)  # fmt: skip

    @staticmethod
    def _write(table: pa.Table, path: Path) -> None:
        temporary = path.with_name("." + path.name + ".tmp")
        pq.write_table(table, temporary)
        temporary.replace(path)

    def requests_table(self) -> pd.DataFrame:
        return read_table(self.requests_dir)

    def frames_table(self, columns: list[str] | None = None) -> pd.DataFrame:
        return read_table(self.frames_dir, columns)
