"""A user's own pytest, through pytest's ``pytester``: a project of theirs (``pytester.path``) that
knows nothing of sse-soak but that it is installed, with the plugin loaded from the package's
``pytest11`` entry point, as a user meets it. It runs in a pytest process of its own
(``runpytest_subprocess``): what the plugin's runs import (pandas, pyarrow's extension types) must
not be unloaded under this process, as an in-process run's module snapshot would. Each test's
outcome is read from the run's own JUnit XML report, never from its printed lines."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def load_pandas_parquet() -> None:
    """Load pandas' parquet reader now, at collection. ``pytester`` unloads at each test's end the
    modules first imported during it, and pandas' reader registers pyarrow extension types once per
    process: loaded inside one test, a later ``pd.read_parquet`` here would fail to register them again."""
    buffer = io.BytesIO()
    pq.write_table(pa.table({"loaded": [1]}), buffer)
    buffer.seek(0)
    pd.read_parquet(buffer)


load_pandas_parquet()

OUTCOME_ELEMENTS = {"error": "ERROR", "failure": "FAILED", "skipped": "SKIPPED"}
"""A ``testcase`` element's child, as ``-v`` words the outcome (none: PASSED)."""


def parametrized_outcomes(report: Path) -> dict[tuple[str, str], str]:
    """``(test, parameter) -> PASSED/FAILED/ERROR/SKIPPED`` of each parametrized test in the JUnit XML
    ``report``; empty when the run wrote none (refused before collecting)."""
    if not report.exists():
        return {}
    seen: dict[tuple[str, str], str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        name = case.get("name", "")
        if not name.endswith("]"):
            continue
        test, param = name[:-1].split("[", 1)
        words = [OUTCOME_ELEMENTS[child.tag] for child in case if child.tag in OUTCOME_ELEMENTS]
        seen[test, param] = "ERROR" if "ERROR" in words else (words[0] if words else "PASSED")
    return seen


def user_pytest(
    pytester: pytest.Pytester, *args: str, timeout: float = 600
) -> tuple[pytest.RunResult, dict[tuple[str, str], str]]:
    """``pytest -v ARGS`` in ``pytester.path``: its result (exit code, output, ``parseoutcomes``)
    and each parametrized test's outcome (``parametrized_outcomes``)."""
    report = pytester.path / f"outcomes-{len(list(pytester.path.glob('outcomes-*.xml')))}.xml"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", f"--junitxml={report}", *args, timeout=timeout
    )
    return result, parametrized_outcomes(report)
