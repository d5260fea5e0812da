"""The fast tier's guard refuses every way of starting a child process, and says who tried."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.no_process import StartedAProcess, no_child_processes

pytestmark = pytest.mark.fast

PASS = [sys.executable, "-c", "pass"]
PASS_POPEN = f"subprocess.Popen({PASS!r})"


async def asyncio_subprocess() -> None:
    await asyncio.create_subprocess_exec(*PASS)


# Each looks its starter up when called: one bound before the guard (``"os.fork": os.fork``) would start a process.
STARTS: dict[str, Callable[[], Any]] = {
    "subprocess.run": lambda: subprocess.run(PASS, check=True),
    "os.popen": lambda: os.popen("true"),
    "asyncio": lambda: asyncio.run(asyncio_subprocess()),
    "os.system": lambda: os.system("true"),
    "os.fork": lambda: os.fork(),
    "os.spawnv": lambda: os.spawnv(os.P_WAIT, sys.executable, PASS),
    "os.posix_spawn": lambda: os.posix_spawn(sys.executable, PASS, os.environ),
}


@pytest.mark.parametrize("how", sorted(STARTS))
def test_every_way_of_starting_a_process_is_refused_naming_the_test(how: str) -> None:
    with no_child_processes("tests/test_x.py::test_y") as refused, pytest.raises(StartedAProcess) as raised:
        STARTS[how]()
    assert str(raised.value).startswith("tests/test_x.py::test_y is marked fast, and fast tests start no process")
    assert refused == [str(raised.value)]


def test_a_refusal_the_code_under_test_swallows_is_still_recorded() -> None:
    with no_child_processes("t") as refused, contextlib.suppress(Exception):
        subprocess.run(PASS, check=True)
    assert refused == [f"t is marked fast, and fast tests start no process; it tried to start one: {PASS_POPEN}"]


def test_the_starters_are_restored_after_the_block() -> None:
    before = (subprocess.Popen.__init__, os.fork, os.posix_spawn, os.system)
    with no_child_processes("t"):
        assert subprocess.Popen.__init__ is not before[0] and os.fork is not before[1]
    assert (subprocess.Popen.__init__, os.fork, os.posix_spawn, os.system) == before
