"""Make httpx importable in a gevent-patched (Locust) process.

httpcore imports trio when it is installed, and trio's import fails once gevent has removed
``select.epoll`` (AttributeError, which httpcore does not catch). Locust patches before any
locustfile is loaded, and ``loadtests`` may be imported before or after that, so whatever the
order we mark trio as absent unless something already imported it; httpcore handles an absent
trio, and nothing in sse-soak uses it. The package ``__init__`` imports this module first. A
process that never runs Locust (pytest's, with the sse-soak plugin) gives trio back; a Locust
process that loads pytest's plugins (Locust reads a locustfile without users as a pytest file) keeps
it hidden, or the next plugin that imports trio (anyio's) fails there.
"""

from __future__ import annotations

import sys

_hidden = "trio" not in sys.modules
sys.modules.setdefault("trio", None)  # type: ignore[arg-type]  # "import trio" now raises ImportError


def unhide_trio() -> None:
    """Undo the hiding, unless gevent has patched this process: ``import trio`` works again."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return
    if _hidden and "trio" in sys.modules and sys.modules["trio"] is None:
        del sys.modules["trio"]
