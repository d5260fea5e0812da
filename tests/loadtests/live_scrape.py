"""Scraping a run's live metrics (``--live-metrics-port``) as Prometheus does, and reading the samples."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

LIVE_LINE = r"^live metrics: (http://\S+/metrics)$"
"""The line a run prints when it serves its live metrics."""


@dataclass(frozen=True)
class Scrape:
    """One scrape's samples: ``(name, labels)`` and value."""

    samples: list[tuple[str, dict[str, str], float]]

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        return sum(
            value
            for sample, sample_labels, value in self.samples
            if sample == name and labels.items() <= sample_labels.items()
        )

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """``name``'s samples (those with ``labels``) summed by the value of ``label``."""
        found: dict[str, float] = {}
        for sample, sample_labels, value in self.samples:
            if sample == name and labels.items() <= sample_labels.items():
                found[sample_labels[label]] = found.get(sample_labels[label], 0.0) + value
        return found

    def labels_of(self, name: str) -> list[dict[str, str]]:
        return [sample_labels for sample, sample_labels, _ in self.samples if sample == name]


def scrape(url: str) -> Scrape:
    """``GET url`` read by prometheus_client's parser; an AssertionError when it is no 200."""
    with httpx.Client(timeout=30, trust_env=False) as client:
        answer = client.get(url)
    assert answer.status_code == 200, (answer.status_code, answer.text[:500])
    samples = [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    ]
    return Scrape(samples)


def scrape_until(url: str, condition: Callable[[Scrape], bool], timeout: float = 120.0) -> Scrape:
    """The first scrape of ``url`` for which ``condition`` holds, scraping again until it does (the
    figures move with each batch the run writes); an AssertionError with the last scrape after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = scrape(url)
        if condition(found):
            return found
        assert time.monotonic() < deadline, f"no scrape of {url} as awaited; the last:\n{found.samples}"
        time.sleep(0.2)  # the next attempt; what is awaited is the condition


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on."""
    connections = psutil.Process(pid).net_connections(kind="inet")
    return {connection.laddr.port for connection in connections if connection.status == psutil.CONN_LISTEN}
