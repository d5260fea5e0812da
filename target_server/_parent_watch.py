"""Exit when the process that started the server dies, even by SIGKILL; tell it why a start failed.

A harness that starts the server as its child gives it a stdin pipe whose write end only the
harness holds, and sets ``SSE_SOAK_EXIT_ON_STDIN_EOF=1``. The kernel closes that end when the
harness dies, however it dies, so a read of stdin that returns EOF means nobody is left to stop
the server: it stops itself with SIGTERM, the same graceful path as a normal stop, and SIGKILLs
itself if that has not ended it within ``GRACE_S``. Opt-in, because a server started by hand (stdin
a terminal, or /dev/null) must not exit on its stdin. The harness's services use this same watch
through ``loadtests._parent_watch`` (the harness may import the server; never the reverse).
"""

from __future__ import annotations

import os
import signal
import threading
import time

ENV_VAR = "SSE_SOAK_EXIT_ON_STDIN_EOF"
GRACE_S = 5.0
LAUNCHED_BY_HARNESS = os.environ.get(ENV_VAR) == "1"
"""Read at import, before ``exit_when_stdin_closes`` removes the variable."""
REFUSAL_PREFIX = "target_server failed: "


def announce_refusal(reason: str) -> None:
    """Tell a harness that launched this server why it will not start: one line on stdout, the
    channel it reads the ready line from (its error then names the reason, not only the exit
    status). A server started by hand says it on stderr only, as any command does."""
    if LAUNCHED_BY_HARNESS:
        print(REFUSAL_PREFIX + " ".join(reason.split()), flush=True)


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
