"""A service the run started that dies mid-run ends the run, said once.

The bundled server, real vLLM or a proxy the run started can die under it (killed, crashed, out of
memory). Its users would then only see what is left: connection errors, or a proxy's instant 502s,
thousands of rows and not one line naming the cause. A greenlet asks the stack every
``POLL_S`` whether each of its services still runs (a non-blocking wait per service: nothing that
grows with the run, nothing on the users' path); the first that ended is handed to ``on_death``
once, in words (``target server (pid 1234) was killed by SIGKILL``), and the watch ends. The
controller says it in one line and ends the run as interrupted (docs/running.md).

Invariant: a watch that was stopped calls nothing: the run stops its watch before it stops its
stack, so a stop of ours is never taken for a death.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import gevent

POLL_S = 0.5
"""How often the watch asks: a dead service is noticed within this (plus the loop's lag)."""


class Watched(Protocol):
    """What the watch asks: the first service that ended, in words, or None (``Stack.ended``)."""

    def ended(self) -> str | None: ...


class StackWatch:
    """Watches one started stack from a greenlet until ``stop()`` or its first death."""

    def __init__(self, stack: Watched, on_death: Callable[[str], None]) -> None:
        self._stack = stack
        self._on_death = on_death
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> StackWatch:
        self._greenlet = gevent.spawn(self._watch)
        return self

    def stop(self) -> None:
        """Watch no more; a death not handed over yet never will be."""
        greenlet, self._greenlet = self._greenlet, None
        if greenlet is not None and greenlet is not gevent.getcurrent():
            greenlet.kill(block=False)

    def _watch(self) -> None:
        while self._greenlet is not None:
            death = self._stack.ended()
            if death is not None:
                self._greenlet = None
                self._on_death(death)
                return
            gevent.sleep(POLL_S)
