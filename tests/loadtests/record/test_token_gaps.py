"""The gaps between tokens (``latency.token_gap_s``): from each stream's first token on, comments
between two tokens not cutting the gap, streams never joined."""

from __future__ import annotations

import pandas as pd
import pytest

from loadtests.judge.summary import spread
from loadtests.record.figures import TOKEN_GAP_COLUMNS, token_gaps

pytestmark = pytest.mark.fast


def frames(*rows: tuple[str, int, str, float]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=TOKEN_GAP_COLUMNS)


def test_gaps_run_from_token_to_token_of_one_stream() -> None:
    table = frames(
        ("b", 0, "keepalive", 0.25),  # before b's first token: no gap
        ("a", 2, "data", 1.5),
        ("a", 0, "data", 1.0),  # out of order: sorted by sequence
        ("a", 1, "keepalive", 1.25),  # a comment between two tokens does not cut the gap
        ("b", 1, "data", 0.5),
        ("b", 2, "data", 0.52),
        ("b", 3, "done", 0.6),
        ("c", 0, "data", 9.0),  # one token: no gap, and never joined to another stream's
    )
    assert token_gaps(table).round(6).tolist() == [0.5, 0.02]


def test_no_token_no_gap() -> None:
    assert token_gaps(frames(("a", 0, "keepalive", 1.0))).empty
    assert spread(token_gaps(frames())) == {"count": 0, "p50": None, "p90": None, "p95": None, "p99": None, "max": None}
