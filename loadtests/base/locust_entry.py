"""How a locustfile reaches Locust: declaring a ``Scenario``, or a user class of ours, in a process
Locust runs hands the run controller's two hooks to Locust, once per process
(``loadtests.run.controller.install``). Importing ``loadtests`` or any of its names registers
nothing.

Locust offers no other moment: it fires its first event (``init_command_line_parser``) after it
imported the locustfile, so the hooks must be in place by the end of that import. The declaration
is the locustfile's own act, and where Locust does not run (a test, a report, ``launch``: Locust not
imported) it stays a value. The controller sits in the ``run`` stage, above the declarations that
call this (``declare``, ``load``): it is named here, at run time, the one reference of ``base`` to a
stage above it.
"""

from __future__ import annotations

import importlib
import sys
from types import FrameType

from loadtests.base.safe_text import printable
from loadtests.errors import SseSoakError, reported

__all__ = ["install_where_locust_runs", "refuse_while_locust_imports"]

_LOCUSTFILE_LOADER = "locust.util.load_locustfile"
"""The module of Locust's ``load_locustfile``, which imports each ``-f`` file."""


def install_where_locust_runs() -> None:
    """Install the run controller's hooks when Locust runs this process (Locust is imported); else nothing."""
    if "locust" in sys.modules:
        importlib.import_module("loadtests.run.controller").install()


def _locust_is_importing_a_locustfile() -> bool:
    """Locust's ``load_locustfile`` is on this thread's stack: the code running is a locustfile's."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == _LOCUSTFILE_LOADER:
            return True
        frame = frame.f_back
    return False


def refuse_while_locust_imports(exc: SseSoakError) -> None:
    """A declaration's error (a scenario's name...) met while Locust imports the locustfile: ``exc``
    as one line on stderr and its exit code (2 for a usage error), as every other refusal of a run,
    not Locust's traceback of the import. Anywhere else (a test, ``launch``, a report) it returns,
    and the caller raises ``exc``."""
    if _locust_is_importing_a_locustfile():
        line, exit_code = reported(exc)
        print(printable(f"sse-soak: {line}"), file=sys.stderr, flush=True)
        sys.exit(exit_code)
