"""Per-process store of request rows and frame records, in plain types that can be shipped.

Rows are kept whole; frame records are stored column-wise (one list per column) because there are many of
them. ``take_batch()`` hands over what was added since the last call as a dict of plain lists
(msgpack-safe, for Locust's worker -> master messages; ``RunWriter.write_batch`` takes it).
Invariant: every row added is in exactly one of ``rows`` or a batch taken, never both, never
neither.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadtests.client.outcome import RequestRow
from loadtests.errors import WrongType

FRAME_COLUMNS = ("request_id", "seq", "kind", "t_s", "gap_s", "bytes", "wait_s")
FrameRecord = tuple[int, str, float, float, int, float | None]  # seq, kind, t_s, gap_s, bytes, wait_s

_ARROW_TYPES: dict[object, pa.DataType] = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def _arrow_type(annotation: object) -> pa.DataType:
    for python_type, arrow_type in _ARROW_TYPES.items():
        if annotation is python_type or python_type in typing.get_args(annotation):
            return arrow_type
    raise WrongType(f"no Arrow type for {annotation!r}")


REQUEST_SCHEMA = pa.schema([(name, _arrow_type(t)) for name, t in typing.get_type_hints(RequestRow).items()])
"""requests.parquet: one column per ``RequestRow`` field, in field order."""
_FRAME_FIELDS: list[tuple[str, pa.DataType]] = [  # typed: a literal's mixed DataTypes would join to object
    ("request_id", pa.string()),
    ("seq", pa.int32()),
    ("kind", pa.string()),
    ("t_s", pa.float64()),
    ("gap_s", pa.float64()),
    ("bytes", pa.int32()),
    ("wait_s", pa.float64()),
]
FRAME_SCHEMA = pa.schema(_FRAME_FIELDS)
"""frames.parquet. ``wait_s``: how long the read's last bytes lay in the kernel before the harness
read them (its own lateness for that frame); null where the arrival is not stamped (openai SDK, TLS)."""
assert tuple(FRAME_SCHEMA.names) == FRAME_COLUMNS
assert tuple(REQUEST_SCHEMA.names) == tuple(f.name for f in dataclasses.fields(RequestRow))


_NULLABLE_INTEGERS: dict[pa.DataType, pd.api.extensions.ExtensionDtype] = {
    pa.int64(): pd.Int64Dtype(),
    pa.int32(): pd.Int64Dtype(),
}


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as pandas, integer columns as nullable ``Int64`` (status may be missing)."""
    return table.to_pandas(types_mapper=_NULLABLE_INTEGERS.get)


class Recorder:
    """Collects finished requests. Not thread-safe; Locust users are greenlets on one thread."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.frames: dict[str, list[Any]] = {column: [] for column in FRAME_COLUMNS}
        self.started = 0
        """Requests started since the last batch: a master tells from them how many rows a worker
        that vanished never sent (``loadtests.run.collect``)."""

    def note_started(self) -> None:
        self.started += 1

    def add(self, row: RequestRow, frames: list[FrameRecord] | None) -> None:
        self.rows.append(row.as_dict())
        if frames:
            columns = self.frames
            columns["request_id"].extend([row.request_id] * len(frames))
            for name, values in zip(FRAME_COLUMNS[1:], zip(*frames, strict=True), strict=True):
                columns[name].extend(values)

    def __len__(self) -> int:
        return len(self.rows)

    def take_batch(self) -> dict[str, Any]:
        """Everything added since the last batch, as plain lists; removed from this recorder."""
        batch = {"rows": self.rows, "frames": self.frames, "started": self.started}
        self.rows = []
        self.frames = {column: [] for column in FRAME_COLUMNS}
        self.started = 0
        return batch


def write_part(table: pa.Table, path: Path) -> None:
    """Write ``table`` to the parquet file ``path`` under a hidden temporary name, then rename it into
    place: a reader sees the whole part or none. On a disk error the temporary file is removed and
    the ``OSError`` raised; the caller keeps the rows for a retry."""
    temporary = path.with_name("." + path.name + ".tmp")
    try:
        pq.write_table(table, temporary)
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
