"""The run's verdict files: ``summary.json`` (and the HTML report) from the request table.

``<report-dir>/<scenario>-<UTC timestamp>/``; the layout is described in reports/README.md. The
parquet parts are written as the run goes (``run_writer``); the summary is computed from the
request table alone, so ``python -m loadtests report`` can rebuild it from the parquet files.
Files are written under a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.gates import Gate, GateResult, HarnessKeptUp, all_passed, evaluate, gate_spec
from loadtests.lag import DEFAULT_LAG_LIMIT_MS, lag_summary
from loadtests.outcome import OUTCOMES
from loadtests.run_writer import read_table


class RunDirError(ValueError):
    """The report root cannot hold a run directory; the message is one line naming it and why,
    e.g. ``--report-dir reports: not a directory (a file is in the way)``."""


def report_root_problem(report_root: str | os.PathLike[str]) -> str | None:
    """Why ``report_root`` cannot hold run directories, without writing anything; None when it can.
    It must be a writable directory, or be creatable under the nearest existing ancestor."""
    root = Path(report_root)
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == root:
            return "not a directory (a file is in the way)"
        return f"cannot be created (a file is in the way: {existing})"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "not writable" if existing == root else f"cannot be created ({existing} is not writable)"
    return None


def new_run_dir(report_root: str | os.PathLike[str], scenario: str) -> Path:
    """``<report_root>/<scenario>-<UTC stamp>[-N]``, made atomically: runs started in the same
    second (or racing from several processes) each get their own directory, because ``mkdir`` fails
    rather than reuse one and the next suffix is tried. Raises ``RunDirError`` when the root cannot
    hold it (a file in the way, not writable)."""
    root = Path(report_root)
    problem = report_root_problem(root)
    if problem is not None:
        raise RunDirError(f"--report-dir {root}: {problem}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    suffix = 1
    try:
        root.mkdir(parents=True, exist_ok=True)
        while True:
            directory = root / (f"{scenario}-{stamp}" if suffix == 1 else f"{scenario}-{stamp}-{suffix}")
            try:
                directory.mkdir()
                return directory
            except FileExistsError:  # another run took this name first: try the next one
                suffix += 1
    except OSError as exc:  # the root changed under us, or the checks above could not tell
        raise RunDirError(f"--report-dir {root}: cannot create a run directory ({exc.strerror or exc})") from None


KEEPALIVE_COUNTED_ON = "raw streams only (the openai SDK cannot see comments)"
SILENCE_BINS_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, float("inf"))


def causes(requests: pd.DataFrame) -> dict[str, Any]:
    """Failures by cause: status codes, proxy timeouts before the headers (504) versus streams cut
    after them, protocol and harness errors by message, and keep-alive frames per stream against
    the silence each stream endured (raw streams only: the SDK cannot see comments)."""
    statuses = requests["status"].dropna().astype(int).value_counts().sort_index()
    streamed = requests[(requests["status"] == 200) & requests["keepalive_frames"].notna()]  # raw streams only
    bins = pd.cut(streamed["silence_before_first_token_s"], SILENCE_BINS_S, right=False)
    by_silence = streamed.groupby(bins, observed=True)["keepalive_frames"].agg(["size", "mean", "min", "max"])
    return {
        "status": {str(code): int(n) for code, n in statuses.items()},
        "proxy_timeouts_before_headers": int((requests["status"] == 504).sum()),
        "cut_after_headers": int((requests["outcome"] == "cut").sum()),
        "protocol_errors": _messages(requests[requests["outcome"] == "protocol_error"]),
        "harness_errors": _messages(requests[requests["outcome"] == "harness_error"]),
        "malformed_usage": int(requests["raw_usage"].notna().sum()),
        "keepalive_vs_silence": [
            {"silence_s": f"{interval.left:g}-{interval.right:g}", "streams": int(row["size"]),
             "keepalive_mean": round(float(row["mean"]), 3), "keepalive_min": int(row["min"]),
             "keepalive_max": int(row["max"])}
            for interval, row in by_silence.iterrows()
        ],
    }  # fmt: skip


def _messages(rows: pd.DataFrame) -> dict[str, int]:
    """Count of rows per ``error_message``, most frequent first."""
    return {str(message): int(n) for message, n in rows["error_message"].fillna("").value_counts().items()}


LATENCY_COLUMNS = ("ttfb_s", "ttft_s", "duration_s", "max_gap_s", "max_data_gap_s")
PERCENTILES = (50, 90, 95, 99)


def latency(requests: pd.DataFrame) -> dict[str, dict[str, float | int | None]]:
    """p50/p90/p95/p99/max of each timing over the requests that have it."""
    figures: dict[str, dict[str, float | int | None]] = {}
    for column in LATENCY_COLUMNS:
        values = requests[column].dropna()
        entry: dict[str, float | int | None] = {"count": len(values)}
        for p in PERCENTILES:
            entry[f"p{p}"] = round(float(values.quantile(p / 100)), 6) if len(values) else None
        entry["max"] = round(float(values.max()), 6) if len(values) else None
        figures[column] = entry
    return figures


def keepalive_per_stream(requests: pd.DataFrame) -> dict[str, Any]:
    """Keep-alive frames per 200 stream, over the streams whose client sees comments (raw)."""
    streamed = requests.loc[requests["status"] == 200, "keepalive_frames"].dropna()
    if streamed.empty:
        return {"streams": 0, "mean": None, "max": None, "counted_on": KEEPALIVE_COUNTED_ON}
    return {"streams": len(streamed), "mean": round(float(streamed.mean()), 4), "max": int(streamed.max()),
            "counted_on": KEEPALIVE_COUNTED_ON}  # fmt: skip


def summarize(
    scenario: str,
    requests: pd.DataFrame,
    gates: Sequence[GateResult],
    settings: dict[str, Any] | None = None,
    gate_specs: Sequence[dict[str, Any]] = (),
    frame_sample_rate: float = 1.0,
    lag: pd.DataFrame | None = None,
    lag_limit_ms: float = DEFAULT_LAG_LIMIT_MS,
) -> dict[str, Any]:
    """The summary.json of a run; ``harness_lag_ms`` condenses ``lag`` (the harness's own lag
    samples) against ``lag_limit_ms``, absent when no samples were given."""
    counts = requests["outcome"].value_counts()
    return {
        "scenario": scenario,
        "settings": settings or {},
        "frame_sample_rate": frame_sample_rate,
        "requests": len(requests),
        "outcomes": {outcome: int(counts.get(outcome, 0)) for outcome in OUTCOMES},
        "http_500": int((requests["status"] == 500).sum()),
        "inband_500": int(((requests["outcome"] == "inband_error") & (requests["error_code"] == "500")).sum()),
        "keepalive_frames": int(requests["keepalive_frames"].sum()),
        "causes": causes(requests),
        "latency": latency(requests),
        "keepalive_per_stream": keepalive_per_stream(requests),
        **({} if lag is None else {"harness_lag_ms": lag_summary(lag, lag_limit_ms)}),
        "gate_specs": list(gate_specs),
        "gates": [{"name": g.name, "passed": g.passed, "detail": g.detail, "skipped": g.skipped} for g in gates],
        "passed": all_passed(gates),
    }


def _replace_atomically(path: Path, write: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    write(temporary)
    temporary.replace(path)


def write_summary(directory: Path, summary: dict[str, Any]) -> None:
    _replace_atomically(directory / "summary.json", lambda p: p.write_text(json.dumps(summary, indent=2) + "\n"))


def judge_run(
    directory: Path,
    scenario: str,
    requests: pd.DataFrame,
    gates: Sequence[Gate],
    settings: dict[str, Any] | None = None,
    frame_sample_rate: float = 1.0,
    decorate: Callable[[dict[str, Any], pd.DataFrame], None] | None = None,
    html: bool = True,
    ended: str | None = None,
    interrupted: str | None = None,
) -> dict[str, Any]:
    """Evaluate the gates over ``requests`` (and the run's lag samples), let ``decorate(summary,
    requests)`` add to the summary (the soak adds its drift windows and gates), settle the verdict,
    then write ``summary.json`` and, with ``html``, ``report.html`` and ``requests.csv`` (they read
    every frame: a checkpoint skips them). ``ended`` says how the test ended; ``interrupted``, set
    when it ended before its planned duration, fails the verdict whatever the gates say."""
    lag = read_table(directory / "lag.parquet")
    results = evaluate(requests, gates, lag)
    specs = [gate_spec(gate) for gate in gates]
    limit = next((gate.limit_ms for gate in gates if isinstance(gate, HarnessKeptUp)), DEFAULT_LAG_LIMIT_MS)
    summary = summarize(scenario, requests, results, settings, specs, frame_sample_rate, lag, limit)
    if decorate is not None:
        decorate(summary, requests)
    settle_verdict(summary, ended, interrupted)
    write_summary(directory, summary)
    if html:
        write_html_files(directory, summary, requests)
    return summary


def write_html_files(directory: Path, summary: dict[str, Any], requests: pd.DataFrame) -> None:
    """``requests.csv`` and ``report.html`` (which reads every frame) beside the summary."""
    from loadtests.html_report import write_html_report, write_requests_csv  # matplotlib: only here

    write_requests_csv(directory, requests)
    write_html_report(
        directory, summary, requests, read_table(directory / "frames.parquet"), read_table(directory / "lag.parquet")
    )


def requests_judged(summary: dict[str, Any]) -> int:
    """Requests the gates judged: every row but the streams the run itself stopped."""
    return int(summary["requests"]) - int(summary["outcomes"].get("stopped", 0))


def settle_verdict(summary: dict[str, Any], ended: str | None, interrupted: str | None) -> None:
    """``gates_passed``: every gate passed (the soak's included); ``passed``, the verdict: the gates
    passed, on at least one judged request, and the run was not interrupted."""
    gates_passed = all(gate["passed"] for gate in summary["gates"])
    summary["ended"] = ended
    summary["interrupted"] = interrupted
    summary["gates_passed"] = gates_passed
    summary["passed"] = gates_passed and interrupted is None and requests_judged(summary) > 0


def verdict_line(summary: dict[str, Any]) -> str:
    """``verdict: PASS``, or ``verdict: FAIL (...)`` with why, in one line: the interruption, the
    gates passed on how many requests, the failed gates."""
    if summary["passed"]:
        return "verdict: PASS"
    gates = summary["gates"]
    passed = sum(1 for gate in gates if gate["passed"])
    failed = [gate["name"] for gate in gates if not gate["passed"] and not gate.get("skipped")]
    skipped = len(gates) - passed - len(failed)
    reasons = [f"interrupted: {summary['interrupted']}"] if summary.get("interrupted") else []
    judged = requests_judged(summary)
    if not judged and not failed:
        reasons.append("no request finished")
    reasons.append(f"{passed}/{len(gates)} gates passed on {judged} requests judged"
                   + (f", {skipped} skipped" if skipped else ""))  # fmt: skip
    if failed:
        reasons.append("failed: " + ", ".join(failed))
    return f"verdict: FAIL ({'; '.join(reasons)})"
