"""The sse-soak harness: Locust users that record every SSE frame, gates, and reports.

Modules, one concept each: ``sse`` (incremental frame parser), ``outcome`` (one stream's frames
and its single outcome), ``workload`` (prompt sizes and request mixes), ``users`` (Locust users),
``recorder`` (rows and frames of a process, table schemas), ``run_writer`` (parquet parts as the
run goes), ``collect`` (worker -> master batches), ``gates`` (pass/fail), ``report`` (summary and
verdict files), ``html_report``, ``rebuild``, ``compare``, ``scenario`` (a locustfile's hooks into
a Locust run), ``run_state`` (per-run objects), ``stack`` (services as child processes),
``proxy`` (the embedded reverse proxy), and the soak job: ``soak``, ``progress``, ``resources``,
``drift``.

Names are re-exported lazily: importing Locust monkey-patches the process for gevent, so only a
locustfile that asks for ``SSEUser`` or ``Scenario`` pays for it, never ``loadtests.sse`` alone.
"""

from __future__ import annotations

import importlib
from typing import Any

from loadtests import _gevent_compat  # noqa: F401 - first: lets httpx import under Locust's gevent

_EXPORTS = {
    "OUTCOMES": "loadtests.outcome",
    "RequestRow": "loadtests.outcome",
    "Expect": "loadtests.gates",
    "GateResult": "loadtests.gates",
    "Frame": "loadtests.sse",
    "SSEParser": "loadtests.sse",
    "RequestMix": "loadtests.workload",
    "RequestSpec": "loadtests.workload",
    "Scenario": "loadtests.scenario",
    "SSEUser": "loadtests.users",
    "OpenAISDKUser": "loadtests.users",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loadtests' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
