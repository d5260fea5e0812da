"""Make httpx importable in a gevent-patched (Locust) process, without its command-line client.

httpcore imports trio when it is installed, and trio's import fails once gevent has removed
``select.epoll`` (AttributeError, which httpcore does not catch). Locust patches before any
locustfile is loaded, and ``loadtests`` may be imported before or after that, so whatever the
order we mark trio as absent unless something already imported it; httpcore handles an absent
trio, and nothing in sse-soak uses it. The package ``__init__`` imports this module first. A
process that never runs Locust (pytest's, with the sse-soak plugin) gives trio back; a Locust
process that loads pytest's plugins (Locust reads a locustfile without users as a pytest file) keeps
it hidden, or the next plugin that imports trio (anyio's) fails there.

httpx also imports its command-line client at its own import (``httpx._main``: rich, pygments;
about 50 ms of every run's start-up CPU), which no sse-soak process runs: it is marked absent
unless httpx was imported already, and httpx falls back to a ``main`` that says it is missing.
The ``httpx`` command is a process of its own and keeps it.
"""

from __future__ import annotations

import sys

_hidden = "trio" not in sys.modules
sys.modules.setdefault("trio", None)  # type: ignore[arg-type]  # "import trio" now raises ImportError
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def unhide() -> None:
    """Undo the hiding in a process that never runs a load (pytest's): ``import httpx._main`` works
    again, and ``import trio`` too unless gevent has patched this process."""
    if sys.modules.get("httpx._main", False) is None:
        del sys.modules["httpx._main"]
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return
    if _hidden and "trio" in sys.modules and sys.modules["trio"] is None:
        del sys.modules["trio"]
