"""Which of the ``--api-server-count`` processes this one is, and its share of the server.

Each process is a whole server with its own scheduler (there is no engine process behind them, as
in vLLM), so the settings that are capacity are split and the ones that are behaviour are not:

- Slots: ``--max-num-seqs`` is the total across processes, split as evenly as it goes (the first
  ``total % count`` processes get one more), so the server as a whole still runs as many sequences
  at once as asked. Each process queues its own requests FIFO; the kernel, not the scheduler,
  decides which process a connection goes to.
- Fault draws: process ``index`` draws from a generator seeded with ``--seed + index``, so every
  process's sequence of draws is fixed by the seed, and process 0's is a single server's. Which
  request meets which draw depends on how connections spread, which no seed fixes.
- Generated text: from ``--seed`` alone, the same whichever process serves the request.
- Metrics: every process answers for the whole server, its own scheduler's under
  ``engine="<index>"``, through the snapshots the processes share in ``metrics_dir`` (``metrics``).

Invariant: the slots of processes ``0..count-1`` sum to the total, and each has at least one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessShare:
    """Process ``index`` of ``count`` (0 of 1: the server is one process, as by default)."""

    index: int = 0
    count: int = 1
    metrics_dir: str | None = None
    """Where the processes of one server share their metrics (``metrics.SharedMetrics``); None for one process."""

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"process index {self.index} is not in 0..{self.count - 1}")

    def slots(self, total: int) -> int:
        """This process's part of ``total`` slots; needs ``total >= count``."""
        if total < self.count:
            raise ValueError(f"{total} slots cannot give each of {self.count} processes one")
        return total // self.count + (1 if self.index < total % self.count else 0)

    def fault_seed(self, seed: int) -> int:
        return seed + self.index

    @property
    def engine_label(self) -> str:
        """The ``engine`` label of this process's metrics."""
        return str(self.index)


SOLE = ProcessShare()
"""The share of a server that is one process."""
