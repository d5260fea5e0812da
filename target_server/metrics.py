"""``GET /metrics``: Prometheus text read live from the server's state at scrape time.

Where vLLM 0.32.0 has the metric, the family is vLLM's: its name, type, help and labels
(``engine="0"``, ``model_name``): the scheduler's gauges and token counters the harness scrapes,
``http_requests_total`` by ``handler``, ``method`` and status class as vLLM's
prometheus-fastapi-instrumentator counts it, and the process and Python collectors. The other
families are this server's extensions (``sse_keepalive_comments_total``, ``http_errors_total``).
Counters live on ``ServerStats``; the collector only reads them, so there is one source of truth
and nothing to keep in sync.

With ``--api-server-count N`` every process answers for the whole server, as vLLM's API servers do
(measured on vLLM 0.32.0 with ``--api-server-count 2``: every scrape, whichever process answered,
gave the same token counters, summed over both, and ``http_requests_total`` summed; no process,
platform or GC families, which prometheus_client's multiprocess mode leaves out). Each process is a
scheduler of its own, as each vLLM engine is, so the scheduler's gauges and token counters come
once per process under ``engine="<index>"``; ``http_requests_total``, the keep-alive and error
counters are summed. The processes share their state through ``SharedMetrics``: each writes its
``ProcessSnapshot`` to a directory the parent made, every ``PUBLISH_INTERVAL_S``, and the one that
answers a scrape reads the others' (at most that old; vLLM's gauges are as old as the engine's
last step) beside its own, read live.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from target_server.engine import Engine

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNCOUNTED_HANDLERS = re.compile(r"/metrics|/health|/load|/ping|/version|/server_info")
"""vLLM's ``excluded_handlers``: requests to these are not in ``http_requests_total``."""


@dataclass
class ServerStats:
    """Counters the routes update; the engine keeps its own token counters."""

    keepalive_comments: int = 0
    errors_by_status: collections.Counter[int] = field(default_factory=collections.Counter)
    requests: collections.Counter[tuple[str, str, str]] = field(default_factory=collections.Counter)
    """``(handler, method, status class)`` -> requests answered, as ``http_requests_total``."""
    started: float = field(default_factory=time.time)

    def count_keepalive(self) -> None:
        self.keepalive_comments += 1


@dataclass(frozen=True)
class ProcessSnapshot:
    """What one server process adds to ``/metrics``, as plain data (it travels as JSON between the
    ``--api-server-count`` processes)."""

    engine: str
    running: int
    waiting: int
    kv_cache_usage: float
    prompt_tokens: int
    generation_tokens: int
    requests: list[tuple[str, str, str, int]]
    """``(handler, method, status class, answered)``, as ``http_requests_total``."""
    keepalive_comments: int
    errors_by_status: list[tuple[int, int]]
    started: float

    @classmethod
    def of(cls, engine: Engine, stats: ServerStats, engine_label: str) -> ProcessSnapshot:
        """This process's state now."""
        scheduler = engine.scheduler
        return cls(
            engine_label, scheduler.running, scheduler.waiting, engine.kv_cache_usage, engine.prompt_tokens_total,
            engine.generation_tokens_total, [(*key, count) for key, count in stats.requests.items()],
            stats.keepalive_comments, sorted(stats.errors_by_status.items()), stats.started,
        )  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessSnapshot:
        """Raises ``KeyError``/``TypeError``/``ValueError`` on anything but a snapshot."""
        return cls(
            str(data["engine"]), int(data["running"]), int(data["waiting"]), float(data["kv_cache_usage"]),
            int(data["prompt_tokens"]), int(data["generation_tokens"]),
            [(str(h), str(m), str(s), int(n)) for h, m, s, n in data["requests"]], int(data["keepalive_comments"]),
            [(int(code), int(count)) for code, count in data["errors_by_status"]], float(data["started"]),
        )  # fmt: skip


PUBLISH_INTERVAL_S = 0.1
"""How often each of several processes writes its ``ProcessSnapshot`` for the others to answer with."""


class SharedMetrics:
    """The ``--api-server-count`` processes' snapshots, one JSON file each in ``directory`` (made by
    the parent; removed by it, or by the last process out when the parent was killed). A file is
    replaced whole (written aside, then renamed), so a reader sees a snapshot whole or the one
    before it; a process that has not published yet is left out."""

    def __init__(self, directory: str, index: int, count: int) -> None:
        self.directory = Path(directory)
        self.index = index
        self.count = count

    def _path(self, index: int) -> Path:
        return self.directory / f"process-{index}.json"

    def publish(self, snapshot: ProcessSnapshot) -> None:
        aside = self.directory / f".process-{self.index}.json.tmp"
        aside.write_text(json.dumps(dataclasses.asdict(snapshot)))
        os.replace(aside, self._path(self.index))

    def withdraw(self) -> None:
        """This process stops serving: its snapshot goes, and the directory with the last one out
        (the parent removes it too, unless it was killed outright, leaving no one else to)."""
        with contextlib.suppress(OSError):
            self._path(self.index).unlink(missing_ok=True)
            self.directory.rmdir()  # refused while another process's snapshot is there

    def others(self) -> list[ProcessSnapshot]:
        found = []
        for index in range(self.count):
            if index == self.index:
                continue
            try:
                found.append(ProcessSnapshot.from_json(json.loads(self._path(index).read_text())))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not published yet, or the directory went with a parent stopping
        return found


_PER_ENGINE: list[
    tuple[type[GaugeMetricFamily | CounterMetricFamily], str, str, Callable[[ProcessSnapshot], float]]
] = [
    (
        GaugeMetricFamily,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        lambda s: s.running,
    ),
    (
        GaugeMetricFamily,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        lambda s: s.waiting,
    ),
    (
        GaugeMetricFamily,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        lambda s: s.kv_cache_usage,
    ),
    (CounterMetricFamily, "vllm:prompt_tokens", "Number of prefill tokens processed.", lambda s: s.prompt_tokens),
    (
        CounterMetricFamily,
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        lambda s: s.generation_tokens,
    ),
]
"""vLLM's scheduler gauges and token counters: one sample per engine (process), in this order."""


class _Collector:
    """The server's own families from ``snapshots()``, one per process (this one's first)."""

    def __init__(self, snapshots: Callable[[], list[ProcessSnapshot]], model: str) -> None:
        self._snapshots = snapshots
        self._model = model

    def collect(self) -> Iterator[Metric]:
        snapshots = sorted(self._snapshots(), key=lambda snapshot: int(snapshot.engine))
        created = snapshots[0].started if len(snapshots) == 1 else None  # multiprocess mode exposes none
        for kind, name, help, read in _PER_ENGINE:
            family = kind(name, help, labels=["engine", "model_name"])
            for snapshot in snapshots:
                labels = [snapshot.engine, self._model]
                if isinstance(family, CounterMetricFamily):
                    family.add_metric(labels, read(snapshot), created=created)
                else:
                    family.add_metric(labels, read(snapshot))
            yield family
        answered: collections.Counter[tuple[str, str, str]] = collections.Counter()
        errors: collections.Counter[int] = collections.Counter()
        for snapshot in snapshots:
            for handler, method, status, count in snapshot.requests:
                answered[(handler, method, status)] += count
            for code, count in snapshot.errors_by_status:
                errors[code] += count
        requests = CounterMetricFamily(
            "http_requests",
            "Total number of requests by method, status and handler.",
            labels=["handler", "method", "status"],
        )
        for (handler, method, status), value in answered.items():
            requests.add_metric([handler, method, status], value, created=created)
        yield requests
        yield CounterMetricFamily(
            "sse_keepalive_comments",
            "SSE keep-alive comments sent.",
            sum(snapshot.keepalive_comments for snapshot in snapshots),
        )
        by_status = CounterMetricFamily(
            "http_errors", "Error responses and in-band errors by status code.", labels=["status"]
        )
        for code, value in sorted(errors.items()):
            by_status.add_metric([str(code)], value)
        yield by_status


class Exposition:
    """The registry one server's ``/metrics`` renders. One process: process, platform and GC
    collectors (as prometheus_client's default registry has them) and the server's own, labelled
    ``engine_label``. One of several (``shared``): the whole server's families, none of those three."""

    def __init__(
        self,
        engine: Engine,
        stats: ServerStats,
        model: str,
        engine_label: str = "0",
        shared: SharedMetrics | None = None,
    ) -> None:
        self.engine = engine
        self.stats = stats
        self.engine_label = engine_label
        self.shared = shared
        self.registry = CollectorRegistry(auto_describe=False)
        if shared is None:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self.registry.register(_Collector(self._snapshots, model))

    def own(self) -> ProcessSnapshot:
        return ProcessSnapshot.of(self.engine, self.stats, self.engine_label)

    def _snapshots(self) -> list[ProcessSnapshot]:
        return [self.own(), *(self.shared.others() if self.shared is not None else [])]

    def publish(self) -> None:
        """Write this process's snapshot for the others (nothing when it is the only process)."""
        if self.shared is not None:
            self.shared.publish(self.own())

    def render(self) -> bytes:
        return generate_latest(self.registry)


class CountRequests:
    """Pure ASGI middleware counting answered requests into ``ServerStats.requests`` the way vLLM's
    instrumentator does: the handler is the matched route's path (``none`` when no route matches
    the path and method), the status its class (``2xx``), counted once the response has been sent
    (an exception counts as ``5xx``); ``UNCOUNTED_HANDLERS`` are not counted."""

    def __init__(self, app: ASGIApp, stats: ServerStats, routes: Iterable[BaseRoute]) -> None:
        self.app = app
        self.stats = stats
        self.routes = list(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            handler = self._handler(scope)
            if not UNCOUNTED_HANDLERS.search(handler):
                self.stats.requests[(handler, scope["method"], f"{str(status)[0]}xx")] += 1

    def _handler(self, scope: Scope) -> str:
        for route in self.routes:
            path = getattr(route, "path", None)
            if path is not None and route.matches(scope)[0] is Match.FULL:
                return str(path)
        return "none"
