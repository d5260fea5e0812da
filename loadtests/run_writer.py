"""The run directory while the run goes: batches of rows and frames become parquet parts.

``requests.parquet/`` and ``frames.parquet/`` are directories of ``part-NNNNNN.parquet`` files
(the Hive/Spark layout; ``pandas.read_parquet`` reads a directory like a file). Each batch that
reaches the process holding the results is written at once as one part, under a temporary name
then renamed, so the directory is readable at any moment and a killed run keeps everything up to
its last batch; memory holds one batch, never the run. Both tables have fixed Arrow schemas, so
parts written hours apart always read back as one table.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadtests.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, to_pandas


def read_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A requests or frames table (a parquet file or a directory of parts) with nullable integers
    as pandas ``Int64``; an empty table with the right columns when nothing was written."""
    written = path.is_file() or (path.is_dir() and any(path.glob("*.parquet")))
    if written:
        table = pq.read_table(path, columns=columns)
    else:
        schema = FRAME_SCHEMA if path.name.startswith("frames") else REQUEST_SCHEMA
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
        self.requests_dir.mkdir(parents=True, exist_ok=True)
        self.frames_dir.mkdir(parents=True, exist_ok=True)
        self.rows_written = 0
        self.frames_written = 0
        self._parts = 0

    def write_batch(self, batch: dict[str, Any]) -> None:
        """Write a ``Recorder.take_batch()`` (from this process or a worker) as one part per table."""
        rows, frames = batch["rows"], batch["frames"]
        if not rows and not frames["request_id"]:
            return
        self._parts += 1
        name = f"part-{os.getpid()}-{self._parts:06d}.parquet"
        if rows:
            self._write(pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA), self.requests_dir / name)
            self.rows_written += len(rows)
        if frames["request_id"]:
            self._write(pa.Table.from_pydict(frames, schema=FRAME_SCHEMA), self.frames_dir / name)
            self.frames_written += len(frames["request_id"])

    @staticmethod
    def _write(table: pa.Table, path: Path) -> None:
        temporary = path.with_name("." + path.name + ".tmp")
        pq.write_table(table, temporary)
        temporary.replace(path)

    def requests_table(self) -> pd.DataFrame:
        return read_table(self.requests_dir)

    def frames_table(self, columns: list[str] | None = None) -> pd.DataFrame:
        return read_table(self.frames_dir, columns)
