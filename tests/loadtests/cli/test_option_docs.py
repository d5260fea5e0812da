"""docs/options.md is the generator's output, so the option reference cannot drift from the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.cli.option_docs import COMMAND, MAX_HELP, one_line_help, render
from loadtests.declare.options import OPTIONS, PYTEST_PREFIX, Surface, on

pytestmark = pytest.mark.fast

PAGE = Path(__file__).resolve().parents[3] / "docs" / "options.md"


def test_docs_options_md_is_the_generators_output() -> None:
    assert PAGE.read_text() == render(), f"docs/options.md is out of date: regenerate it with `{COMMAND}`"


def test_every_options_table_help_is_one_short_line() -> None:
    too_long = {item.name: len(one_line_help(item)) for item in OPTIONS if len(one_line_help(item)) > MAX_HELP}
    assert not too_long, f"give these options a short= of at most {MAX_HELP} characters: {too_long}"
    assert all("\n" not in one_line_help(item) for item in OPTIONS)


def test_the_page_lists_every_option_of_every_surface() -> None:
    page = render()
    for item in on(Surface.PYTEST):
        assert f"`{PYTEST_PREFIX}{item.name.replace('_', '-')}`" in page
    for item in on(Surface.LOCUST) + on(Surface.SOAK):
        assert f"`{item.locust_flag or item.flag}`" in page or f"`{item.flag}`" in page
    for item in on(Surface.LAUNCH):
        assert f"`{item.name}=`" in page


def test_the_web_ui_table_lists_the_form_options_only() -> None:
    section = render().split("## The web UI's form", 1)[1].split("\n## ", 1)[0]
    for item in on(Surface.LOCUST):
        assert (f"| `{item.flag}` |" in section) == item.form, item.name


def test_a_first_sentence_stops_at_its_full_stop_not_at_an_abbreviation() -> None:
    duration = next(item for item in OPTIONS if item.name == "duration")
    assert one_line_help(duration) == "how long the run sends load: e.g. 90s, 20m, 8h, 1h30m or plain seconds"


def test_the_docs_verb_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    from loadtests.cli.commands import main

    with pytest.raises(SystemExit) as exited:
        main(["docs", "options"])
    assert exited.value.code == 0 and capsys.readouterr().out == render()
