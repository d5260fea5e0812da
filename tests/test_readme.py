"""The README and docs/ stay true: the README opens with exactly its two commands, stays short enough
to read in five minutes, and every link from it or from docs/ resolves to a file and heading; CI and
the workflows run exactly its two commands; what the docs say of the code (the always-on gates, the
exit codes, mypy's folders, the target server's extensions) is what the code says. Option tables
are generated (docs/options.md, ``tests/loadtests/cli/test_option_docs.py``), never copied by hand."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadtests.declare.options import OPTIONS, PYTEST_PREFIX
from loadtests.errors import INCONCLUSIVE_EXIT_CODE, UNWRITTEN_EXIT_CODE, USAGE_EXIT_CODE
from loadtests.judge.gates import ALWAYS_ON
from target_server.config import ServerConfig
from tests.readme import README, readme_commands

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
MAX_README_LINES = 200
EXTENSIONS_PAGE = ROOT / "docs" / "target-server.md"
EXTENSIONS_HEADING = "Its extensions, what it does that vLLM does not"
MAIN_JOB = "pip install -e . && locust -f scenarios/mixed_truncate.py --headless -u 8 -r 8 -t 20s"
TEST_COMMAND = "pip install -e '.[test]' && python -m pytest"


def test_the_readme_starts_with_exactly_the_main_job_and_the_test_command() -> None:
    lines = README.read_text().splitlines()
    assert lines[:6] == ["# sse-soak", "", "```bash", MAIN_JOB, TEST_COMMAND, "```"]
    assert readme_commands() == [MAIN_JOB, TEST_COMMAND]


def test_the_readme_is_read_in_five_minutes() -> None:
    count = len(README.read_text().splitlines())
    assert count <= MAX_README_LINES, f"README.md has {count} lines: move detail into a docs/ page"


# -- links ------------------------------------------------------------------------------------------

PAGES = [README, ROOT / "reports" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def prose(path: Path) -> str:
    """The page without its fenced blocks: a ``#`` there is a shell comment, a ``](`` code."""
    return FENCE.sub("", path.read_text())


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped but ``-`` and
    ``_``, spaces to ``-``; a repeated one gets ``-1``, ``-2``..."""
    made: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(path), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in made:
            n += 1
            candidate = f"{slug}-{n}"
        made.add(candidate)
    return made


def local_links(path: Path) -> list[tuple[Path, str]]:
    """Each link of ``path`` to a file of this repository: the file and its anchor ('' for none)."""
    found = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto:
        file, _, anchor = target.partition("#")
        found.append(((path.parent / file).resolve() if file else path, anchor))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_resolves_to_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for target, anchor in local_links(page):
        if not target.exists():
            broken.append(f"{target.relative_to(ROOT)}: no such file")
        elif anchor and anchor not in anchors(target):
            broken.append(f"{target.relative_to(ROOT)}#{anchor}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there: {broken}"


def test_the_readme_links_every_docs_page() -> None:
    linked = {target for target, _ in local_links(README)}
    unlinked = [page.name for page in sorted((ROOT / "docs").glob("*.md")) if page.resolve() not in linked]
    assert not unlinked, f"the README's 'Where to go next' does not name {unlinked}"


def test_no_page_copies_an_option_table_by_hand() -> None:
    """Option tables are docs/options.md's, generated; a hand copy elsewhere drifts (it did)."""
    flags = {item.flag for item in OPTIONS} | {PYTEST_PREFIX + item.name.replace("_", "-") for item in OPTIONS}
    for page in PAGES:
        if page.name in ("options.md", "target-server.md"):  # the latter's table is target-server's own options
            continue
        rows = re.findall(r"^\| `(--[a-z-]+)", prose(page), re.MULTILINE)
        copied = sorted(set(rows) & flags)
        assert not copied, f"{page.relative_to(ROOT)} has a table of options {copied}: link docs/options.md instead"


# -- what the docs say of the code ------------------------------------------------------------------


def test_the_readme_names_every_always_on_gate_and_their_count() -> None:
    text = README.read_text()
    words = {3: "Three", 4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight", 9: "Nine"}
    assert f"{words[len(ALWAYS_ON)]} are always on" in text
    for gate in ALWAYS_ON:
        assert f"`{gate.name}`" in text and f"`{gate.name}`" in (ROOT / "docs" / "judging.md").read_text()


def test_the_exit_codes_in_the_readme_are_the_codes() -> None:
    text = " ".join(README.read_text().split())
    assert "`PASS` (0)" in text and "`FAIL` (1:" in text
    assert f"`INCONCLUSIVE` ({INCONCLUSIVE_EXIT_CODE}:" in text
    assert f"exit {USAGE_EXIT_CODE}, before anything runs" in text and f"{UNWRITTEN_EXIT_CODE} means" in text


def test_the_contributing_page_names_the_folders_mypy_checks() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    files = re.search(r"^\[tool\.mypy\].*?^files = \[(.*?)\]", pyproject, re.DOTALL | re.MULTILINE)
    assert files
    named = ", ".join(f"`{name}`" for name in re.findall(r'"([^"]+)"', files[1]))
    assert f"({named})" in (ROOT / "docs" / "contributing.md").read_text()


def test_ci_runs_the_readme_commands_in_a_clean_room_then_every_heavy_tier() -> None:
    """.ci/run and the workflow both make a fresh virtual environment (none of the machine's
    packages), run the README's two commands from it (``.ci/readme-commands`` reads them from the
    README: tests/test_ci.py), then every heavy tier."""
    script = (ROOT / ".ci" / "run").read_text()
    lines = script.splitlines()
    venv = next(i for i, line in enumerate(lines) if line.startswith("python3 -m venv "))
    activate = next(i for i, line in enumerate(lines) if line.startswith("source ") and "/bin/activate" in line)
    assert "--system-site-packages" not in lines[venv]
    assert venv < activate < lines.index(".ci/readme-commands") < lines.index("python -m pytest -m heavy")
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert workflow.index("python -m venv ") < workflow.index("run: .ci/readme-commands")
    assert workflow.index("run: .ci/readme-commands") < workflow.index("run: python -m pytest -m heavy")


def test_the_ci_workflow_installs_and_requires_what_ci_run_does() -> None:
    """Every tool .ci/run installs (``python -m loadtests TOOL setup``) the workflow installs before
    its heavy tiers, from PyTorch's CPU index where the nightly soak takes vLLM's torch; every tool
    .ci/run requires (``SSE_SOAK_REQUIRE_*``), the workflow's heavy step requires too."""
    script = (ROOT / ".ci" / "run").read_text()
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    setups = re.findall(r"^(python -m loadtests \w+ setup)$", script, re.MULTILINE)
    required = re.findall(r"\b(SSE_SOAK_REQUIRE_\w+)=1\b", script)
    assert {"python -m loadtests vllm setup", "python -m loadtests litellm setup"} <= set(setups)
    assert {"SSE_SOAK_REQUIRE_VLLM", "SSE_SOAK_REQUIRE_LITELLM", "SSE_SOAK_REQUIRE_CHROMIUM"} <= set(required)
    tests_at = workflow.index("run: python -m pytest -m heavy")
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
    """The docs' one list of the target server's extensions (docs/target-server.md): its heading to
    the blank line after its last item."""
    text = EXTENSIONS_PAGE.read_text()
    assert text.count(EXTENSIONS_HEADING) == 1, "docs/target-server.md lists the extensions once"
    listed = re.search(rf"{re.escape(EXTENSIONS_HEADING)}.*?\n\n(.*?)\n\n", text, re.DOTALL)
    assert listed, "the extensions are a list after their heading"
    return listed[1]


def test_the_readme_lists_the_target_servers_extensions_as_its_help_marks_them() -> None:
    helps = {flag: action.help or "" for action in ServerConfig.parser()._actions for flag in action.option_strings}
    marked = {flag for flag, text in helps.items() if "extension" in text}
    named = set(re.findall(r"`(--[a-z-]+)", readme_extensions())) & set(helps)
    assert marked and named == marked
