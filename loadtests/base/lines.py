"""Where a Locust run's own lines go: what it started, its run directory, notices, gates, verdict.

On standard output, beside Locust's own summary; but when Locust's ``--json`` is given, standard
output is its stats JSON alone (Locust: "use together with --headless and --skip-log for an output
only with the json data"), so the run's lines go to standard error and a script can parse stdout.
Every such line is written through ``say``; a line flushes as it is written.
"""

from __future__ import annotations

import sys

_on_stderr = False


def lines_to_stderr(on: bool) -> None:
    """Send the run's lines to standard error (``on``: stdout belongs to ``--json``) or to stdout."""
    global _on_stderr
    _on_stderr = on


def say(text: str, end: str = "\n") -> None:
    """Write one of the run's lines where they go now, and flush it."""
    print(text, end=end, file=sys.stderr if _on_stderr else sys.stdout, flush=True)
