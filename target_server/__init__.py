"""A vLLM-faithful OpenAI-compatible streaming server for load and soak tests, with no GPU.

Modules, one concept each: ``config`` (all knobs, also the CLI), ``protocol`` (request and
error shapes), ``tokenizer``, ``engine`` (slots, FIFO queue, prefill and decode timing),
``streaming`` (chunk framing), ``keep_alive``, ``faults``, ``trace``, ``metrics``, ``app``
(routes), ``__main__`` (uvicorn on a socket, ready line) and ``lifeline`` (the process protocol
with a harness that starts the server: its stdin pipe and refusal line; the one module the
harness imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "FAILURE_TYPES": "target_server.config",
    "KEEP_ALIVE_COMMENT": "target_server.keep_alive",
    "ServerConfig": "target_server.config",
    "create_app": "target_server.app",
    "with_keep_alive": "target_server.keep_alive",
}
"""Re-exported lazily: the harness imports ``lifeline`` alone, and must not pay for FastAPI (about
0.25 s of CPU at every Locust start) when it starts no server of its own."""

__all__ = ["FAILURE_TYPES", "KEEP_ALIVE_COMMENT", "ServerConfig", "create_app", "with_keep_alive"]

if TYPE_CHECKING:  # what the lazy names are, for editors and type checkers; never run
    from target_server.app import create_app
    from target_server.config import FAILURE_TYPES, ServerConfig
    from target_server.keep_alive import KEEP_ALIVE_COMMENT, with_keep_alive


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'target_server' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
