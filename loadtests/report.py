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


def summarize(scenario: str, requests: pd.DataFrame, gates: Sequence[GateResult]) -> dict[str, Any]:
    counts = requests["outcome"].value_counts()
    return {
        "scenario": scenario,
        "requests": len(requests),
        "outcomes": {outcome: int(counts.get(outcome, 0)) for outcome in OUTCOMES},
        "http_500": int((requests["status"] == 500).sum()),
        "inband_500": int(((requests["outcome"] == "inband_error") & (requests["error_code"] == "500")).sum()),
        "keepalive_frames": int(requests["keepalive_frames"].sum()),
        "gates": [{"name": g.name, "passed": g.passed, "detail": g.detail} for g in gates],
        "passed": all_passed(gates),
    }


def _replace_atomically(path: Path, write: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    write(temporary)
    temporary.replace(path)


def write_run(
    directory: Path, scenario: str, requests: pd.DataFrame, frames: pd.DataFrame, gates: Sequence[GateResult]
) -> dict[str, Any]:
    """Write all three files; returns the summary."""
    _replace_atomically(directory / "requests.parquet", lambda p: requests.to_parquet(p, index=False))
    _replace_atomically(directory / "frames.parquet", lambda p: frames.to_parquet(p, index=False))
    summary = summarize(scenario, requests, gates)
    _replace_atomically(directory / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))
    return summary
