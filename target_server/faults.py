"""Fault injection: which request gets which failure, and the exceptions that carry it.

A request draws a fault with probability ``failure_injection_rate`` percent, the kind uniformly
from ``failure_types``, from a generator seeded by ``--seed`` (same seed, same sequence of
draws; with ``--api-server-count``, each process has its own, seeded ``--seed + index``: ``share``).
Faults that happen before the response (``server_error``, ``rate_limit``) are answered as error
bodies; the others strike mid-stream after half of the tokens:

- ``inband_error``: the engine fails; the stream carries ``data: {"error": ..., "code": 500}`` and
  ``data: [DONE]`` under HTTP 200, as vLLM does.
- ``stall``: the engine goes silent for ``stall_seconds`` and then carries on. Keep-alive, when on,
  still runs through the stall, exactly as vLLM's keep-alive runs through an engine hang.
- ``disconnect``: the server drops the connection without the final chunk.
"""

from __future__ import annotations

import enum
import random

from target_server.config import ServerConfig


class Fault(str, enum.Enum):
    SERVER_ERROR = "server_error"
    INBAND_ERROR = "inband_error"
    STALL = "stall"
    DISCONNECT = "disconnect"
    RATE_LIMIT = "rate_limit"

    @property
    def strikes_mid_stream(self) -> bool:
        return self in (Fault.INBAND_ERROR, Fault.STALL, Fault.DISCONNECT)


class InjectedEngineError(RuntimeError):
    """The engine failed mid-generation (the ``inband_error`` fault)."""


class InjectedDisconnect(Exception):
    """Raised out of a response body to make the server drop the connection mid-stream."""


class FaultInjector:
    """Draws one fault (or none) per request. Not thread-safe; the server is one event loop."""

    def __init__(self, config: ServerConfig, seed: int | None = None) -> None:
        """``seed`` defaults to ``config.seed``."""
        self._rate = config.failure_injection_rate / 100.0
        self._kinds = [Fault(kind) for kind in config.failure_types]
        self._random = random.Random(config.seed if seed is None else seed)

    def draw(self) -> Fault | None:
        if self._rate <= 0 or self._random.random() >= self._rate:
            return None
        return self._random.choice(self._kinds)


def strike_index(max_tokens: int) -> int:
    """Index of the token before which a mid-stream fault strikes: half-way, after at least one."""
    return max(1, max_tokens // 2)
