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

__all__ = ["install_where_locust_runs"]


def install_where_locust_runs() -> None:
    """Install the run controller's hooks when Locust runs this process (Locust is imported); else nothing."""
    if "locust" in sys.modules:
        importlib.import_module("loadtests.run.controller").install()
