"""sse-soak's one exception module: every exception class of the harness is defined here.

Two roots. An ``SseSoakError`` is an error for a person: its message is one line naming the cause
and the fix, and an entry point prints it and exits with its ``exit_code``. An ``InternalSignal``
is control flow inside the harness, caught where it is raised (or handed to Locust as a request's
failure); it has no exit code, and one that reaches an entry point is a defect of sse-soak, reported
as one (``reported``: exit ``INTERNAL_DEFECT_EXIT_CODE``), never as bad input. A class keeps, beside its root, the
builtin base its callers catch (``ValueError``, ``OSError``...). The tree (exit codes at the right)::

    Exception
    ├── SseSoakError ............................. an entry point prints it: exit exit_code
    │   ├── UsageError ........................... 2  bad input, before anything starts
    │   │   ├── InvalidValue (ValueError) ........ 2  a value a function or option does not take
    │   │   ├── WrongType (TypeError) ............ 2  an argument of a type a function does not take
    │   │   ├── UnknownName (KeyError) ........... 2  a name looked up that is not there (option, gate)
    │   │   ├── OutOfOrder (RuntimeError) ........ 2  an object used out of order (stopped before started)
    │   │   ├── TargetUnusable (RuntimeError) .... 2  the target lists no model to run against
    │   │   ├── PreflightError ................... 2  the target cannot be used (client.preflight)
    │   │   ├── CatalogError (ValueError) ........ 2  no such scenario (declare.catalog)
    │   │   ├── RunDirError (ValueError) ......... 2  the report root cannot hold a run directory
    │   │   ├── RunDirChanged (ValueError) ....... 2  a run directory lost or changed parts since judged
    │   │   ├── RunInProgress .................... 2  a run directory's writer is still writing it
    │   │   ├── ManifestError (ValueError) ....... 2  manifest.json is not a manifest
    │   │   ├── SummaryError (ValueError) ........ 2  summary.json is not a summary
    │   │   ├── UnreadableTable (ValueError) ..... 2  a run's table is cut short or damaged
    │   │   └── NotARunDirectory (FileNotFoundError) 2  no requests.parquet there
    │   ├── RunFailed ............................ 1  the run cannot go on (a service would not start)
    │   │   ├── ServerStartError (RuntimeError) .. 1  a service exited or stayed silent before ready
    │   │   └── ToolInstallError (RuntimeError) .. 1  a tool's install or start failed
    │   │       ├── VllmError .................... 1  real vLLM
    │   │       └── LiteLLMError ................. 1  LiteLLM
    │   ├── NotPassed (AssertionError) ........... 1  assert_passed on a run that did not pass
    │   ├── InconclusiveRun ...................... 3  the run could not judge what it set out to
    │   └── RecordNotWritten (OSError) ........... 4  a file of the run's record could not be written
    └── InternalSignal ........................... -  never shown; reaching an entry point: exit 70
        ├── ScheduleClosed ....................... the open-loop schedule hands out no more tickets
        ├── LineTooLong (ValueError) ............. an SSE line over the parser's limit: stop reading
        ├── StreamBroken (ValueError) ............ the wire broke the protocol under the SDK
        ├── UndecodableJson (ValueError) ......... a server's JSON no decoder takes (not JSON, too deep...)
        ├── UnexpectedOutcome .................... a request's failure, as Locust's statistics show it
        ├── ScrapeError .......................... a /metrics scrape that gave no metrics
        ├── LiveJudgeError ....................... the live metrics' gate judge gave no states this time
        ├── TokenizeError ........................ /tokenize did not count as vLLM does
        └── BadRequest ........................... a request the embedded proxy answers itself

Library code raises, never exits; only the entry points (the command line, the run controller's
hooks into Locust) turn an exception into a printed line and an exit code. This module imports
nothing of the harness, so every stage may import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = [
    "INCONCLUSIVE_EXIT_CODE",
    "INTERNAL_DEFECT_EXIT_CODE",
    "UNWRITTEN_EXIT_CODE",
    "USAGE_EXIT_CODE",
    "BadRequest",
    "CatalogError",
    "InconclusiveRun",
    "InternalSignal",
    "InvalidValue",
    "LineTooLong",
    "LiteLLMError",
    "LiveJudgeError",
    "ManifestError",
    "NotARunDirectory",
    "NotPassed",
    "OutOfOrder",
    "PreflightError",
    "RecordNotWritten",
    "RunDirChanged",
    "RunDirError",
    "RunFailed",
    "RunInProgress",
    "ScheduleClosed",
    "ScrapeError",
    "ServerStartError",
    "SseSoakError",
    "StreamBroken",
    "SummaryError",
    "TargetUnusable",
    "TokenizeError",
    "ToolInstallError",
    "UndecodableJson",
    "UnexpectedOutcome",
    "UnknownName",
    "UnreadableTable",
    "UsageError",
    "VllmError",
    "WrongType",
    "error_kind",
    "exception_chain",
    "reported",
]

USAGE_EXIT_CODE = 2
"""A usage error's exit code: distinct from 1, a failed verdict or a regression."""
INCONCLUSIVE_EXIT_CODE = 3
"""An inconclusive run's exit code: the run could not judge what it set out to judge, which is
neither a pass nor a failure of the server (1) nor a usage error (2)."""
UNWRITTEN_EXIT_CODE = 4
"""The run's record could not be written where it belongs (a full or read-only disk): its verdict
was printed, its summary went elsewhere (said in one line), whatever the verdict was."""
INTERNAL_DEFECT_EXIT_CODE = 70
"""An ``InternalSignal`` reached an entry point: a bug of sse-soak, not of the input or the server.
70 is ``EX_SOFTWARE`` of sysexits.h ("internal software error"), apart from every code above."""


# -- errors for a person: an entry point prints the line and exits with exit_code ----------------


class SseSoakError(Exception):
    """An error sse-soak raises on purpose; its message is the one line to print, and ``exit_code``
    the code an entry point exits with."""

    exit_code = USAGE_EXIT_CODE


class UsageError(SseSoakError):
    """Bad input from the user (an option's value, a file given): exit 2 before anything starts."""


class InvalidValue(UsageError, ValueError):
    """A value a public function or an option does not take; the message says why in one line
    (a ``ValueError``, as ``float("x")``'s, so a caller or argparse that catches those keeps working)."""


class WrongType(UsageError, TypeError):
    """An argument of a type the function cannot take (a class no gate type, an object not a mapping)."""


class UnknownName(UsageError, KeyError):
    """A name looked up that is not there (an option, a gate); the message lists those that are."""


class OutOfOrder(UsageError, RuntimeError):
    """An object used out of order: stopped before it started, started twice, read before it was set."""


class TargetUnusable(UsageError, RuntimeError):
    """The target answered, but not with what the run needs (its ``/v1/models`` lists no model)."""


class PreflightError(UsageError):
    """The target cannot be used; the message is one line with the cause and the fix."""


class CatalogError(UsageError, ValueError):
    """A scenario that is neither a shipped name nor a locustfile; the message says which exist."""


class RunDirError(UsageError, ValueError):
    """The report root cannot hold a run directory; the message is one line naming it and why,
    e.g. ``--report-dir reports: not a directory (a file is in the way)``."""


class RunDirChanged(UsageError, ValueError):
    """A run directory no longer holds the parts its summary recorded (one missing, or holding other
    rows): judging it again would judge less than the run recorded. Exit 2, nothing rewritten."""


class RunInProgress(UsageError):
    """A run directory is held by its live writer (``RunDir.writer_lock``): the run has not been
    judged yet, and a reader that wrote into it would break the judging. One line naming the
    writer; nothing was read or written."""


class ManifestError(UsageError, ValueError):
    """``manifest.json`` is there but is not a manifest; the message names the file."""


class SummaryError(UsageError, ValueError):
    """A summary file that cannot be read as one; the message is one line naming the file."""


class UnreadableTable(UsageError, ValueError):
    """A table of a run directory (parquet, csv) that is there but cut short or damaged; the message
    is one line naming the file."""


class NotARunDirectory(UsageError, FileNotFoundError):
    """The path holds no ``requests.parquet``: nothing a run wrote."""


class RunFailed(SseSoakError):
    """The run cannot go on for a reason that is no usage error (a service that would not start): exit 1."""

    exit_code = 1


class ServerStartError(RunFailed, RuntimeError):
    """A service exited, or stayed silent, before it was ready."""


class ToolInstallError(RunFailed, RuntimeError):
    """A tool could not be installed or started; the message names the step and its log."""


class VllmError(ToolInstallError):
    """Real vLLM could not be installed or started; the message names the step and its log."""


class LiteLLMError(ToolInstallError):
    """LiteLLM could not be installed; the message names the step and its log."""


class NotPassed(SseSoakError, AssertionError):
    """``ScenarioRun.assert_passed`` on a run (or gate) that did not pass: an ``AssertionError`` for
    pytest, whose message is ``explain()``; exit 1 as a failed verdict's."""

    exit_code = 1


class InconclusiveRun(SseSoakError):
    """A run that could not judge what it set out to: raised by ``assert_passed`` outside pytest."""

    exit_code = INCONCLUSIVE_EXIT_CODE


class RecordNotWritten(SseSoakError, OSError):
    """A file of a run's record could not be written (no space, a read-only disk): one line naming
    the file and the system's reason. No temporary file is left behind."""

    exit_code = UNWRITTEN_EXIT_CODE


# -- internal signals: control flow inside the harness, no exit code ------------------------------


class InternalSignal(Exception):
    """Control flow inside the harness, caught where it is raised; deliberately no ``SseSoakError``
    and no ``exit_code``: one reaching an entry point is reported by ``internal_defect``, exit 70."""


class ScheduleClosed(InternalSignal):
    """The test is stopping: the schedule hands out no more tickets."""


class LineTooLong(InternalSignal, ValueError):
    """A line of the event stream exceeded the parser's limit; the stream must not be read further.
    ``frames`` are the frames (``client.sse.Frame``) the same ``feed`` completed before that line:
    they arrived whole."""

    def __init__(self, limit: int) -> None:
        size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
        super().__init__(f"line longer than {size}")
        self.frames: list[Any] = []  # client.sse.Frame: this module imports nothing of the harness


class StreamBroken(InternalSignal, ValueError):
    """The wire broke the protocol in a way the SDK would not notice; its reading ends here."""


class UndecodableJson(InternalSignal, ValueError):
    """JSON a server sent that cannot be decoded, whatever the decoder's failure (a syntax error,
    nesting deeper than the recursion limit, a number beyond Python's digit limit, memory): the
    server's protocol error, never the harness's. ``reason`` is short and never quotes the text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnexpectedOutcome(InternalSignal):
    """The failure Locust's statistics show for a request whose outcome was not the expected one."""


class ScrapeError(InternalSignal):
    """A scrape that gave no metrics; the message completes ``GET <url> ...``, e.g. ``answered HTTP 404``."""


class LiveJudgeError(InternalSignal):
    """The child judging the live metrics' gates gave no states this time (``loadtests.run.live_gates``);
    the watch asks again at its next judgement."""


class TokenizeError(InternalSignal):
    """``/tokenize`` did not count tokens the way vLLM does; the message says what it did instead."""


class BadRequest(InternalSignal):
    """A request the proxy answers itself. ``reason`` is the proxy's own words: it never quotes the
    request, so nothing a client sends is reflected back."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


# -- helpers for entry points and one-line messages ------------------------------------------------

_STAND_INS: dict[type[BaseException], str] = {
    InvalidValue: "ValueError",
    WrongType: "TypeError",
    UnknownName: "KeyError",
    OutOfOrder: "RuntimeError",
    TargetUnusable: "RuntimeError",
}
"""The classes that took the place of a bare builtin, and the builtin's name."""


def error_kind(exc: BaseException) -> str:
    """The kind a one-line message names for ``exc`` (``ValueError: ...``): the builtin's name for a
    class that took the place of a bare builtin, so such lines read as they did; else the class's."""
    return _STAND_INS.get(type(exc), type(exc).__name__)


def reported(exc: SseSoakError | InternalSignal) -> tuple[str, int]:
    """The line an entry point prints for ``exc`` (after its own prefix) and the code it exits with:
    an error's message and ``exit_code``; for an internal signal that reached it, a line that says
    it is a defect of sse-soak, and ``INTERNAL_DEFECT_EXIT_CODE``, never a usage error's 2."""
    if isinstance(exc, InternalSignal):
        defect = f"internal defect of sse-soak (please report it): {type(exc).__name__} was not caught: {exc}"
        return defect, INTERNAL_DEFECT_EXIT_CODE
    return str(exc), exc.exit_code


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or during, nearest first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
