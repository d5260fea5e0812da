"""``GET /metrics``: Prometheus text read live from the server's state at scrape time.

Names follow vLLM where vLLM has the metric (``vllm:num_requests_running``, ...); the rest are
ours. Counters live on ``ServerStats``; the collector only reads them, so there is one source of
truth and nothing to keep in sync.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from target_server.engine import Engine


@dataclass
class ServerStats:
    """Counters the routes update; the engine keeps its own token counters."""

    keepalive_comments: int = 0
    errors_by_status: collections.Counter[int] = field(default_factory=collections.Counter)
    requests_by_route: collections.Counter[str] = field(default_factory=collections.Counter)

    def count_keepalive(self) -> None:
        self.keepalive_comments += 1


class _Collector:
    def __init__(self, engine: Engine, stats: ServerStats) -> None:
        self._engine = engine
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        scheduler = self._engine.scheduler
        yield GaugeMetricFamily("vllm:num_requests_running", "Requests holding a slot.", scheduler.running)
        yield GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting for a slot.", scheduler.waiting)
        yield GaugeMetricFamily(
            "vllm:kv_cache_usage_perc",
            "Share of the simulated KV cache held by running requests' tokens (0-1).",
            self._engine.kv_cache_usage,
        )
        yield CounterMetricFamily("vllm:prompt_tokens", "Prompt tokens prefilled.", self._engine.prompt_tokens_total)
        yield CounterMetricFamily("vllm:generation_tokens", "Tokens generated.", self._engine.generation_tokens_total)
        yield CounterMetricFamily(
            "sse_keepalive_comments", "SSE keep-alive comments sent.", self._stats.keepalive_comments
        )
        requests = CounterMetricFamily("http_requests", "Generation requests by route.", labels=["route"])
        for route, value in sorted(self._stats.requests_by_route.items()):
            requests.add_metric([route], value)
        yield requests
        errors = CounterMetricFamily(
            "http_errors", "Error responses and in-band errors by status code.", labels=["status"]
        )
        for status, value in sorted(self._stats.errors_by_status.items()):
            errors.add_metric([str(status)], value)
        yield errors


def render(engine: Engine, stats: ServerStats) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(engine, stats))
    return generate_latest(registry)
