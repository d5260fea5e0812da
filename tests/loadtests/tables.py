"""A recorder's rows and frames as the tables a run directory would hold, without the disk; and request
tables built from a few given fields, with the real columns and dtypes."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.record.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, Recorder, to_pandas


def requests_of(recorder: Recorder) -> pd.DataFrame:
    return to_pandas(pa.Table.from_pylist(recorder.rows, schema=REQUEST_SCHEMA))


def frames_of(recorder: Recorder) -> pd.DataFrame:
    return to_pandas(pa.Table.from_pydict(recorder.frames, schema=FRAME_SCHEMA))


def table(*rows: dict[str, Any]) -> pd.DataFrame:
    """A request table with the real columns and dtypes, built through the recorder."""
    recorder = Recorder()
    for index, given in enumerate(rows):
        fields = dict(given)
        plan = RequestPlan(
            f"r{index}",
            "n",
            "completions",
            prompt_tokens=fields.pop("prompt_tokens", 10_000),
            truncate_prompt_tokens=fields.pop("truncate", None),
            expected=fields.pop("expected", "ok"),
        )
        row = StreamTracker(plan, 0.0).finish(1.0)
        for name, value in fields.items():
            setattr(row, name, value)
        recorder.add(row, None)
    return requests_of(recorder)


def raw_stream(silence: float, keepalives: int | None) -> dict[str, Any]:
    """A 200 stream silent ``silence`` s before its first token; ``None`` keep-alives: an SDK row."""
    return {"status": 200, "outcome": "ok", "silence_before_first_token_s": silence, "keepalive_frames": keepalives}
