"""docs/options.md, rendered from the one options declaration (``loadtests.declare.options.OPTIONS``).

The option reference is generated, never written by hand, so it cannot drift from the options the
code declares: ``python -m loadtests docs options > docs/options.md`` writes it, and a fast test
fails when the committed file differs from ``render()``. One table per surface (a scenario's
command line, the web UI's form, the soak, the pytest plugin, ``launch()``), each row the option's
flag, its kind of value, its default on that surface and one line of help: ``Option.short`` when
declared, else the help's first sentence. A line longer than ``MAX_HELP`` is a mistake the test
names (declare a ``short``), so no table cell grows into a paragraph again.
"""

from __future__ import annotations

import re
from typing import Any

from loadtests.declare.options import DURATION, FLUSH_SECONDS, OPTIONS, PYTEST_PREFIX, SECONDS, Option, Surface

__all__ = ["COMMAND", "MAX_HELP", "one_line_help", "render"]

COMMAND = "python -m loadtests docs options > docs/options.md"
"""How docs/options.md is regenerated."""
MAX_HELP = 120
"""The longest help a table cell takes; a longer one needs ``Option.short``."""

_SENTENCE_END = re.compile(r"(?<=[a-z0-9)'])\. (?=[A-Z$])")


def one_line_help(item: Option) -> str:
    """The option's help for a table: its ``short``, else its help's first sentence."""
    if item.short is not None:
        return item.short
    return _SENTENCE_END.split(item.help, maxsplit=1)[0].removesuffix(".")


def _flag(item: Option, surface: Surface) -> str:
    if surface is Surface.PYTEST:
        return PYTEST_PREFIX + item.name.replace("_", "-")
    if surface is Surface.LAUNCH:
        return f"{item.name}="
    if surface is Surface.LOCUST:
        return item.locust_flag or item.flag
    return item.flag


def _value(item: Option) -> str:
    if item.kind.switch:
        return "a switch (no value)"
    if item.kind.choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in item.kind.choices)
    return item.kind.expected


def _shown(value: Any, item: Option, surface: Surface) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if item.kind is DURATION and surface is not Surface.LAUNCH:
        return f"{value}s" if surface is Surface.PYTEST else f"{value} s"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if item.kind in (SECONDS, FLUSH_SECONDS) or (item.kind is DURATION and surface is Surface.LAUNCH):
        text += " s"
    return f"`{text}`" if text and not text.endswith(" s") else text or '`""`'


def _default(item: Option, surface: Surface) -> str:
    value = item.default_on(surface)
    text = "not set" if value is None else _shown(value, item, surface)
    if item.scenario_field is not None and surface is Surface.LOCUST:
        text += ", or the scenario's own"
    if item.env_var is not None and surface is not Surface.LAUNCH:
        text += f"; `${item.env_var}`"
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(surface: Surface, items: list[Option]) -> list[str]:
    lines = ["| option | value | default | what it does |", "| --- | --- | --- | --- |"]
    for item in items:
        cells = (f"`{_flag(item, surface)}`", _value(item), _default(item, surface), one_line_help(item))
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return lines


_SECTIONS: tuple[tuple[str, Surface, str], ...] = (
    (
        "Scenario options: `locust -f scenarios/<name>.py`",
        Surface.LOCUST,
        "Beside Locust's own (`-u`, `-r`, `-t`, `--headless`, `--host`, `--processes`, ...). "
        "`python scenarios/<name>.py --help` lists them with Locust's.",
    ),
    (
        "The web UI's form",
        Surface.LOCUST,
        "The scenario options a test can change: shown in the web UI's form, in force from the next Start "
        "(on workers too). The others are fixed for the run and given on the command line only.",
    ),
    (
        "The soak: `python -m loadtests soak`",
        Surface.SOAK,
        "Options after `--` go to Locust unchanged, e.g. `-- --proxy nginx`.",
    ),
    (
        "The pytest plugin: `pytest --sse-soak-...`",
        Surface.PYTEST,
        "The session's defaults for every `sse_soak.run()` and for `pytest --pyargs loadtests.smoke`.",
    ),
    (
        "`sse_soak.run()` keywords and `launch.Launch` fields",
        Surface.LAUNCH,
        "Defaults here are `launch.Launch`'s; the `sse_soak` fixture starts from the session's `--sse-soak-*` "
        "options instead. `Launch` names the duration `duration_s`. Any other option of the scenario or of "
        'Locust is a keyword too (`server_args="--seed 3"`, `processes=2`).',
    ),
)


def render() -> str:
    """The whole of docs/options.md."""
    lines = [
        "# Options",
        "",
        f"<!-- Generated from loadtests/declare/options.py by `{COMMAND}`: do not edit by hand. -->",
        "",
        "Every option is declared once, in `loadtests/declare/options.py`, and checked by one rule wherever it is "
        "given. This page is generated from that declaration; `--help` on each command says the same at "
        "more length.",
        "",
    ]
    for title, surface, note in _SECTIONS:
        items = [item for item in OPTIONS if surface in item.surfaces]
        if title.startswith("The web UI"):
            items = [item for item in items if item.form]
        lines += [f"## {title}", "", note, "", *_table(surface, items), ""]
    return "\n".join(lines)
