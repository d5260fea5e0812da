"""The sse-soak harness: Locust users that record every SSE frame, gates, and reports.

Modules, one concept each: ``sse`` (incremental frame parser), ``outcome`` (one stream's frames
and its single outcome), ``workload`` (prompt sizes and request mixes), ``users`` (Locust users),
``failure_cycles`` (what a failed request leaves freed without a collection),
``recorder`` (rows and frames of a process, table schemas), ``run_writer`` (parquet parts as the
run goes), ``collect`` (worker -> master batches), ``gates`` (pass/fail), ``run_dir`` (a run
directory and its manifest), ``summary`` (the typed verdict file), ``judge`` (one judgement of a
run directory), ``figures``, ``html_report``, ``compare``, ``scenario`` (a locustfile's hooks into
a Locust run), ``run_state`` (per-run objects), ``stack`` (services as child processes),
``proxy`` (the embedded reverse proxy), ``arrivals`` (open-loop schedules), ``server_metrics`` (the
server's ``/metrics`` during a run), the soak job (``soak``, ``progress``, ``resources``,
``drift``), and for callers without Locust: ``catalog`` (the shipped scenarios), ``launch`` (a
run in a child process), ``pytest_plugin`` and ``smoke`` (pytest).

Everything a locustfile needs is exported here. Names are re-exported lazily: importing Locust
monkey-patches the process for gevent, so only a locustfile that asks for ``SSEUser`` or
``Scenario`` pays for it, never ``loadtests.sse`` alone; type checkers and editors read the
``TYPE_CHECKING`` imports instead.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadtests import _gevent_compat  # noqa: F401 - first: lets httpx import under Locust's gevent

_EXPORTS = {
    "OUTCOMES": "loadtests.outcome",
    "Outcome": "loadtests.outcome",
    "RequestRow": "loadtests.outcome",
    "Expect": "loadtests.gates",
    "Gate": "loadtests.gates",
    "GateResult": "loadtests.gates",
    "NoProxyTimeouts": "loadtests.gates",
    "Frame": "loadtests.sse",
    "SSEParser": "loadtests.sse",
    "RequestMix": "loadtests.workload",
    "RequestSpec": "loadtests.workload",
    # What a locustfile runs comes through the run controller: importing it registers it with Locust.
    "Scenario": "loadtests.run_controller",
    "RunSettings": "loadtests.scenario",
    "SSEUser": "loadtests.run_controller",
    "OpenAISDKUser": "loadtests.run_controller",
}

__all__ = [
    "OUTCOMES",
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
    "RunSettings",
    "SSEParser",
    "SSEUser",
    "Scenario",
]
assert sorted(__all__) == sorted(_EXPORTS)

if TYPE_CHECKING:  # what the lazy names are, for editors and type checkers; never run
    from loadtests.gates import Expect, Gate, GateResult, NoProxyTimeouts
    from loadtests.outcome import OUTCOMES, Outcome, RequestRow
    from loadtests.scenario import RunSettings, Scenario
    from loadtests.sse import Frame, SSEParser
    from loadtests.users import OpenAISDKUser, SSEUser
    from loadtests.workload import RequestMix, RequestSpec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadtests' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
