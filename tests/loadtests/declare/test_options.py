"""One declaration of every option: each surface (Locust, the soak, pytest, launch) is made from it and
refuses a bad value by the same rule."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import subprocess
import sys
import textwrap
from argparse import Namespace
from typing import cast

import pytest

from loadtests.cli.commands import parser as command_line
from loadtests.declare.options import (
    OPTIONS,
    Surface,
    add_argparse_options,
    check_locust_options,
    check_run_time,
    check_value,
    locust_arguments,
    on,
    option,
)
from loadtests.errors import UsageError
from loadtests.launch import Launch
from tests.loadtests.locust_run import ROOT


def _soak_parser() -> argparse.ArgumentParser:
    commands = command_line()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return cast(dict[str, argparse.ArgumentParser], commands.choices)["soak"]


@pytest.mark.fast
def test_every_option_is_declared_once_and_each_surface_is_made_from_the_declaration() -> None:
    names = [item.name for item in OPTIONS]
    assert len(names) == len(set(names))
    soak_flags = {action.dest for action in _soak_parser()._actions if action.option_strings} - {"help"}
    assert soak_flags == {item.name for item in on(Surface.SOAK)}
    assert {item.name for item in on(Surface.PYTEST)} <= {item.name for item in on(Surface.LAUNCH)}
    fields = {field.name for field in dataclasses.fields(Launch)} | {"duration"}  # duration is duration_s
    assert {item.name for item in on(Surface.LAUNCH)} <= fields  # the pytest plugin builds a Launch of them


@pytest.mark.fast
@pytest.mark.parametrize(
    ("name", "bad", "soak_says", "locust_says"),
    [
        ("frame_sample_rate", 1.5, "expected a share from 0 to 1, got '1.5'", "must be a share from 0 to 1, got 1.5"),
        ("max_in_flight", 0, "expected a whole number >= 1, got '0'", "must be at least 1, got 0"),
        ("rate", math.inf, "expected a positive, finite number, got 'inf'", "must be a positive, finite number"),
    ],
)
def test_a_value_is_refused_by_one_rule_on_every_surface(
    name: str, bad: float, soak_says: str, locust_says: str
) -> None:
    item = option(name)
    parser = argparse.ArgumentParser()
    add_argparse_options(parser, Surface.SOAK)
    with pytest.raises(argparse.ArgumentTypeError, match=soak_says):
        convert = parser._option_string_actions[item.flag].type
        assert callable(convert)
        convert(f"{bad:g}")
    with pytest.raises(ValueError, match=f"{item.flag}.*{locust_says}"):
        check_value(name, bad)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("0.0.0.0", "must be the address the workers reach this host at, not the wildcard 0.0.0.0"),
        ("::", "not the wildcard ::"),
        ("master.local", "must be an IP address of this host, got 'master.local'"),
    ],
)
def test_server_bind_is_an_address_workers_can_reach(bad: str, said: str) -> None:
    with pytest.raises(ValueError, match=f"--server-bind.*{re.escape(said)}"):
        check_value("server_bind", bad)
    check_value("server_bind", "10.0.0.1")  # an address of this host: taken as it is


def _locust_namespace(**given: object) -> Namespace:
    values = {item.name: item.default_on(Surface.LOCUST) for item in on(Surface.LOCUST)}
    values["report_dir"] = None  # checked against the file system; not under test here
    return Namespace(**{**values, **given})


@pytest.mark.fast
def test_the_web_uis_text_is_converted_and_checked_as_the_command_line_is() -> None:
    form = _locust_namespace(rate="2.5", max_in_flight="3", arrival_seed="7", model="", server_args="")
    check_locust_options(form)
    assert (form.rate, form.max_in_flight, form.arrival_seed) == (2.5, 3, 7)
    assert (form.model, form.server_args) == (None, "")  # an empty field: not given (its default)
    with pytest.raises(UsageError, match=r"^--rate: expected a number, got 'fast'$"):
        check_locust_options(_locust_namespace(rate="fast"))
    with pytest.raises(UsageError, match=r"^--client-idle-timeout must be a positive number of seconds, got 0$"):
        check_locust_options(_locust_namespace(client_idle_timeout="0"))
    with pytest.raises(UsageError, match="give --rate too"):
        check_locust_options(_locust_namespace(max_in_flight="2"))


@pytest.mark.fast
def test_a_launchers_command_line_comes_from_the_declaration() -> None:
    given = {"duration": 7, "users": 3, "host": "http://h:1", "frame_sample_rate": 0.5, "no_server_metrics": True}
    assert locust_arguments({**given, "tags": ("a", "b"), "model": None}) == [
        "--run-time=7s",
        "--users=3",
        "--host=http://h:1",
        "--frame-sample-rate=0.5",
        "--no-server-metrics",
        "--tags=a",
        "--tags=b",
    ]
    with pytest.raises(ValueError, match="--api-key is secret"):
        locust_arguments({"api_key": "s3cret"})


def test_locusts_web_ui_lists_every_scenario_option_a_test_can_change() -> None:
    """In a child: importing Locust patches the process for gevent."""
    code = textwrap.dedent("""
        import sys
        sys.argv = ["locust", "-f", "scenarios/proxy_timeout.py"]
        from locust.argument_parser import parse_locustfile_option, ui_extra_args_dict
        from locust.util.load_locustfile import load_locustfile
        load_locustfile("scenarios/proxy_timeout.py")
        extra = ui_extra_args_dict(["-f", "scenarios/proxy_timeout.py"])
        print(" ".join(sorted(extra)))
        shown = extra["proxy"]["default_value"], extra["keep_alive_interval"]["default_value"]
        print(*shown)
    """)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, result.stderr
    listed, defaults = result.stdout.splitlines()[-2:]
    # Every option a test can change; none fixed for the run (a field for it would change nothing).
    assert set(listed.split()) == {item.name for item in on(Surface.LOCUST) if item.form}
    assert {"api_key", "run_id", "flush_interval", "ca_cert"}.isdisjoint(listed.split())
    # The proxy and keep-alive fields empty, so that a value given can be told from none (the scenario's
    # proxy and 0.5 s are the bundled server's, never added to nor assumed of --host).
    assert defaults == "None None"


@pytest.mark.fast
@pytest.mark.parametrize("key", ["abc\r\nX-Injected: KEYSECRET", "with space", "tab\tKEYSECRET", "ünï"])
def test_an_api_key_that_cannot_be_a_header_value_is_refused_without_being_shown(key: str) -> None:
    with pytest.raises(ValueError, match=r"^--api-key must") as caught:
        check_value("api_key", key)
    assert "KEYSECRET" not in str(caught.value) and key not in str(caught.value)
    with pytest.raises(UsageError, match=r"^--api-key must") as refused:
        check_locust_options(Namespace(api_key=key, rate=None, max_in_flight=None))
    assert "KEYSECRET" not in str(refused.value)


@pytest.mark.fast
def test_a_bearer_token_is_accepted() -> None:
    assert check_value("api_key", "sk-Abc_123.x~+/=") == "sk-Abc_123.x~+/="


@pytest.mark.fast
@pytest.mark.parametrize(
    ("argv", "seconds", "got"),
    [
        (["--headless", "-t", "0s"], 0, "0s"),
        (["-t", "10s", "-t0m"], 0, "0m"),  # the last one given counts, as for Locust
        (["--run-time=0h"], 0, "0h"),
        (["--run-time", "0"], 0, "0"),
        ([], 0, "0s"),  # from LOCUST_RUN_TIME or a config file: as Locust parsed it
    ],
)
def test_a_run_time_that_is_not_positive_is_refused_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], seconds: int, got: str
) -> None:
    """Locust reads ``-t 0s`` as no limit: the run went on until Ctrl-C, then passed."""
    monkeypatch.delenv("LOCUST_RUN_TIME", raising=False)
    with pytest.raises(UsageError) as refused:
        check_run_time(seconds, argv)
    assert str(refused.value) == f"-t/--run-time must be positive (got {got!r}); omit it to run until stopped"


@pytest.mark.fast
def test_a_positive_or_absent_run_time_is_taken() -> None:
    check_run_time(None, [])  # no -t: until stopped, as asked
    check_run_time(1, ["-t", "1s"])


@pytest.mark.fast
@pytest.mark.parametrize("surface", [Surface.SOAK, Surface.PYTEST])
def test_a_duration_that_is_not_positive_is_refused_in_the_same_words_on_every_surface(surface: Surface) -> None:
    parser = argparse.ArgumentParser()
    add_argparse_options(parser, surface)
    duration = next(action for action in parser._actions if action.dest == "duration")
    assert duration.type is not None
    for text in ("0s", "0m", "0", "-5s"):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"must be positive (got {text!r})")):
            duration.type(text)  # type: ignore[operator]
