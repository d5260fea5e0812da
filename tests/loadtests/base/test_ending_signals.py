"""The signals that end a run are one definition: no module of the harness names its own set."""

from __future__ import annotations

import ast
import signal
from pathlib import Path

import pytest

from loadtests.base.ending_signals import ENDING_SIGNALS

pytestmark = pytest.mark.fast

HARNESS = Path(__file__).resolve().parents[3] / "loadtests"
DEFINITION = HARNESS / "base" / "ending_signals.py"


def _signals_named(node: ast.expr) -> set[str]:
    """The ``signal.SIGxxx`` names a tuple, list or set literal holds."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set()
    return {
        element.attr
        for element in node.elts
        if isinstance(element, ast.Attribute) and element.attr.startswith("SIG") and not element.attr.startswith("SIG_")
    }


def test_a_closed_terminal_ends_a_run_as_ctrl_c_and_sigterm_do() -> None:
    assert set(ENDING_SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def test_no_module_of_the_harness_lists_ending_signals_of_its_own() -> None:
    """A literal such as ``(signal.SIGINT, signal.SIGTERM)`` is how SIGHUP was left out of every
    handler: the harness names the set once (``loadtests.base.ending_signals``) and iterates it."""
    ending = {sig.name for sig in ENDING_SIGNALS}
    own_sets = []
    for module in sorted(HARNESS.rglob("*.py")):
        if module == DEFINITION:
            continue
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.expr):
                continue
            named = _signals_named(node)
            if len(named & ending) >= 2:
                own_sets.append(f"{module.relative_to(HARNESS.parent)}:{node.lineno}: {sorted(named)}")
    assert not own_sets, own_sets
