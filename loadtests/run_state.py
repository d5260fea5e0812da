"""The per-process state of one Locust run, reachable from its ``Environment``.

Users need the recorder, the model, the worker's name and the prepared request mixes; the
scenario hooks need the same objects at the end. Keeping them in one ``RunState`` per
``Environment`` (not in module globals) lets tests run several environments in one process.
Mixes are prepared (prompts built and measured against the target) once per process, by the
first user that needs them, while the others wait on a gevent lock.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx
from gevent.lock import Semaphore

from loadtests.recorder import Recorder
from loadtests.workload import PreparedMix, RequestMix, ServerFacts, discover

DEFAULT_CLIENT_IDLE_TIMEOUT = 130.0
"""Seconds of silence before the client gives up: above nginx's and AWS ALB's 60 s and
Cloudflare's 100 s, so that a proxy, not the client, is what cuts a silent stream."""


@dataclass
class RunState:
    model_option: str | None = None
    api_key: str | None = None
    client_idle_timeout: float = DEFAULT_CLIENT_IDLE_TIMEOUT
    frame_sample_rate: float = 1.0
    """Share of ``ok`` streams whose frame records are kept; other outcomes always keep theirs."""
    runner: Any = None
    recorder: Recorder = field(default_factory=Recorder)
    facts: ServerFacts | None = None
    _mixes: dict[int, PreparedMix] = field(default_factory=dict)
    _lock: Semaphore = field(default_factory=Semaphore)

    @property
    def worker(self) -> str:
        """``worker-N`` on a Locust worker (its index is known only once it joined the master)."""
        index = getattr(self.runner, "worker_index", None)
        return f"worker-{index}" if index is not None and index >= 0 else "local"

    def keeps_frames(self, request_id: str, outcome: str) -> bool:
        """Frame sampling, decided per request (the same request id always decides the same way)."""
        if outcome != "ok" or self.frame_sample_rate >= 1.0:
            return True
        return int(request_id[:8], 16) / 0x1_0000_0000 < self.frame_sample_rate

    @property
    def model(self) -> str:
        if self.facts is None:
            raise RuntimeError("the target server was not discovered yet")
        return self.facts.model

    def http(self, host: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=host, headers=headers, timeout=60.0)

    def prepared_mix(self, mix: RequestMix, host: str) -> PreparedMix:
        """``mix`` built against this run's target; the first caller builds it, others wait."""
        prepared = self._mixes.get(id(mix))
        if prepared is None:
            with self._lock:
                prepared = self._mixes.get(id(mix))
                if prepared is None:
                    with self.http(host) as client:
                        if self.facts is None:
                            self.facts = discover(client, self.model_option)
                        prepared = self._mixes[id(mix)] = mix.prepare(client, self.facts)
        return prepared


_STATES: weakref.WeakKeyDictionary[Any, RunState] = weakref.WeakKeyDictionary()


def run_state(environment: Any) -> RunState:
    """The ``RunState`` of ``environment``, created on first use."""
    state = _STATES.get(environment)
    if state is None:
        state = _STATES[environment] = RunState()
    return state
