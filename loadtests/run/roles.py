"""The part this process plays in a Locust run, chosen once at init from its runner: ``Local`` (one
process, or ``run_single_user``), ``Master`` (holds the results of ``--processes`` or a cluster and
sends no request itself) or ``Worker`` (sends requests, ships its rows to the master). Each is a
small class with the hooks that differ between them; the run controller asks its role, never the
runner's type.

Invariant: exactly one process of a run ``leads`` it (the local one, or the master): it checks
``-t``, starts and stops the stack, preflights the target, prints the run's lines, makes the run
directory and judges each test. A worker only sends and records.
"""

from __future__ import annotations

import os
import time
from argparse import Namespace

from locust.runners import MasterRunner, Runner, WorkerRunner

from loadtests.base.process_part import Part
from loadtests.load.open_loop import START_DELAY_S, ArrivalPlan, ArrivalSchedule
from loadtests.run.collect import Collector
from loadtests.services.parent_watch import end_with_parent

__all__ = ["ARRIVAL_PROCESSES", "ARRIVAL_START", "Local", "Master", "Role", "Worker", "role_of"]

ARRIVAL_PROCESSES = "sse_soak_arrival_processes"
ARRIVAL_START = "sse_soak_arrival_start"
"""Set on the master's parsed options at test start; Locust sends them to the workers with the spawn."""


class Role:
    """The hooks that differ between the processes of a run; this one is the single process's."""

    part = Part.LOCAL
    """What the modules this process hands it to take it for (``Admission``, ``Collector``, ``RunState``)."""
    leads = True
    """This process leads the run (the module docstring says what that holds)."""
    probes_prompt_sizing = False
    """It sizes no prompt itself, so it probes the target at test start to say how prompts are sized."""

    def __init__(self, runner: Runner | None) -> None:
        self.runner = runner

    def workers(self) -> int:
        """The workers connected to this process (a manifest records them)."""
        return 0

    def arrivals(self, options: Namespace) -> ArrivalSchedule | None:
        """Open loop (``--rate``): this process's schedule for the test starting; None when it sends
        none. One process takes the whole schedule, starting now."""
        return ArrivalSchedule(_plan(options, 1, 0), time.time())

    def watch(self, collector: Collector, options: Namespace) -> None:
        """Once its collector runs: what this process watches besides its users (nothing here)."""


class Local(Role):
    """One process: ``locust --headless`` or its web UI without workers, or ``run_single_user``."""


class Master(Role):
    """The master of ``--processes`` or of a cluster: it holds the results and sends no request."""

    part = Part.MASTER
    probes_prompt_sizing = True

    def __init__(self, runner: MasterRunner) -> None:
        super().__init__(runner)
        self.master = runner

    def workers(self) -> int:
        return self.master.worker_count

    def arrivals(self, options: Namespace) -> ArrivalSchedule | None:
        """Fixes the shared start and the number of processes, which the spawn message carries to the
        workers; the master itself sends nothing."""
        setattr(options, ARRIVAL_PROCESSES, max(1, self.master.worker_count))
        setattr(options, ARRIVAL_START, time.time() + START_DELAY_S)
        return None


class Worker(Role):
    """A worker: it sends and records, and ships its rows to the master."""

    part = Part.WORKER
    leads = False

    def __init__(self, runner: WorkerRunner) -> None:
        super().__init__(runner)
        self.worker = runner

    def arrivals(self, options: Namespace) -> ArrivalSchedule | None:
        """Its part of the master's schedule, by its index."""
        processes, start = getattr(options, ARRIVAL_PROCESSES), getattr(options, ARRIVAL_START)
        return ArrivalSchedule(_plan(options, processes, self.worker.worker_index), start)

    def watch(self, collector: Collector, options: Namespace) -> None:
        """Forked by the master (``--processes``): gone with it, its rows kept here."""
        if getattr(options, "processes", None):
            collector.forked_by = os.getppid()
            end_with_parent(collector.master_gone)


def _plan(options: Namespace, processes: int, index: int) -> ArrivalPlan:
    return ArrivalPlan(options.rate, options.arrival, options.arrival_seed, options.max_in_flight, processes, index)


def role_of(runner: Runner | None) -> Role:
    """The role of the process whose runner this is: the one place a runner's type is asked."""
    if isinstance(runner, MasterRunner):
        return Master(runner)
    if isinstance(runner, WorkerRunner):
        return Worker(runner)
    return Local(runner)
