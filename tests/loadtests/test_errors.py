"""The exception tree's rule at the entry points: an ``SseSoakError`` is one line and its exit code; an
``InternalSignal`` that escapes its handler is reported as a defect of sse-soak (exit 70), never as
bad input (2); and the classes that took the place of bare builtins still are those builtins."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest

from loadtests import errors
from loadtests.cli import commands
from loadtests.errors import (
    INTERNAL_DEFECT_EXIT_CODE,
    USAGE_EXIT_CODE,
    InternalSignal,
    InvalidValue,
    LineTooLong,
    ScheduleClosed,
    SseSoakError,
    UnknownName,
    UsageError,
    error_kind,
    reported,
)
from tests.loadtests.locust_run import ROOT

DEFECT = "internal defect of sse-soak (please report it)"


def _signals() -> list[InternalSignal]:
    """One instance of every internal signal of the tree."""
    made: list[InternalSignal] = []
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, InternalSignal):
            if cls is errors.LineTooLong:
                made.append(LineTooLong(64))
            elif cls is errors.BadRequest:
                made.append(errors.BadRequest("400 Bad Request", "no request line"))
            else:
                made.append(cls("the signal's own words"))
    return made


def _main_exits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], raises: Callable[[], None]
) -> tuple[object, str]:
    """The exit code and stderr of ``python -m loadtests scenarios`` when the command raises as
    ``raises`` does (the command is swapped for it: nothing shipped lets a signal escape)."""

    def command(_options: object) -> None:
        raises()

    monkeypatch.setitem(commands._COMMANDS, "scenarios", command)
    with pytest.raises(SystemExit) as exited:
        commands.main(["scenarios"])
    out, err = capsys.readouterr()
    assert out == ""
    return exited.value.code, err


@pytest.mark.fast
def test_an_internal_signal_reaching_the_command_line_is_an_internal_defect_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def leak() -> None:
        raise ScheduleClosed("the schedule closed")

    code, err = _main_exits(monkeypatch, capsys, leak)
    assert code == INTERNAL_DEFECT_EXIT_CODE == 70
    assert err == f"python -m loadtests scenarios: {DEFECT}: ScheduleClosed was not caught: the schedule closed\n"


@pytest.mark.fast
def test_a_usage_error_reaching_the_command_line_stays_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> None:
        raise InvalidValue("--duration must be positive (got '0s')")

    code, err = _main_exits(monkeypatch, capsys, refuse)
    assert (code, err) == (USAGE_EXIT_CODE, "python -m loadtests scenarios: --duration must be positive (got '0s')\n")


@pytest.mark.fast
@pytest.mark.parametrize("signal", _signals(), ids=lambda signal: type(signal).__name__)
def test_every_internal_signal_is_reported_as_a_defect_never_as_a_usage_error(signal: InternalSignal) -> None:
    line, code = reported(signal)
    assert code == INTERNAL_DEFECT_EXIT_CODE and code not in (0, 1, 2, 3, 4)
    assert line == f"{DEFECT}: {type(signal).__name__} was not caught: {signal}"
    assert not isinstance(signal, SseSoakError) and not hasattr(signal, "exit_code")


@pytest.mark.fast
def test_an_error_is_reported_with_its_own_line_and_exit_code() -> None:
    assert reported(UsageError("--host: no scheme")) == ("--host: no scheme", 2)
    assert reported(errors.ServerStartError("vllm exited with 1")) == ("vllm exited with 1", 1)
    assert reported(errors.InconclusiveRun("no gate judged")) == ("no gate judged", 3)
    assert reported(errors.RecordNotWritten("could not write x: No space left")) == (
        "could not write x: No space left",
        4,
    )


@pytest.mark.fast
def test_an_internal_signal_is_no_sse_soak_error_so_an_entry_points_error_clause_cannot_take_it() -> None:
    with pytest.raises(ScheduleClosed):
        try:
            raise ScheduleClosed
        except SseSoakError:  # what an entry point catches as bad input
            pytest.fail("an internal signal was taken for an error with an exit code")


@pytest.mark.fast
def test_the_classes_in_place_of_bare_builtins_are_still_those_builtins_in_messages_too() -> None:
    """``except ValueError`` / ``KeyError`` callers keep working, and one-line messages that name the
    kind (``gate spec 1 cannot be rebuilt (ValueError: ...)``) read as before."""
    with pytest.raises(ValueError, match=r"^no such thing$"):
        raise InvalidValue("no such thing")
    assert str(UnknownName("no option 'x'")) == str(KeyError("no option 'x'"))
    assert [error_kind(cls("x")) for cls in (InvalidValue, errors.WrongType, UnknownName, errors.OutOfOrder)] == [
        "ValueError",
        "TypeError",
        "KeyError",
        "RuntimeError",
    ]
    assert error_kind(errors.SummaryError("x")) == "SummaryError" and error_kind(OSError("x")) == "OSError"
    with pytest.raises(AssertionError):
        raise errors.NotPassed("the run did not pass")


_HOOK = """
import sys
from loadtests.errors import {name}
from loadtests.run.controller import _refusing

@_refusing
def hook() -> None:
    raise {name}("raised by the hook")

hook()
"""


@pytest.mark.parametrize(("name", "code", "line"), [
    ("ScheduleClosed", 70, f"sse-soak: {DEFECT}: ScheduleClosed was not caught: raised by the hook"),
    ("UsageError", 2, "sse-soak: raised by the hook"),
])  # fmt: skip
def test_the_run_controllers_locust_hooks_report_an_internal_signal_as_a_defect(
    name: str, code: int, line: str
) -> None:
    """The controller's hooks are an entry point too (Locust runs them): the same rule, in a process
    of its own (importing the controller imports Locust, which patches the process for gevent)."""
    script = _HOOK.format(name=name)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr.splitlines()[-1:]) == (code, "", [line]), result.stderr
