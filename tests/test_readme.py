"""The README stays true: CI and the workflows run exactly its two commands, and its list of the
target server's extensions is the one its ``--help`` marks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from target_server.config import ServerConfig

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
EXTENSIONS_HEADING = "Its extensions, what it does that vLLM does not"


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert block, "the README starts with a bash block"
    return [line for line in block[1].splitlines() if line.strip()]


def readme_python_block(heading: str) -> str:
    """The first python block of the README's section whose heading starts with ``## heading``."""
    pattern = rf"^## {re.escape(heading)}.*?\n(.*?)^## "
    section = re.search(pattern, (ROOT / "README.md").read_text(), re.DOTALL | re.MULTILINE)
    assert section, f"the README has a section '{heading}'"
    block = re.search(r"```python\n(.*?)```", section[1], re.DOTALL)
    assert block, f"the section '{heading}' shows a python block"
    return block[1]


def test_the_readme_starts_with_exactly_the_main_job_and_the_test_command() -> None:
    main_job, tests = readme_commands()
    assert main_job.startswith("pip install -e . && locust -f scenarios/mixed_truncate.py --headless")
    assert tests == "pip install -e '.[test]' && python -m pytest"


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, tests = readme_commands()
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()
    assert f"run: {tests}" in (ROOT / ".github" / "workflows" / "ci.yml").read_text()


def test_the_ci_workflow_installs_and_requires_what_ci_run_does() -> None:
    """Every tool .ci/run installs (``python -m loadtests TOOL setup``) the workflow installs before
    its tests, from PyTorch's CPU index where the nightly soak takes vLLM's torch; every test .ci/run
    requires (``SSE_SOAK_REQUIRE_*``), the workflow's test step requires too."""
    script = (ROOT / ".ci" / "run").read_text()
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    setups = re.findall(r"^(python -m loadtests \w+ setup)$", script, re.MULTILINE)
    required = re.findall(r"^export (SSE_SOAK_REQUIRE_\w+)=1\b", script, re.MULTILINE)
    assert {"python -m loadtests vllm setup", "python -m loadtests litellm setup"} <= set(setups)
    assert {"SSE_SOAK_REQUIRE_VLLM", "SSE_SOAK_REQUIRE_LITELLM"} <= set(required)
    tests_at = workflow.index(f"run: {readme_commands()[1]}")
    for setup in setups:
        assert workflow.find(f"run: {setup}") in range(tests_at), f"ci.yml runs {setup} before its tests"
    test_step = workflow[workflow.rindex("- name:", 0, tests_at) : tests_at]
    assert all(f'{name}: "1"' in test_step for name in required), f"ci.yml's test step requires {required}"
    nightly = (ROOT / ".github" / "workflows" / "nightly-soak.yml").read_text()
    index = re.search(r"PIP_EXTRA_INDEX_URL: (\S+)", nightly)
    assert index and f"PIP_EXTRA_INDEX_URL: {index[1]}" in workflow


def test_the_nightly_soak_installs_with_the_readme_command_and_keeps_a_baseline() -> None:
    workflow = (ROOT / ".github" / "workflows" / "nightly-soak.yml").read_text()
    install = readme_commands()[0].split(" && ")[0]
    assert f"run: {install}" in workflow
    assert "python -m loadtests soak --duration" in workflow and "--baseline" in workflow
    assert "schedule:" in workflow and "upload-artifact" in workflow


def test_the_nightly_soak_keeps_a_baseline_only_from_a_pass() -> None:
    """An inconclusive soak (exit 3) is a warning, not a red job, and never becomes the baseline."""
    workflow = (ROOT / ".github" / "workflows" / "nightly-soak.yml").read_text()
    assert '0) echo "verdict=pass"' in workflow and '3) echo "verdict=inconclusive"' in workflow
    keeping = [line for line in workflow.splitlines() if "steps.soak.outputs.verdict == 'pass'" in line]
    assert len(keeping) == 2  # copying the summary and saving it


def test_the_nightly_soak_also_soaks_real_vllm_with_its_own_baseline() -> None:
    workflow = (ROOT / ".github" / "workflows" / "nightly-soak.yml").read_text()
    assert "server: [bundled, vllm]" in workflow and "run: python -m loadtests vllm setup" in workflow
    assert '--server "${{ matrix.server }}"' in workflow
    assert workflow.count("soak-baseline-${{ matrix.server }}-") == 3  # restored, its prefix, saved: per server


def readme_extensions() -> str:
    """The README's one list of the target server's extensions: its heading to the blank line after
    its last item."""
    text = (ROOT / "README.md").read_text()
    assert text.count(EXTENSIONS_HEADING) == 1, "the README lists the extensions once"
    listed = re.search(rf"{re.escape(EXTENSIONS_HEADING)}.*?\n\n(.*?)\n\n", text, re.DOTALL)
    assert listed, "the extensions are a list after their heading"
    return listed[1]


def test_the_readme_lists_the_target_servers_extensions_as_its_help_marks_them() -> None:
    helps = {flag: action.help or "" for action in ServerConfig.parser()._actions for flag in action.option_strings}
    marked = {flag for flag, text in helps.items() if "extension" in text}
    named = set(re.findall(r"`(--[a-z-]+)", readme_extensions())) & set(helps)
    assert marked and named == marked
