"""A service of the stack that dies is named once, with how it died; a stop of ours is no death."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import gevent
import pytest
from gevent.event import AsyncResult

from loadtests.run.stack_watch import POLL_S, StackWatch
from loadtests.services.child import ChildService, exit_words
from loadtests.services.stack import Stack


def child(name: str, code: str = "import time; time.sleep(120)") -> ChildService:
    """A process standing in for a service: it runs until killed (or runs ``code``)."""
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, text=True)
    return ChildService(process, "http://127.0.0.1:9", name)


@dataclass
class Started:
    """A stack of two stand-ins: the server, then the proxy in front of it."""

    stack: Stack
    server: ChildService
    proxy: ChildService


@pytest.fixture
def started() -> Iterator[Started]:
    stack = Stack(url="http://127.0.0.1:9")
    try:
        server, proxy = child("target server"), child("nginx")
        stack._add(server)
        stack._add(proxy)
        yield Started(stack, server, proxy)
    finally:
        stack.stop()


def test_exit_words_say_a_code_or_the_signal() -> None:
    assert exit_words(0) == "exited with 0" and exit_words(3) == "exited with 3"
    assert exit_words(-signal.SIGKILL) == "was killed by SIGKILL"
    assert exit_words(-200) == "was killed by signal 200"


def test_the_first_service_that_died_is_named_with_its_pid_and_how(started: Started) -> None:
    assert started.stack.ended() is None
    proxy = started.proxy
    proxy.process.send_signal(signal.SIGKILL)
    proxy.process.wait(30)
    assert started.stack.ended() == f"nginx (pid {proxy.pid}) was killed by SIGKILL"
    assert started.server.exited() is None


def test_a_service_that_exits_by_itself_says_its_code() -> None:
    exiting, server = Stack(url=""), child("target server", "raise SystemExit(3)")
    exiting._add(server)
    try:
        server.process.wait(30)
        assert exiting.ended() == f"target server (pid {server.pid}) exited with 3"
    finally:
        exiting.stop()


def test_the_watch_hands_over_one_death_and_a_stopped_watch_none(started: Started) -> None:
    stack, server = started.stack, started.server
    deaths: list[str] = []
    told: AsyncResult = AsyncResult()

    def on_death(what: str) -> None:
        deaths.append(what)
        told.set(what)

    watch = StackWatch(stack, on_death).start()
    server.process.send_signal(signal.SIGKILL)
    assert told.get(timeout=60) == f"target server (pid {server.pid}) was killed by SIGKILL"
    gevent.sleep(3 * POLL_S)  # had the watch gone on, it would have said it again by now
    assert len(deaths) == 1
    watch.stop()

    quiet: list[str] = []
    stopped = StackWatch(stack, quiet.append).start()
    stopped.stop()
    gevent.sleep(3 * POLL_S)
    assert quiet == []  # the stack has a dead service, but nobody watches any more
