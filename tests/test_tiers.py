"""The test tiers as docs/testing.md states them: a bare ``python -m pytest`` runs the install tier,
no heavy test; ``-m heavy`` runs every heavy tier; a file named on the command line runs whole. The
tiers are pyproject's markers, declared there once (``tests/conftest.py`` reads the heavy ones)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import heavy_tiers

ROOT = Path(__file__).resolve().parents[1]
TESTING_PAGE = ROOT / "docs" / "testing.md"
TIER_ROW = re.compile(r"^\| `python -m pytest -m (?P<tier>\w+)` \|", re.MULTILINE)
NOT_TIERS = {"fast", "smoke", "heavy"}
"""The markers that are not heavy tiers: the fast tier (of the install tier), a label, and ``heavy``
itself (set from the tiers)."""


def collected(tmp_path: Path, *args: str) -> dict[str, set[str]]:
    """The tests ``python -m pytest ARGS`` would run, each with its markers."""
    listing = tmp_path / f"listing-{len(list(tmp_path.iterdir()))}.json"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SSE_SOAK_TIER_LISTING": str(listing)},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    return {nodeid: set(markers) for nodeid, markers in json.loads(listing.read_text()).items()}


@pytest.mark.fast
def test_the_heavy_tiers_are_the_markers_pyproject_declares_as_such(pytestconfig: pytest.Config) -> None:
    """Read from their declaration (``'<name>: heavy tier: ...'``), never listed a second time."""
    tiers = heavy_tiers(pytestconfig)
    assert len(tiers) >= 7 and len(set(tiers)) == len(tiers) and not NOT_TIERS & set(tiers)
    assert {"proxies", "vllm", "extended"} <= set(tiers)


@pytest.mark.fast
def test_the_testing_page_lists_exactly_the_heavy_tiers(pytestconfig: pytest.Config) -> None:
    listed = [match["tier"] for match in TIER_ROW.finditer(TESTING_PAGE.read_text())]
    assert listed == [*heavy_tiers(pytestconfig), "heavy"]


@pytest.mark.extended  # collects the suite three times
def test_a_bare_run_is_the_install_tier_and_every_heavy_test_is_of_a_named_tier(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    tiers = set(heavy_tiers(pytestconfig))
    everything = collected(tmp_path, "-m", "heavy or not heavy")
    heavy = {nodeid for nodeid, markers in everything.items() if "heavy" in markers}
    assert heavy and all(markers & tiers for nodeid, markers in everything.items() if nodeid in heavy)
    install = set(collected(tmp_path))
    assert install == set(everything) - heavy
    assert {nodeid for nodeid, markers in everything.items() if "fast" in markers} <= install
    for tier in tiers:
        assert any(tier in markers for markers in everything.values()), f"no test of the {tier} tier"


@pytest.mark.extended
def test_a_named_file_runs_whole_heavy_tests_included(tmp_path: Path) -> None:
    named = collected(tmp_path, "tests/loadtests/services/test_proxies.py")
    assert any("proxies" in markers for markers in named.values())
    assert set(named) == set(
        collected(tmp_path, "tests/loadtests/services/test_proxies.py", "-m", "heavy or not heavy")
    )
