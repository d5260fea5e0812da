"""The signal guard, in a fresh interpreter each (signals and gevent's hub are process-wide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SECOND_CTRL_C_WHILE_THE_WRITER_WAITS = """
import os, signal
import gevent
from loadtests.run.signals import SignalGuard

guard = SignalGuard()
guard.install()
guard.test_started = True
guard.quitting = True  # the first Ctrl-C is being acted on: the run is ending

def write_html():
    with guard.interruptible():
        gevent.sleep(0.2)  # waiting, as on a file write in the threadpool: other greenlets run
    return "report.html whole"

writer = gevent.spawn(write_html)
gevent.sleep(0.05)
os.kill(os.getpid(), signal.SIGINT)  # handled in this greenlet, not the writer's
print(writer.get(), flush=True)
guard.release()
gevent.sleep(0)
guard.restore()
"""


def test_a_second_ctrl_c_while_the_writer_waits_is_answered() -> None:
    """The signal cannot cut a writer that is not running; it is noted, and said when released,
    never dropped in silence."""
    command = [sys.executable, "-c", SECOND_CTRL_C_WHILE_THE_WRITER_WAITS]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "report.html whole",
        "sse-soak: SIGINT: already ending, the run's report comes first",
    ]


CTRL_C_BEFORE_ANY_TEST = """
import os, signal
import gevent
from loadtests.run.signals import SignalGuard

guard = SignalGuard()
guard.install((signal.SIGINT,))

def web_ui_request():  # the signal arrives while another greenlet runs, as a web UI request's does
    os.kill(os.getpid(), signal.SIGINT)
    gevent.sleep(0)
    print("the other greenlet lives on", flush=True)

serving = gevent.spawn(gevent.sleep, 30)  # Locust's main greenlet waits on the web UI's
gevent.spawn(web_ui_request)
try:
    serving.join()
except KeyboardInterrupt:
    gevent.sleep(0.1)  # the other greenlet gets its turn
    print("main interrupted", flush=True)
guard.restore()
"""


def test_ctrl_c_before_any_test_reaches_the_main_greenlet_and_says_nothing() -> None:
    """Locust quits on a ``KeyboardInterrupt`` in its main greenlet only; without the guard it was
    raised in whichever greenlet ran (an idle web UI's Ctrl-C was lost in 3 of 26 tries). No test
    has started, so the guard adds no line of its own."""
    command = [sys.executable, "-c", CTRL_C_BEFORE_ANY_TEST]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["the other greenlet lives on", "main interrupted"]
    assert "Traceback" not in result.stderr
