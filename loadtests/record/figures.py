"""The figures several parts of a run compute over request rows, each defined once.

Gates, the summary, the soak's drift windows and progress line, and the HTML report all count
500s, leave out the streams the run itself stopped, and take percentiles: they do it here, so two
readers of one run never disagree on what a 500 or a judged request is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from loadtests.client.outcome import FAILURE_OUTCOMES, UNJUDGED_OUTCOMES, Outcome

PERCENTILES = (50, 90, 95, 99)


def http_500(requests: pd.DataFrame) -> pd.Series:
    """Rows answered with HTTP 500."""
    return requests["status"] == 500


def inband_500(requests: pd.DataFrame) -> pd.Series:
    """Rows whose stream carried an in-band error with code 500 under HTTP 200."""
    return (requests["outcome"] == Outcome.INBAND_ERROR) & (requests["error_code"] == "500")


def count_500s(requests: pd.DataFrame) -> tuple[int, int]:
    """``(HTTP 500s, in-band 500s)`` among ``requests``."""
    return int(http_500(requests).sum()), int(inband_500(requests).sum())


def sees_comments(requests: pd.DataFrame) -> pd.Series:
    """Rows whose client sees SSE comments (the raw client, which counts them): the openai SDK cannot,
    so its rows have no keep-alive count, and its first chunk's wait may have held comments."""
    return requests["keepalive_frames"].notna()


def judged(requests: pd.DataFrame) -> pd.DataFrame:
    """The rows a verdict judges: all but the streams the run itself stopped at its end and the
    scheduled requests it never sent."""
    return requests[~requests["outcome"].isin(UNJUDGED_OUTCOMES)]


def judged_count(requests: pd.DataFrame) -> int:
    return int((~requests["outcome"].isin(UNJUDGED_OUTCOMES)).sum())


def quantile(values: pd.Series, q: float) -> float | None:
    """The ``q`` quantile (0-1) of the values present, None when there are none."""
    present = values.dropna()
    return float(present.quantile(q)) if len(present) else None


def quantiles(values: pd.Series, percentiles: Sequence[int] = PERCENTILES, digits: int = 6) -> list[float | None]:
    """The given percentiles of the values present, rounded; Nones when there are none."""
    present = values.dropna()
    if not len(present):
        return [None] * len(percentiles)
    return [round(float(present.quantile(p / 100)), digits) for p in percentiles]


TOKEN_GAP_COLUMNS = ["request_id", "seq", "kind", "t_s"]
"""The columns of frames.parquet that ``token_gaps`` reads."""


def token_gaps(frames: pd.DataFrame) -> pd.Series:
    """The time between each data frame and the stream's previous data frame, in seconds, over every
    stream of ``frames`` (``TOKEN_GAP_COLUMNS``): the gaps a user sees between tokens, from each
    stream's first token on (keep-alive comments between two tokens do not cut the gap). Every gap
    counts, so a long stream weighs more than a short one; with ``--frame-sample-rate`` below 1 they
    are the gaps of the streams whose frames were kept."""
    data = frames.loc[frames["kind"] == "data", ["request_id", "seq", "t_s"]]
    if data.empty:
        return pd.Series(dtype="float64")
    data = data.sort_values(["request_id", "seq"], kind="stable")
    gaps = data["t_s"].astype("float64").diff()
    return gaps[data["request_id"].eq(data["request_id"].shift())].dropna().reset_index(drop=True)


WORST_BY_GAP = 5
WORST_TOTAL = 15


def worst_streams(requests: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Up to ``WORST_BY_GAP`` streams (2xx responses) with the longest ``max_gap_s``, then the failed streams taken
    in turn from each failure outcome (longest gap first), ``WORST_TOTAL`` in all; and how many
    qualifying streams were left out."""
    ranked = requests.assign(_gap=pd.to_numeric(requests["max_gap_s"], errors="coerce"))
    ranked = ranked.sort_values("_gap", ascending=False, na_position="last", kind="stable")
    status = pd.to_numeric(ranked["status"], errors="coerce")
    streams = ranked["_gap"].notna() & (status >= 200) & (status < 300)
    chosen = list(ranked.index[streams][:WORST_BY_GAP])
    queues = [list(ranked.index[ranked["outcome"] == outcome]) for outcome in FAILURE_OUTCOMES]
    failed: list[Any] = []
    while any(queues):
        failed += [queue.pop(0) for queue in queues if queue]
    candidates = chosen + [index for index in failed if index not in chosen]
    shown = candidates[:WORST_TOTAL]
    return requests.loc[shown], len(candidates) - len(shown)
