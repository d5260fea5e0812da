"""``GET /metrics``: Prometheus text read live from the server's state at scrape time.

Where vLLM 0.32.0 has the metric, the family is vLLM's: its name, type, help and labels
(``engine="0"``, ``model_name``): the scheduler's gauges and token counters the harness scrapes,
``http_requests_total`` by ``handler``, ``method`` and status class as vLLM's
prometheus-fastapi-instrumentator counts it, and the process and Python collectors. The other
families are this server's extensions (``sse_keepalive_comments_total``, ``http_errors_total``).
Counters live on ``ServerStats``; the collector only reads them, so there is one source of truth
and nothing to keep in sync. With ``--api-server-count N`` each process renders its own state, not
a sum: a scrape is answered by whichever process the kernel hands the connection, and its families
carry ``engine="<index>"`` (each process is a scheduler of its own, as each vLLM engine is), so a
reader can tell which share it saw.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

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


class _Collector:
    def __init__(self, engine: Engine, stats: ServerStats, model: str, engine_label: str) -> None:
        self._engine = engine
        self._stats = stats
        self._labels = [engine_label, model]

    def _gauge(self, name: str, help: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, help, labels=["engine", "model_name"])
        family.add_metric(self._labels, value)
        return family

    def _counter(self, name: str, help: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, help, labels=["engine", "model_name"])
        family.add_metric(self._labels, value, created=self._stats.started)
        return family

    def collect(self) -> Iterator[Metric]:
        scheduler = self._engine.scheduler
        yield self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", scheduler.running
        )
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", scheduler.waiting)
        yield self._gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self._engine.kv_cache_usage
        )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", self._engine.prompt_tokens_total
        )
        yield self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", self._engine.generation_tokens_total
        )
        requests = CounterMetricFamily(
            "http_requests",
            "Total number of requests by method, status and handler.",
            labels=["handler", "method", "status"],
        )
        for (handler, method, status), value in self._stats.requests.items():
            requests.add_metric([handler, method, status], value, created=self._stats.started)
        yield requests
        yield CounterMetricFamily(
            "sse_keepalive_comments", "SSE keep-alive comments sent.", self._stats.keepalive_comments
        )
        errors = CounterMetricFamily(
            "http_errors", "Error responses and in-band errors by status code.", labels=["status"]
        )
        for code, value in sorted(self._stats.errors_by_status.items()):
            errors.add_metric([str(code)], value)
        yield errors


class Exposition:
    """The registry one server's ``/metrics`` renders: process, platform and GC collectors (as
    prometheus_client's default registry has them) and the server's own, labelled ``engine_label``."""

    def __init__(self, engine: Engine, stats: ServerStats, model: str, engine_label: str = "0") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(_Collector(engine, stats, model, engine_label))

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
