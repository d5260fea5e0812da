"""A vLLM-faithful OpenAI-compatible streaming server for load and soak tests, with no GPU.

Modules, one concept each: ``config`` (all knobs, also the CLI), ``protocol`` (request and
error shapes), ``tokenizer``, ``engine`` (slots, FIFO queue, prefill and decode timing),
``streaming`` (chunk framing), ``keep_alive``, ``faults``, ``trace``, ``metrics``, ``app``
(routes), ``__main__`` (uvicorn on a socket, ready line) and ``lifeline`` (the process protocol
with a harness that starts the server: its stdin pipe and refusal line; the one module the
harness imports).
"""

from target_server.app import create_app
from target_server.config import FAILURE_TYPES, ServerConfig
from target_server.keep_alive import KEEP_ALIVE_COMMENT, with_keep_alive

__all__ = ["FAILURE_TYPES", "KEEP_ALIVE_COMMENT", "ServerConfig", "create_app", "with_keep_alive"]
