"""The signals that end a run, one definition for every process of the harness that handles one.

SIGINT (Ctrl-C), SIGTERM (a job scheduler, ``kill``) and SIGHUP (a closed terminal, a CI runner's
hang-up, an SSH session that drops) all mean "stop now, keep what you have": a Locust run ends and
is judged as interrupted, the soak passes the signal on to its run as SIGTERM, a watchdog stops
its service, a server command stops. Left to its default, SIGHUP killed a run without a verdict or
a summary (exit 129). Whoever installs a handler for one of them installs it for all of these.
"""

from __future__ import annotations

import signal

__all__ = ["ENDING_SIGNALS"]

ENDING_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Every signal that ends a run the way Ctrl-C does: the first one named is the one a person sends."""
