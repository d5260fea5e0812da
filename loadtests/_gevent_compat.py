"""Make httpx importable in a gevent-patched (Locust) process.

httpcore imports trio when it is installed, and trio's import fails once gevent has removed
``select.epoll`` (AttributeError, which httpcore does not catch). Locust patches before any
locustfile is loaded, so we cannot import httpx earlier; instead we mark trio as absent, which
httpcore handles. Nothing in a Locust process uses trio. The package ``__init__`` imports this module first.
"""

from __future__ import annotations

import select
import sys

if "trio" not in sys.modules and not hasattr(select, "epoll") and sys.platform == "linux":
    sys.modules["trio"] = None  # type: ignore[assignment]  # "import trio" now raises ImportError
