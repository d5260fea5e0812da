"""A server's samples and scheduler gauges as its ``/metrics`` says them, read through the harness's own scrape
(``fetch_samples``), so tests wait on the server's state instead of sleeping a fixed time."""

from __future__ import annotations

import time

from loadtests.record.server_metrics import fetch_samples

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


def scrape(url: str) -> dict[str, dict[str, float]]:
    """One scrape as the harness makes it (``fetch_samples``: a connection of its own, so any
    process may answer): sample name -> labels (``k="v"`` pairs) -> value."""
    rows = fetch_samples(url + "/metrics")
    found: dict[str, dict[str, float]] = {}
    for name, labels, value in zip(rows["name"], rows["labels"], rows["value"], strict=True):
        found.setdefault(name, {})[labels] = value
    return found


def gauge(url: str, name: str) -> float:
    """``name``'s value at the server ``url``, summed over its label sets (one per engine)."""
    rows = fetch_samples(url + "/metrics")
    values = [value for sample, value in zip(rows["name"], rows["value"], strict=True) if sample == name]
    assert values, f"{name} missing from {url}/metrics"
    return sum(values)


def scheduler(url: str) -> tuple[float, float]:
    """(running, waiting) requests at the server ``url`` now."""
    return gauge(url, RUNNING), gauge(url, WAITING)


def wait_for_scheduler(url: str, running: float, waiting: float = 0, within_s: float = 10) -> None:
    """Return once the server ``url`` has ``running`` requests running and ``waiting`` waiting;
    fail if it has not within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while (seen := scheduler(url)) != (running, waiting):
        assert time.monotonic() < deadline, f"(running, waiting) stayed {seen}, not {(running, waiting)}"
        time.sleep(0.02)  # polling the server's own state
