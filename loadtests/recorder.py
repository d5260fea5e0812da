"""Per-process store of request rows and frame records, in plain types that can be shipped.

Rows are kept whole; frame records are stored column-wise (six lists) because there are many of
them. ``take_batch()`` hands over what was added since the last call as a dict of plain lists
(msgpack-safe, for Locust's worker -> master messages) and ``ingest()`` takes one in, so a master
can hold a whole distributed run. Invariant: every row added or ingested is in exactly one of
``rows`` or a batch taken, never both, never neither.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from loadtests.outcome import RequestRow

FRAME_COLUMNS = ("request_id", "seq", "kind", "t_s", "gap_s", "bytes")
FrameRecord = tuple[int, str, float, float, int]  # seq, kind, t_s, gap_s, bytes


class Recorder:
    """Collects finished requests. Not thread-safe; Locust users are greenlets on one thread."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.frames: dict[str, list[Any]] = {column: [] for column in FRAME_COLUMNS}
        self._shipped_rows = 0
        self._shipped_frames = 0

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
        batch = {"rows": self.rows, "frames": self.frames}
        self._shipped_rows += len(self.rows)
        self._shipped_frames += len(self.frames["request_id"])
        self.rows = []
        self.frames = {column: [] for column in FRAME_COLUMNS}
        return batch

    def ingest(self, batch: dict[str, Any]) -> None:
        """Take in a batch from ``take_batch()`` (of this or another process)."""
        self.rows.extend(batch["rows"])
        for column in FRAME_COLUMNS:
            self.frames[column].extend(batch["frames"][column])

    def requests_table(self) -> pd.DataFrame:
        columns = list(RequestRow.__dataclass_fields__)
        table = pd.DataFrame(self.rows, columns=columns)
        for name in ("status", "prompt_tokens", "max_tokens", "truncate_prompt_tokens", "usage_prompt_tokens",
                     "usage_completion_tokens"):  # fmt: skip
            table[name] = table[name].astype("Int64")
        return table

    def frames_table(self) -> pd.DataFrame:
        return pd.DataFrame(self.frames, columns=list(FRAME_COLUMNS))
