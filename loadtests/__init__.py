"""The sse-soak harness: Locust users that record every SSE frame, gates, and reports.

The public surface is this package's names (everything a locustfile needs, below), ``launch`` (a
scenario run in a child process, for callers without Locust), ``pytest_plugin`` and ``smoke``
(pytest), ``errors`` (the one exception hierarchy) and the command line (``__main__``). The rest
lives in stage packages, each importing only those below it (import-linter checks it): ``cli``,
``run``, ``load``, ``declare``, ``report``, ``judge``, ``record``, ``client``, ``services``,
``base``. docs/architecture.md places every module and follows one request through them.

Everything a locustfile needs is exported here. Names are re-exported lazily: importing Locust
monkey-patches the process for gevent, so only a locustfile that asks for ``SSEUser`` or
``OpenAISDKUser`` pays for it, never ``loadtests.client.sse`` alone; type checkers and editors read the
``TYPE_CHECKING`` imports instead. Importing registers nothing with Locust: declaring a ``Scenario``
or a user class where Locust runs installs the run controller (``loadtests.base.locust_entry``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadtests.load import gevent_compat as _gevent_compat  # noqa: F401 - first: lets httpx import under Locust's gevent

_EXPORTS = {
    "OUTCOMES": "loadtests.client.outcome",
    "Outcome": "loadtests.client.outcome",
    "RequestRow": "loadtests.client.outcome",
    "SseSoakError": "loadtests.errors",
    "UsageError": "loadtests.errors",
    "Expect": "loadtests.judge.gates",
    "Gate": "loadtests.judge.gates",
    "GateResult": "loadtests.judge.gates",
    "NoProxyTimeouts": "loadtests.judge.gates",
    "QUEUE_FOR_SILENCE": "loadtests.judge.gates",
    "Unjudgeable": "loadtests.judge.gates",
    "Frame": "loadtests.client.sse",
    "SSEParser": "loadtests.client.sse",
    "RequestMix": "loadtests.declare.workload",
    "RequestSpec": "loadtests.declare.workload",
    "Route": "loadtests.declare.workload",
    # Importing registers nothing with Locust: declaring a Scenario or a user class where Locust runs
    # installs the run controller (loadtests.base.locust_entry).
    "Scenario": "loadtests.declare.scenario",
    "RunSettings": "loadtests.declare.scenario",
    "SSEUser": "loadtests.load.users",
    "OpenAISDKUser": "loadtests.load.users",
}

__all__ = [
    "OUTCOMES",
    "QUEUE_FOR_SILENCE",
    "Expect",
    "Frame",
    "Gate",
    "GateResult",
    "NoProxyTimeouts",
    "OpenAISDKUser",
    "Outcome",
    "RequestMix",
    "RequestRow",
    "RequestSpec",
    "Route",
    "RunSettings",
    "SSEParser",
    "SSEUser",
    "Scenario",
    "SseSoakError",
    "Unjudgeable",
    "UsageError",
]
assert sorted(__all__) == sorted(_EXPORTS)

if TYPE_CHECKING:  # what the lazy names are, for editors and type checkers; never run
    from loadtests.client.outcome import OUTCOMES, Outcome, RequestRow
    from loadtests.client.sse import Frame, SSEParser
    from loadtests.declare.scenario import RunSettings, Scenario
    from loadtests.declare.workload import RequestMix, RequestSpec, Route
    from loadtests.errors import SseSoakError, UsageError
    from loadtests.judge.gates import QUEUE_FOR_SILENCE, Expect, Gate, GateResult, NoProxyTimeouts, Unjudgeable
    from loadtests.load.users import OpenAISDKUser, SSEUser


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadtests' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
