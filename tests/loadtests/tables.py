"""A recorder's rows and frames as the tables a run directory would hold, without the disk."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from loadtests.record.recorder import FRAME_SCHEMA, REQUEST_SCHEMA, Recorder, to_pandas


def requests_of(recorder: Recorder) -> pd.DataFrame:
    return to_pandas(pa.Table.from_pylist(recorder.rows, schema=REQUEST_SCHEMA))


def frames_of(recorder: Recorder) -> pd.DataFrame:
    return to_pandas(pa.Table.from_pydict(recorder.frames, schema=FRAME_SCHEMA))
