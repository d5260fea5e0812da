"""The history's page: one self-contained HTML file, regressions first, then each series' trends."""

from __future__ import annotations

import html
from pathlib import Path

from loadtests.report.history import History


def write_history_page(history: History, path: Path) -> None:
    """TEMPORARY stand-in until the history page is merged (it replaces this whole function): the
    nights as a plain table, then the flags and what was left out, written atomically."""
    flags = "".join(f"<li>{html.escape(f'{f.series}: {f.figure} on {f.run_dir}')}</li>" for f in history.flags)
    left = "".join(f"<li>{html.escape(f'{item.path}: {item.why}')}</li>" for item in history.left_out)
    text = f"<!doctype html><title>history</title><ul>{flags}</ul><ul>{left}</ul>{history.nights.to_html()}"
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
