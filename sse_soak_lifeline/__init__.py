"""The process protocol between the server and a harness that starts it, besides HTTP; public so
the harness speaks it by importing this module, never the server's internals.

The ready line, ``READY_PREFIX`` then the URL, is how a started server says it accepts
connections, whoever started it. Two more parts, both opt-in through
``SSE_SOAK_EXIT_ON_STDIN_EOF=1`` in the server's environment (``harness_environment()``), so a
server started by hand (stdin a terminal or /dev/null) behaves as any command does (the parent of
``--api-server-count`` children speaks all of it to them, ``api_servers``):

- The stdin pipe. The harness gives the server a stdin pipe whose write end only the harness
  holds and never writes to. The kernel closes that end when the harness dies, however it dies,
  so EOF on stdin means nobody is left to stop the server: ``exit_when_stdin_closes()`` then
  SIGTERMs this process (the graceful path of a normal stop) and SIGKILLs it if that has not
  ended it within ``GRACE_S``.
- The refusal line. A server that will not start prints ``refusal_line(reason)`` on stdout, the
  channel the harness reads the ready line from, before it exits; ``parse_refusal`` gives the
  harness the reason back, to quote instead of a bare exit status.

Invariant: a refusal line is one line, and ``parse_refusal(refusal_line(reason))`` is ``reason``
with its whitespace runs made single spaces. Nothing here imports the rest of the server.
"""

from __future__ import annotations

import os
import signal
import threading
import time

__all__ = [
    "ENV_VAR",
    "GRACE_S",
    "LAUNCHED_BY_HARNESS",
    "READY_PREFIX",
    "REFUSAL_PREFIX",
    "announce_refusal",
    "exit_when_stdin_closes",
    "harness_environment",
    "parse_refusal",
    "refusal_line",
    "wait_for_stdin_eof",
]

ENV_VAR = "SSE_SOAK_EXIT_ON_STDIN_EOF"
GRACE_S = 5.0
LAUNCHED_BY_HARNESS = os.environ.get(ENV_VAR) == "1"
"""Read at import, before ``exit_when_stdin_closes`` removes the variable."""
READY_PREFIX = "target_server ready: "
REFUSAL_PREFIX = "target_server failed: "


def harness_environment() -> dict[str, str]:
    """What a harness adds to the environment of a child whose stdin pipe it holds."""
    return {ENV_VAR: "1"}


def refusal_line(reason: str) -> str:
    """The refusal line for ``reason``, on one line whatever ``reason`` holds (no newline)."""
    return REFUSAL_PREFIX + " ".join(reason.split())


def parse_refusal(line: str) -> str | None:
    """The reason a refusal line gives (its line end dropped); None for any other line."""
    if not line.startswith(REFUSAL_PREFIX):
        return None
    return line[len(REFUSAL_PREFIX) :].rstrip("\r\n")


def announce_refusal(reason: str) -> None:
    """Tell a harness that launched this server why it will not start (its error then names the
    reason, not only the exit status). A server started by hand says it on stderr only."""
    if LAUNCHED_BY_HARNESS:
        print(refusal_line(reason), flush=True)


def exit_when_stdin_closes() -> threading.Thread | None:
    """With ``SSE_SOAK_EXIT_ON_STDIN_EOF=1``, start the daemon thread that ends this process once
    stdin reaches EOF; otherwise do nothing. The variable is removed so no grandchild inherits it."""
    if os.environ.pop(ENV_VAR, None) != "1":
        return None
    thread = threading.Thread(target=_terminate_at_eof, name="parent-watch", daemon=True)
    thread.start()
    return thread


def wait_for_stdin_eof() -> None:
    """Block until stdin reaches EOF (or fails)."""
    # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader can hold its lock
    # while the interpreter shuts down, which is a fatal error.
    try:
        while os.read(0, 4096):
            pass  # the parent never writes; anything it does is ignored
    except OSError:
        pass


def _terminate_at_eof() -> None:
    wait_for_stdin_eof()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)  # a daemon thread: this line is only reached if the graceful stop hung
    os.kill(os.getpid(), signal.SIGKILL)
