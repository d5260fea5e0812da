"""The run directory: ``requests.parquet``, ``frames.parquet`` and ``summary.json``.

``<report-dir>/<scenario>-<UTC timestamp>/``; the layout is described in reports/README.md.
The summary is computed from the request table alone, so it can be rebuilt from the parquet
files. Invariant: the directory is complete when ``write_run`` returns; it writes each file to
a temporary name and renames it, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.gates import GateResult, all_passed
from loadtests.outcome import OUTCOMES


def new_run_dir(report_root: str | os.PathLike[str], scenario: str) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    directory = Path(report_root) / f"{scenario}-{stamp}"
    suffix = 1
    while directory.exists():  # two runs in the same second
        suffix += 1
        directory = Path(report_root) / f"{scenario}-{stamp}-{suffix}"
    directory.mkdir(parents=True)
    return directory


SILENCE_BINS_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, float("inf"))


def causes(requests: pd.DataFrame) -> dict[str, Any]:
    """Failures by cause: status codes, proxy timeouts before the headers (504) versus streams cut
    after them, and keep-alive frames per stream against the silence each stream endured."""
    statuses = requests["status"].dropna().astype(int).value_counts().sort_index()
    streamed = requests[requests["status"] == 200]
    bins = pd.cut(streamed["silence_before_first_token_s"], SILENCE_BINS_S, right=False)
    by_silence = streamed.groupby(bins, observed=True)["keepalive_frames"].agg(["size", "mean", "min", "max"])
    return {
        "status": {str(code): int(n) for code, n in statuses.items()},
        "proxy_timeouts_before_headers": int((requests["status"] == 504).sum()),
        "cut_after_headers": int((requests["outcome"] == "cut").sum()),
        "keepalive_vs_silence": [
            {"silence_s": f"{interval.left:g}-{interval.right:g}", "streams": int(row["size"]),
             "keepalive_mean": round(float(row["mean"]), 3), "keepalive_min": int(row["min"]),
             "keepalive_max": int(row["max"])}
            for interval, row in by_silence.iterrows()
        ],
    }  # fmt: skip


def summarize(
    scenario: str, requests: pd.DataFrame, gates: Sequence[GateResult], settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    counts = requests["outcome"].value_counts()
    return {
        "scenario": scenario,
        "settings": settings or {},
        "requests": len(requests),
        "outcomes": {outcome: int(counts.get(outcome, 0)) for outcome in OUTCOMES},
        "http_500": int((requests["status"] == 500).sum()),
        "inband_500": int(((requests["outcome"] == "inband_error") & (requests["error_code"] == "500")).sum()),
        "keepalive_frames": int(requests["keepalive_frames"].sum()),
        "causes": causes(requests),
        "gates": [{"name": g.name, "passed": g.passed, "detail": g.detail} for g in gates],
        "passed": all_passed(gates),
    }


def _replace_atomically(path: Path, write: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    write(temporary)
    temporary.replace(path)


def write_run(
    directory: Path,
    scenario: str,
    requests: pd.DataFrame,
    frames: pd.DataFrame,
    gates: Sequence[GateResult],
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write all three files; returns the summary."""
    _replace_atomically(directory / "requests.parquet", lambda p: requests.to_parquet(p, index=False))
    _replace_atomically(directory / "frames.parquet", lambda p: frames.to_parquet(p, index=False))
    summary = summarize(scenario, requests, gates, settings)
    _replace_atomically(directory / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))
    return summary
