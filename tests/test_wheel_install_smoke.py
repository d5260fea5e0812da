"""An installed wheel, outside the clone: the scenarios ship in it, and the pytest plugin works from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_vllm

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "loadtests", "target_server", "sse_soak_lifeline", "scenarios")
SCENARIOS = ["mixed_truncate", "proxy_timeout", "slow_prefill", "soak"]


def build_wheel(work: Path, env: dict[str, str] | None = None) -> Path:
    """A wheel built from a copy of this checkout's sources (an in-tree build would leave build/
    in the clone, whose stale files a later build would ship), in ``env`` (default: this one's)."""
    source = work / "source"
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignored = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so")  # the wheel compiles its own
            shutil.copytree(ROOT / name, source / name, ignore=ignored)
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = work / "dist"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)]
    built = subprocess.run(pip, timeout=600, capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("sse_soak-*.whl")
    return wheel


def compiled_readers(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [name for name in archive.namelist() if name.startswith("loadtests/client/_fastread")]


@dataclass(frozen=True)
class Installed:
    """The wheel installed in a fresh venv (no PYTHONPATH to the clone), and a directory outside
    the clone to run its commands in."""

    venv: Path
    elsewhere: Path
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def sse_soak(self) -> Path:
        return self.venv / "bin" / "sse-soak"

    def run(self, *command: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(part) for part in command],
            cwd=self.elsewhere,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(work)
    venv = work / "venv"
    # isolated from this machine's site-packages: the wheel's declared dependencies must be enough
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel), "pytest"]
    done = subprocess.run(install, timeout=900, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    outside = ("PYTHONPATH", "SSE_SOAK_PURE_PYTHON_READS")  # the clone's code; the read path the wheel chose
    return Installed(venv, elsewhere, {name: value for name, value in os.environ.items() if name not in outside})


def test_a_wheel_installed_in_a_fresh_venv_ships_the_scenarios_and_the_plugin(installed: Installed) -> None:
    venv, elsewhere, run = installed.venv, installed.elsewhere, installed.run
    python, sse_soak = installed.python, installed.sse_soak

    # the compiled read path is built into the wheel, and the installed harness reads through it
    compiled = run(python, "-c", "from loadtests.client import raw_body; print(raw_body.READ_PATH)")
    assert compiled.stdout.strip() == "compiled", compiled.stdout + compiled.stderr

    # what this venv imports, pytest's plugin included: the wheel's copy
    where = "import loadtests, loadtests.run.soak as s; print(loadtests.__file__); print(s.DEFAULT_SCENARIO)"
    site = run(python, "-c", where)
    package, soak_default = (Path(line) for line in site.stdout.splitlines())
    assert package.is_relative_to(venv) and not package.is_relative_to(ROOT), site.stdout
    shipped = package.parent / "scenarios"
    assert soak_default == shipped / "soak.py"

    listed = run(sse_soak, "scenarios")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()[::2]] == [
        [name, str(shipped / f"{name}.py")] for name in SCENARIOS
    ]

    scenario = run(sse_soak, "run", "mixed_truncate", "--headless", "-u", "4", "-r", "4", "-t", "4s", "--only-summary")
    assert scenario.returncode == 0, scenario.stdout[-3000:] + scenario.stderr[-3000:]
    assert "verdict: PASS" in scenario.stdout
    (run_dir,) = (elsewhere / "reports").iterdir()
    assert (run_dir / "summary.json").exists() and (run_dir / "report.html").exists()

    only_mixed = ("--pyargs", "loadtests.smoke", "-k", "mixed_truncate", "--sse-soak-duration", "4")
    smoke = run(python, "-m", "pytest", "-p", "no:cacheprovider", "-v", *only_mixed)
    assert smoke.returncode == 0, smoke.stdout[-5000:] + smoke.stderr[-2000:]
    assert "sse-soak-0.1.0" in smoke.stdout  # pytest found the plugin through the wheel's entry point
    passed = [line.split()[0] for line in smoke.stdout.splitlines() if " PASSED " in line]
    assert "::test_gate[mixed_truncate-no_http_500]" in passed and "::test_verdict[mixed_truncate]" in passed
    assert len(list((elsewhere / "reports").iterdir())) == 2  # the plugin's run beside the command's


def test_a_wheel_ships_the_compiled_read_path_and_builds_without_a_compiler(tmp_path: Path) -> None:
    """The extension is optional: where no C compiler runs (``CC=false``), the wheel still builds,
    without it (the harness then reads through its Python path, with the same records)."""
    assert [name for name in compiled_readers(build_wheel(tmp_path / "cc")) if name.endswith(".so")]
    without = build_wheel(tmp_path / "no-cc", {**os.environ, "CC": "false"})
    assert not [name for name in compiled_readers(without) if name.endswith(".so")]
    assert "loadtests/client/raw_body.py" in zipfile.ZipFile(without).namelist()


@pytest.mark.vllm
def test_the_installed_wheel_starts_real_vllm_outside_the_clone(installed: Installed) -> None:
    """``--server vllm`` from the wheel: its watchdog, CPU confinement and the install it reuses."""
    require_vllm()
    reports = installed.elsewhere / "vllm-runs"
    command = ("run", "slow_prefill", "--server", "vllm", "--headless", "-u", "4", "-r", "4", "-t", "12s")
    started = installed.run(installed.sse_soak, *command, "--only-summary", "--report-dir", reports, timeout=600)
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    assert "verdict: PASS" in started.stdout and "real vLLM runs on CPU" in started.stdout
    # the slot holders hold the --max-num-seqs vLLM was started with, searching nothing: a cold vLLM
    # once took 9 s of this 12 s run to be searched, and no queued stream finished
    assert "found concurrency 2 from --max-num-seqs 2, which the run started real vLLM with" in started.stdout
    (run_dir,) = reports.iterdir()
    assert (run_dir / "summary.json").exists()
