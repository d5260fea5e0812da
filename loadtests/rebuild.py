"""Rebuild a run's verdict files from what it wrote: parquet parts plus the summary's gate specs.

The gates a scenario declared are stored in ``summary.json`` as plain data (``gate_specs``), so a
run directory can be re-judged without its locustfile, and a run killed before its end (no
summary yet) is judged by the always-on gates alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.gates import gate_from_spec
from loadtests.report import judge_run
from loadtests.run_writer import read_table


def rebuild_report(
    run_dir: str | Path, decorate: Callable[[dict[str, Any], pd.DataFrame], None] | None = None, html: bool = True
) -> dict[str, Any]:
    """Re-judge a run directory and rewrite its summary (and, with ``html``, its HTML report and CSV);
    returns the summary."""
    directory = Path(run_dir)
    if not (directory / "requests.parquet").exists():
        raise FileNotFoundError(f"{directory} holds no requests.parquet: not a run directory")
    previous = json.loads((directory / "summary.json").read_text()) if (directory / "summary.json").exists() else {}
    scenario = previous.get("scenario") or directory.name.rsplit("-", 1)[0]
    gates = [gate_from_spec(spec) for spec in previous.get("gate_specs", [])]
    requests = read_table(directory / "requests.parquet")
    return judge_run(directory, scenario, requests, gates, previous.get("settings"),
                     previous.get("frame_sample_rate", 1.0), decorate, html)  # fmt: skip
