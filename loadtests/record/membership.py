"""Which workers belong to a run: a worker says who it is, the master admits it or refuses it.

Locust's master takes any worker that reaches its port, whatever locustfile it runs: a worker of
another run on the same box (given that run's port by hand, or a stale one) would add its rows to
this run and the verdict would judge them. So each worker, once connected, sends a hello
(``sse_soak_hello``) with its ``RunIdentity``: the scenario it runs and its ``--run-id``. The master
admits it only when both equal its own, and answers ``sse_soak_admission``; a refused worker is
told why, asked to quit, and nothing it sends is written (``Admission.refused``, read by the
collector). A worker's users send nothing until the master admitted it, so a refused worker never
loads the server either.

``--processes`` gives its master and forked workers a random run id of their own
(``own_run_id``): a worker started by hand at that port is refused. For a cluster started by hand,
give the master and every worker the same ``--run-id`` (or ``SSE_SOAK_RUN_ID``); without one, any
worker of the same scenario is admitted.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event

from loadtests.base.ports import flag_value, has_flag
from loadtests.base.process_part import Part

if TYPE_CHECKING:  # Locust patches the process on import: only where it runs
    from locust.env import Environment
    from locust.rpc.protocol import Message
    from locust.runners import Runner

RUN_ID_ENV = "SSE_SOAK_RUN_ID"
HELLO_MESSAGE = "sse_soak_hello"
ADMISSION_MESSAGE = "sse_soak_admission"
HELLO_REPEAT_S = 1.0
"""Seconds between a worker's hellos while its master has not answered."""
ADMISSION_WAIT_S = 10.0
"""How long a worker's users wait for the master's answer before sending anyway (a master that
never answers predates this check)."""
logger = logging.getLogger(__name__)


def new_run_id() -> str:
    """A fresh random run id (16 hex digits): no other run has it."""
    return secrets.token_hex(8)


@dataclass(frozen=True)
class RunIdentity:
    """What a worker must share with its master to take part in its run."""

    scenario: str
    run_id: str | None

    def mismatch(self, other: RunIdentity) -> str | None:
        """Why a worker of identity ``other`` cannot join a master of this one; None when it can."""
        if other.scenario != self.scenario:
            return f"it runs scenario {other.scenario!r}, this run is {self.scenario!r}"
        if other.run_id != self.run_id:
            theirs = "no --run-id" if other.run_id is None else f"--run-id {other.run_id!r}"
            ours = "none" if self.run_id is None else "another" if other.run_id is None else f"{self.run_id!r}"
            return f"it has {theirs}, this run's is {ours}"
        return None


def own_run_id(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """This process's run id, read before Locust parses (``--run-id`` on ``argv``, else
    ``$SSE_SOAK_RUN_ID``), and made when there is none and ``argv`` has ``--processes``: a random
    one the master and the workers it forks share (they inherit it), and no other run has. Read
    here, not from the parsed options: a worker's options take the master's values when its first
    spawn message arrives, which can be before its hello is sent, so a stranger would say the
    master's id back to it."""
    run_id = flag_value(argv, "--run-id") or os.environ.get(RUN_ID_ENV) or None
    if run_id is None and has_flag(argv, "--processes"):
        run_id = new_run_id()
    parser.set_defaults(run_id=run_id)
    return run_id


class Admission:
    """One per process, playing the ``part`` it is handed: a master answers hellos, a worker sends
    one and holds its users (``wait``) until admitted; standalone, everyone is."""

    def __init__(
        self, environment: Environment | None = None, identity: RunIdentity | None = None, part: Part = Part.LOCAL
    ) -> None:
        self.environment = environment
        self.part = part
        self.identity = identity or RunIdentity("", None)
        self.refused: set[str] = set()
        """Master: the node ids of the workers it refused; their batches are not written."""
        self.admitted = Event()
        """Set once this process may send requests: at once, except on a worker."""
        self.answered = Event()
        """Worker: the master answered its hello."""
        self.refusal: str | None = None
        """Worker: why the master refused it."""
        if environment is None:
            self.admitted.set()  # no run around it (a user run by itself): nothing to be admitted to

    @property
    def _run(self) -> Environment:
        """The run's environment: only a process in a run starts, greets or answers."""
        assert self.environment is not None
        return self.environment

    @property
    def _runner(self) -> Runner:
        assert self._run.runner is not None
        return self._run.runner

    def start(self) -> None:
        runner = self._run.runner
        if self.part is Part.MASTER and runner is not None:
            runner.register_message(HELLO_MESSAGE, self._on_hello)
            self.admitted.set()
        elif self.part is Part.WORKER and runner is not None:
            runner.register_message(ADMISSION_MESSAGE, self._on_admission)
            gevent.spawn(self._say_hello)
        else:
            self.admitted.set()

    def wait(self) -> None:
        """Return once this process is admitted (at once after that). A refused worker's users wait
        here until the worker quits; a master that never answers is sent to after ``ADMISSION_WAIT_S``."""
        if self.admitted.is_set():
            return
        if not self.answered.wait(ADMISSION_WAIT_S):
            if not self.admitted.is_set():
                logger.warning("sse-soak: the master never answered this worker's hello: sending anyway")
            self.admitted.set()
        elif self.refusal is not None:
            Event().wait()  # never set: the worker quits, which kills this user

    # -- master ---------------------------------------------------------------------------------
    def _on_hello(self, environment: Environment, msg: Message, **_: Any) -> None:
        try:
            theirs = RunIdentity(str(msg.data["scenario"]), msg.data.get("run_id"))
        except (KeyError, TypeError):
            theirs = RunIdentity("?", None)
        problem = self.identity.mismatch(theirs)
        runner = self._runner
        if problem is None:
            self.refused.discard(msg.node_id)
            runner.send_message(ADMISSION_MESSAGE, {"admitted": True}, client_id=msg.node_id)
            return
        self.refused.add(msg.node_id)
        logger.error("sse-soak: refused worker %s: %s; its rows are not this run's", msg.node_id, problem)
        runner.send_message(ADMISSION_MESSAGE, {"admitted": False, "reason": problem}, client_id=msg.node_id)
        runner.send_message("quit", None, client_id=msg.node_id)

    # -- worker ---------------------------------------------------------------------------------
    def _say_hello(self) -> None:
        """Send the hello until the master answers: a master still starting may not listen for it yet."""
        deadline = time.monotonic() + ADMISSION_WAIT_S
        while not self.admitted.is_set() and not self.refusal and time.monotonic() < deadline:
            self._runner.send_message(HELLO_MESSAGE, asdict(self.identity))
            self.answered.wait(HELLO_REPEAT_S)

    def _on_admission(self, environment: Environment, msg: Message, **_: Any) -> None:
        self.answered.set()
        if msg.data.get("admitted"):
            self.admitted.set()
            return
        self.refusal = str(msg.data.get("reason"))
        options = self._run.parsed_options
        where = f"{getattr(options, 'master_host', '?')}:{getattr(options, 'master_port', '?')}"
        print(
            f"sse-soak: the master at {where} refused this worker: {self.refusal}",
            file=sys.stderr,
            flush=True,
        )
        self._run.process_exit_code = 2
        gevent.spawn_later(ADMISSION_WAIT_S, self._runner.quit)  # the master's quit comes first
