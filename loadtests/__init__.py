"""The sse-soak harness: Locust users that record every SSE frame, gates, and reports.

The public surface is this package's names (everything a locustfile needs, below), ``launch`` (a
scenario run in a child process, for callers without Locust), ``pytest_plugin`` and ``smoke``
(pytest), ``errors`` (the one exception hierarchy) and the command line (``__main__``). Every other
module is internal (``_name``), one concept each, and data flows one way through them: declare
(``_scenario``, ``_options``, ``_workload``, ``_gates``), record (``_sse``, ``_arrival_clock``,
``_outcome``, ``_wire_tap``, ``_users``, ``_recorder``, ``_collect``, ``_run_writer``, ``_lag``,
``_server_metrics``), judge (``_figures``, ``_summary``, ``_judge``, ``_html_report``, ``_compare``,
``_drift``), run (``_run_controller``, ``_run_state``, ``_stack``, ``_proxy``, ``_child_run``,
``_soak``, ``_progress``, ``_resources``, ``_catalog``, ``_real_vllm``, ``_web_tab``: the web UI's
tab). docs/layout.md says what each holds.

Everything a locustfile needs is exported here. Names are re-exported lazily: importing Locust
monkey-patches the process for gevent, so only a locustfile that asks for ``SSEUser`` or
``Scenario`` pays for it, never ``loadtests._sse`` alone; type checkers and editors read the
``TYPE_CHECKING`` imports instead.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadtests import _gevent_compat  # noqa: F401 - first: lets httpx import under Locust's gevent

_EXPORTS = {
    "OUTCOMES": "loadtests._outcome",
    "Outcome": "loadtests._outcome",
    "RequestRow": "loadtests._outcome",
    "SseSoakError": "loadtests.errors",
    "UsageError": "loadtests.errors",
    "Expect": "loadtests._gates",
    "Gate": "loadtests._gates",
    "GateResult": "loadtests._gates",
    "NoProxyTimeouts": "loadtests._gates",
    "QUEUE_FOR_SILENCE": "loadtests._gates",
    "Unjudgeable": "loadtests._gates",
    "Frame": "loadtests._sse",
    "SSEParser": "loadtests._sse",
    "RequestMix": "loadtests._workload",
    "RequestSpec": "loadtests._workload",
    "Route": "loadtests._workload",
    # What a locustfile runs comes through the run controller: importing it registers it with Locust.
    "Scenario": "loadtests._run_controller",
    "RunSettings": "loadtests._scenario",
    "SSEUser": "loadtests._run_controller",
    "OpenAISDKUser": "loadtests._run_controller",
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
    from loadtests._gates import QUEUE_FOR_SILENCE, Expect, Gate, GateResult, NoProxyTimeouts, Unjudgeable
    from loadtests._outcome import OUTCOMES, Outcome, RequestRow
    from loadtests._scenario import RunSettings, Scenario
    from loadtests._sse import Frame, SSEParser
    from loadtests._users import OpenAISDKUser, SSEUser
    from loadtests._workload import RequestMix, RequestSpec, Route
    from loadtests.errors import SseSoakError, UsageError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadtests' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
