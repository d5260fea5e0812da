"""Make httpx importable in a gevent-patched (Locust) process.

httpcore imports trio when it is installed, and trio's import fails once gevent has removed
``select.epoll`` (AttributeError, which httpcore does not catch). Locust patches before any
locustfile is loaded, and ``loadtests`` may be imported before or after that, so whatever the
order we mark trio as absent unless something already imported it; httpcore handles an absent
trio, and nothing in sse-soak uses it. The package ``__init__`` imports this module first.
"""

from __future__ import annotations

import sys

sys.modules.setdefault("trio", None)  # type: ignore[arg-type]  # "import trio" now raises ImportError
