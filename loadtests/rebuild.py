"""Rebuild a run's verdict files from what it wrote: parquet parts plus the summary's gate specs.

The gates a scenario declared are stored in ``summary.json`` as plain data (``gate_specs``), so a
run directory can be re-judged without its locustfile, and a run killed before its end (no
summary yet) is judged by the always-on gates alone. How the run ended (``ended``,
``interrupted``) is carried over from the summary it had: a re-judged interrupted run stays failed.
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

NO_SUMMARY = "the run ended before writing its summary"


class NotARunDirectory(FileNotFoundError):
    """The path holds no ``requests.parquet``: nothing a run wrote."""


def previous_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The summary a run directory holds, None when it has none; raises ``NotARunDirectory``."""
    directory = Path(run_dir)
    if not (directory / "requests.parquet").exists():
        raise NotARunDirectory(f"{directory} is not a run directory (it holds no requests.parquet)")
    path = directory / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def unfinished(summary: dict[str, Any] | None) -> str | None:
    """Why a run directory holds no final verdict, or None when it does: no summary at all, or only
    the soak job's checkpoint of a run still going (or killed before its end)."""
    if summary is None:
        return NO_SUMMARY
    if (summary.get("soak") or {}).get("partial"):
        return f"{NO_SUMMARY} (summary.json is a soak checkpoint)"
    return None


def rebuild_report(
    run_dir: str | Path,
    decorate: Callable[[dict[str, Any], pd.DataFrame], None] | None = None,
    html: bool = True,
    interrupted: str | None = None,
) -> dict[str, Any]:
    """Re-judge a run directory and rewrite its summary (and, with ``html``, its HTML report and CSV);
    returns the summary. ``interrupted``, when given, replaces the reason the summary had."""
    directory = Path(run_dir)
    previous = previous_summary(directory) or {}
    scenario = previous.get("scenario") or directory.name.rsplit("-", 1)[0]
    gates = [gate_from_spec(spec) for spec in previous.get("gate_specs", [])]
    requests = read_table(directory / "requests.parquet")
    return judge_run(directory, scenario, requests, gates, previous.get("settings"),
                     previous.get("frame_sample_rate", 1.0), decorate, html, previous.get("ended"),
                     interrupted or previous.get("interrupted"))  # fmt: skip
