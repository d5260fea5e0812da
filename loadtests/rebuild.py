"""Rebuild a run's verdict files from what it wrote: parquet parts plus the summary's gate specs.

The gates a scenario declared are stored in ``summary.json`` as plain data (``gate_specs``), so a
run directory can be re-judged without its locustfile, and a run killed before its end (no
summary yet) is judged by the always-on gates alone. How the run ended (``ended``,
``interrupted``) is carried over from the summary it had: a re-judged interrupted run stays failed.
A ``summary.json`` that is not JSON, not an object, or holds fields of the wrong type raises
``SummaryError`` naming the file: a run directory is never re-judged from a summary misread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.compare import SummaryError, read_json_object
from loadtests.gates import Gate, gate_from_spec
from loadtests.report import judge_run
from loadtests.run_writer import read_table

NO_SUMMARY = "the run ended before writing its summary"


class NotARunDirectory(FileNotFoundError):
    """The path holds no ``requests.parquet``: nothing a run wrote."""


def _optional(kind: type | tuple[type, ...]) -> Callable[[Any], bool]:
    return lambda value: value is None or isinstance(value, kind)


def _share(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1


# What a re-judgement reads from the previous summary, and what each field must be.
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "scenario": (_optional(str), "a string"),
    "gate_specs": (lambda v: isinstance(v, list) and all(isinstance(s, dict) for s in v), "a list of objects"),
    "settings": (_optional(dict), "an object"),
    "frame_sample_rate": (_share, "a number from 0 to 1"),
    "ended": (_optional(str), "a string"),
    "interrupted": (_optional(str), "a string"),
    "soak": (_optional(dict), "an object"),
}


def previous_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The summary a run directory holds, None when it has none; raises ``NotARunDirectory``, or
    ``SummaryError`` when ``summary.json`` is there but is not a summary."""
    directory = Path(run_dir)
    if not (directory / "requests.parquet").exists():
        raise NotARunDirectory(f"{directory} is not a run directory (it holds no requests.parquet)")
    path = directory / "summary.json"
    if not path.exists():
        return None
    summary = read_json_object(path)
    for key, (valid, expected) in _FIELDS.items():
        if key in summary and not valid(summary[key]):
            raise SummaryError(f"{path}: not a run summary ({key!r} must be {expected})")
    return summary


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
    gates = _gates(directory / "summary.json", previous.get("gate_specs", []))
    requests = read_table(directory / "requests.parquet")
    return judge_run(directory, scenario, requests, gates, previous.get("settings"),
                     previous.get("frame_sample_rate", 1.0), decorate, html, previous.get("ended"),
                     interrupted or previous.get("interrupted"))  # fmt: skip


def _gates(path: Path, specs: list[dict[str, Any]]) -> list[Gate]:
    """The gates the summary declared; a spec this harness cannot rebuild is a ``SummaryError``."""
    gates = []
    for number, spec in enumerate(specs, 1):
        try:
            gates.append(gate_from_spec(spec))
        except (KeyError, TypeError, ValueError) as exc:
            raise SummaryError(f"{path}: gate spec {number} cannot be rebuilt ({type(exc).__name__}: {exc})") from None
    return gates
