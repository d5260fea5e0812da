"""The nightly workflow's history step, run as GitHub Actions runs it: its shell script, taken from
.github/workflows/nightly-soak.yml, in bash, against real run directories and a real cache.

Actions itself does not run here; what the step does with the cache, the soak's log and the exit
code of ``python -m loadtests history`` is the step's own script, and that is what these run (each
starts bash and the history command: the install tier)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.loadtests.synthetic_nights import night_figures, write_night, write_nights

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-soak.yml"
TONIGHT = dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.timezone.utc)


def step(name_starts: str) -> dict[str, object]:
    """The soak job's step whose name starts with ``name_starts``."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["soak"]["steps"]
    (found,) = [one for one in steps if str(one.get("name", "")).startswith(name_starts)]
    return found


def run_history_step(workspace: Path) -> tuple[int, str, dict[str, str]]:
    """Run the history step's script in ``workspace`` as Actions would (bash -e, GITHUB_OUTPUT):
    its exit code, its output, and what it set as the step's outputs."""
    outputs = workspace / "github-output"
    outputs.write_text("")
    python_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "GITHUB_OUTPUT": str(outputs),
        "PATH": f"{python_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    script = str(step("History")["run"])
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if "=" in line)
    return done.returncode, done.stdout + done.stderr, said


def soaked(workspace: Path, figures_factor: dict[str, float] | None = None) -> Path:
    """Tonight's soak: its run directory under reports/, and soak.log naming it as the soak does."""
    figures = night_figures(np.random.default_rng(99))
    for column, factor in (figures_factor or {}).items():
        figures[column] *= factor
    run = write_night(workspace / "reports", TONIGHT, figures)
    (workspace / "soak.log").write_text(f"verdict: PASS\nreport: {run}\n")
    return run


def cached_nights(workspace: Path, count: int) -> None:
    """The cache as earlier nights left it: the history.parquet of ``count`` nights."""
    earlier = workspace / "earlier"
    write_nights(earlier, count, start=TONIGHT - dt.timedelta(days=count))
    subprocess.run(
        [sys.executable, "-m", "loadtests", "history", str(earlier), "--out", str(workspace / "history-cache")],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )


def test_the_first_night_starts_the_history_and_keeps_it(tmp_path: Path) -> None:
    run = soaked(tmp_path)
    code, said, outputs = run_history_step(tmp_path)
    assert code == 0, said
    assert outputs == {"kept": "yes"}
    kept = pd.read_parquet(tmp_path / "history-cache" / "history.parquet")
    assert kept["run_dir"].tolist() == [run.name]
    assert (tmp_path / "history" / "history.html").is_file()


def test_a_regression_tonight_fails_the_step_and_tonight_is_still_kept(tmp_path: Path) -> None:
    cached_nights(tmp_path, 29)
    run = soaked(tmp_path, {"ttft_p99_s": 1.8})
    code, said, outputs = run_history_step(tmp_path)
    assert code == 1, said
    assert "::error title=regression against earlier nights::history: 30 nights in 1 series, 1 regression(s)" in said
    assert outputs == {"kept": "yes"}  # the save step runs on it, whatever the step's exit
    kept = pd.read_parquet(tmp_path / "history-cache" / "history.parquet")
    assert len(kept) == 30 and kept["run_dir"].iloc[-1] == run.name


def test_a_normal_night_after_a_month_passes(tmp_path: Path) -> None:
    cached_nights(tmp_path, 29)
    soaked(tmp_path)
    code, said, _ = run_history_step(tmp_path)
    assert code == 0, said
    assert "::error" not in said and "history: 30 nights in 1 series, 0 regression(s)" in said


def test_a_soak_that_wrote_no_run_directory_keeps_the_history_as_it_was(tmp_path: Path) -> None:
    cached_nights(tmp_path, 10)
    (tmp_path / "soak.log").write_text("sse-soak: the target server never got ready\n")
    code, said, outputs = run_history_step(tmp_path)
    assert code == 0, said
    assert outputs == {"kept": "yes"}
    assert len(pd.read_parquet(tmp_path / "history-cache" / "history.parquet")) == 10


@pytest.mark.fast
def test_the_cache_and_the_page_follow_the_history_step() -> None:
    """The cache is saved and the page uploaded whenever the step kept the nights, even when it
    failed on a regression; the step itself runs after a failed soak too."""
    assert "always()" in str(step("History")["if"])
    for name in ("Save the history", "Upload the history page"):
        assert str(step(name)["if"]) == "always() && steps.history.outputs.kept == 'yes'"
    assert step("Save the history")["with"] == {
        "path": "history-cache",
        "key": "soak-history-${{ matrix.server }}-${{ github.run_id }}",
    }
    restored = step("Restore the history")["with"]
    assert isinstance(restored, dict) and restored["restore-keys"] == "soak-history-${{ matrix.server }}-"
