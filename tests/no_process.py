"""The fast tier's promise, checked: a test marked ``fast`` starts no process.

Every way the standard library starts a child goes through one of the functions refused here:
``subprocess`` (and so ``os.popen`` and asyncio's subprocesses) through ``Popen``; ``os.system``,
``os.spawn*``, ``pty`` and multiprocessing's fork through ``os.fork``/``os.forkpty``;
``os.posix_spawn``; multiprocessing's spawn and forkserver through ``_posixsubprocess.fork_exec``.
A refused start raises, and is also recorded, so that code which catches the error cannot hide it.
The standard library looks these functions up when it calls them; only a starter bound before the
test (``from os import fork`` at import time) would slip past.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, NoReturn

import pytest

_posixsubprocess: ModuleType | None
try:
    import _posixsubprocess
except ImportError:  # not on Windows
    _posixsubprocess = None


class StartedAProcess(RuntimeError):
    """A test of the fast tier tried to start a child process."""


@contextmanager
def no_child_processes(test: str) -> Iterator[list[str]]:
    """Within the block, starting a child process raises ``StartedAProcess`` naming ``test``; the
    yielded list collects every refused start, caught or not."""
    refused: list[str] = []

    def refuse(how: str) -> NoReturn:
        message = f"{test} is marked fast, and fast tests start no process; it tried to start one: {how}"
        refused.append(message)
        raise StartedAProcess(message)

    def refused_popen(self: subprocess.Popen[Any], args: Any, *_: Any, **__: Any) -> None:
        refuse(f"subprocess.Popen({args!r})")

    def refusing(name: str) -> Callable[..., NoReturn]:
        def refused_call(*args: Any, **_: Any) -> NoReturn:
            refuse(f"{name}({args[0]!r}, ...)" if args else f"{name}()")

        return refused_call

    starters = [(os, name) for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")]
    if _posixsubprocess is not None:
        starters.append((_posixsubprocess, "fork_exec"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "__init__", refused_popen)
        for module, name in starters:
            if hasattr(module, name):
                patch.setattr(module, name, refusing(f"{module.__name__}.{name}"))
        yield refused
