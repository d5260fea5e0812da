"""The part a process plays in a Locust run: one process, a master, or a worker.

Locust's runner says it, and ``loadtests.run.roles.role_of`` reads it there once; every other
module takes the ``Part`` it is handed rather than asking the runner's type again.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Part"]


class Part(Enum):
    LOCAL = "local"
    """One process: it sends, records and writes its own rows (also a run with no runner)."""
    MASTER = "master"
    """The master of ``--processes`` or a cluster: it admits workers and writes their rows."""
    WORKER = "worker"
    """A worker: admitted by its master, it sends and ships its rows to it."""
