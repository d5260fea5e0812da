"""sse-soak's one exception hierarchy: every error the harness raises on purpose is an ``SseSoakError``.

Its message is one line that names the cause and the fix. Only the entry points turn one into an
exit code and a printed line: the command line (``python -m loadtests``), and the run controller's
hooks into Locust (Locust is the entry point of a scenario run). Library code raises, never exits.
Classes keep the builtin base their callers caught before (``ValueError``, ``OSError``...) beside it.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = [
    "INCONCLUSIVE_EXIT_CODE",
    "UNWRITTEN_EXIT_CODE",
    "USAGE_EXIT_CODE",
    "RecordNotWritten",
    "RunFailed",
    "SseSoakError",
    "UsageError",
    "exception_chain",
]

USAGE_EXIT_CODE = 2
"""A usage error's exit code: distinct from 1, a failed verdict or a regression."""
INCONCLUSIVE_EXIT_CODE = 3
"""An inconclusive run's exit code: the run could not judge what it set out to judge, which is
neither a pass nor a failure of the server (1) nor a usage error (2)."""
UNWRITTEN_EXIT_CODE = 4
"""The run's record could not be written where it belongs (a full or read-only disk): its verdict
was printed, its summary went elsewhere (said in one line), whatever the verdict was."""


class SseSoakError(Exception):
    """An error sse-soak raises on purpose; its message is the one line to print, and ``exit_code``
    the code an entry point exits with."""

    exit_code = USAGE_EXIT_CODE


class UsageError(SseSoakError):
    """Bad input from the user (an option's value, a file given): exit 2 before anything starts."""


class RunFailed(SseSoakError):
    """The run cannot go on for a reason that is no usage error (a service that would not start): exit 1."""

    exit_code = 1


class RecordNotWritten(SseSoakError, OSError):
    """A file of a run's record could not be written (no space, a read-only disk): one line naming
    the file and the system's reason. No temporary file is left behind."""

    exit_code = UNWRITTEN_EXIT_CODE


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or during, nearest first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
