"""Synthetic nights for the history's tests and its bench: run directories as a run writes them
(``manifest.json`` through ``Manifest``, ``summary.json`` through ``Summary.write``, ``resources.csv``),
their figures drawn around realistic values with realistic night-to-night noise.

``night_figures(rng)`` draws one normal night's figures (``loadtests.report.history.FIGURES``'
columns); ``write_night(root, started_at, figures, ...)`` writes a run directory that the history
reads back into exactly those figures (rounded as a summary rounds them)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from loadtests.client.outcome import OUTCOMES
from loadtests.judge.gates import GateResult
from loadtests.judge.summary import (
    TOKEN_GAP,
    Causes,
    Coverage,
    HarnessLag,
    KeepalivePerStream,
    ServerMetrics,
    Soak,
    Summary,
)
from loadtests.record.run_dir import Manifest, RunDir

JUDGED = 2000
"""Requests judged each night: rates move in steps of 1/2000."""
INTERVAL_S = 0.25
GATES = ("requests_completed", "no_http_500", "no_inband_500", "no_protocol_errors", "keepalive_covered")
OLD_VERSION = "0.0.9"


def night_figures(rng: np.random.Generator) -> dict[str, float]:
    """One normal night: each figure around its usual value with the noise nights show (a few % for
    latencies, 15% for the harness's loop lag, a request in a thousand failing now and then)."""

    def around(value: float, noise: float) -> float:
        return value * float(1 + rng.normal(0, noise))

    figures = {
        "ttft_p50_s": around(0.31, 0.02),
        "ttft_p99_s": around(0.43, 0.04),
        "gap_p50_s": around(0.0052, 0.02),
        "gap_p99_s": around(0.0060, 0.05),
        "longest_silence_s": around(0.2505, 0.004),
        "keepalive_per_silent_s": around(1.55, 0.03),
        "harness_lag_p99_ms": around(1.1, 0.15),
        "server_waiting_p95": float(rng.choice([0.0, 0.0, 0.0, 1.0])),
        "server_kv_cache_max": around(0.24, 0.03),
        "harness_peak_rss_mb": around(180.0, 0.02),
        "server_peak_rss_mb": around(120.0, 0.02),
    }
    for outcome in ("http_5xx", "inband_error", "protocol_error", "cut", "timeout", "gateway_timeout", "connect_error"):
        figures[f"rate_{outcome}"] = int(rng.choice([0, 0, 0, 1, 2])) / JUDGED
    figures["harness_lag_max_ms"] = 20.0  # the loop's longest stall (no noise: the draws above stay as they were)
    return figures


def _entry(p50: float, p99: float, most: float | None = None) -> dict[str, float | int | None]:
    """A ``latency`` entry as ``summary.spread`` writes one."""
    most = p99 * 1.1 if most is None else most
    return {
        "count": JUDGED,
        "p50": round(p50, 6),
        "p90": round((p50 + p99) / 2, 6),
        "p95": round((p50 + 2 * p99) / 3, 6),
        "p99": round(p99, 6),
        "max": round(most, 6),
    }


def summary_of(
    scenario: str, settings: dict[str, Any], figures: dict[str, float], failed: Iterable[str] = (), soak: bool = True
) -> Summary:
    """The summary of a night whose figures are ``figures``, its gates in ``failed`` failed."""
    outcomes = {outcome.value: 0 for outcome in OUTCOMES}
    for outcome in outcomes:
        outcomes[outcome] = round(figures.get(f"rate_{outcome}", 0.0) * JUDGED)
    outcomes["ok"] = JUDGED - sum(outcomes.values())
    outcomes["stopped"] = 4
    failed = set(failed)
    gates = [
        GateResult(name, name not in failed, f"{name}: {'failed' if name in failed else 'held'} on {JUDGED} requests")
        for name in GATES
    ]
    silent_s = 600.0
    per_silent = figures["keepalive_per_silent_s"]
    windows = [{"window": n, "verdict": "PASS", "requests": JUDGED // 3} for n in (1, 2, 3)] if soak else []
    return Summary(
        scenario=scenario,
        settings=settings,
        frame_sample_rate=1.0,
        requests=JUDGED + 4,
        outcomes=outcomes,
        http_500=outcomes["http_5xx"],
        inband_500=0,
        keepalive_frames=round(per_silent * silent_s),
        causes=Causes(status={"200": outcomes["ok"]}),
        latency={
            "ttft_s": _entry(figures["ttft_p50_s"], figures["ttft_p99_s"]),
            "max_gap_s": _entry(0.008, figures["longest_silence_s"] * 0.999, figures["longest_silence_s"]),
            TOKEN_GAP: _entry(figures["gap_p50_s"], figures["gap_p99_s"]),
        },
        keepalive_per_stream=KeepalivePerStream(
            streams=JUDGED, mean=1.2, max=3, silent_s=silent_s, per_silent_s=round(per_silent, 6)
        ),
        gate_specs=[{"type": "builtin", "name": name} for name in GATES],
        gates=gates,
        harness_lag_ms=HarnessLag(
            samples=3000,
            p50=0.2,
            p99=round(figures["harness_lag_p99_ms"], 3),
            max=round(figures["harness_lag_max_ms"], 3),
        ),
        server_metrics=ServerMetrics(
            available=True,
            scrapes=600,
            waiting={"mean": 0.1, "p95": figures["server_waiting_p95"], "max": 2.0},
            kv_cache_usage={"mean": 0.15, "p95": 0.2, "max": round(figures["server_kv_cache_max"], 6)},
        ),
        ended="run time of 600 s reached",
        soak=Soak(duration_s=600.0, windows=windows) if soak else None,
        coverage=Coverage(judged=JUDGED, seen=JUDGED + 4, stopped=4),
        point=["requests_completed"],
    )


def write_night(
    root: Path,
    started_at: dt.datetime,
    figures: dict[str, float],
    *,
    scenario: str = "soak",
    server: str = "bundled",
    proxy: str = "none",
    failed: Iterable[str] = (),
    soak: bool = True,
    version: str = "0.1.0",
) -> Path:
    """Write one night's run directory under ``root`` (``<scenario>-<UTC stamp>``; ``server`` a name
    or a ``--host`` URL) and return it."""
    stamp = started_at.strftime("%Y%m%dT%H%M%SZ")
    path = root / f"{scenario}-{stamp}"
    path.mkdir(parents=True)
    run = RunDir(path)
    host = server if "://" in server else None
    settings: dict[str, Any] = {
        "proxy": proxy,
        "proxy_read_timeout": 60.0,
        "keep_alive_interval": INTERVAL_S,
        "host": host,
        "server": None if host else server,
        "keep_alive_interval_source": "bundled server",
    }
    run.write_manifest(
        Manifest(
            scenario,
            started_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            settings,
            [{"type": "builtin", "name": name} for name in GATES],
            versions={"python": "3.11.7", "sse-soak": version},
        )
    )
    summary_of(scenario, settings, figures, failed, soak).write(run)
    if soak:
        times = np.arange(10.0)
        pd.DataFrame(
            {
                "t": times,
                "harness_rss_mb": figures["harness_peak_rss_mb"] - 9 + times,
                "server_rss_mb": figures["server_peak_rss_mb"] - 9 + times,
            }
        ).to_csv(run.resources, index=False)
    return path


def as_older_version(path: Path, version: str = OLD_VERSION) -> None:
    """Make ``path`` a run directory as an older sse-soak wrote it: its summary without the sections
    it did not write yet (``coverage``, ``server_metrics``, ``latency.token_gap_s``, keep-alive per
    silent second) and its manifest naming ``version``."""
    summary_file, manifest_file = path / RunDir.SUMMARY, path / RunDir.MANIFEST
    data = json.loads(summary_file.read_text(encoding="utf-8"))
    for key in ("coverage", "server_metrics"):
        data.pop(key, None)
    data["latency"].pop(TOKEN_GAP, None)
    for key in ("silent_s", "per_silent_s"):
        data["keepalive_per_stream"].pop(key, None)
    data["settings"].pop("keep_alive_inferred", None)
    summary_file.write_text(json.dumps(data, indent=2), encoding="utf-8")
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    manifest["versions"]["sse-soak"] = version
    manifest_file.write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def write_nights(
    root: Path,
    count: int,
    *,
    seed: int = 7,
    start: dt.datetime = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.timezone.utc),
    changed: dict[int, dict[str, float]] | None = None,
    **night: Any,
) -> list[Path]:
    """``count`` nightly run directories one day apart from ``start``, normal nights of seed
    ``seed``, but night ``n`` (0-based) has the figures of ``changed[n]`` multiplied as given
    (``{"ttft_p99_s": 1.6}``)."""
    rng = np.random.default_rng(seed)
    paths = []
    for index in range(count):
        figures = night_figures(rng)
        for column, factor in (changed or {}).get(index, {}).items():
            figures[column] *= factor
        paths.append(write_night(root, start + dt.timedelta(days=index), figures, **night))
    return paths
