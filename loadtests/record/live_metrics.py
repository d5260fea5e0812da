"""The run's own figures as Prometheus metrics while it goes (``--live-metrics-port``): docs/live-metrics.md.

Only the process that holds the results serves (the single process, or the master: never a worker),
on a port the user opens; nothing is served by default. The figures come from the batches the run
already makes (``loadtests.record.recorder``: rows, frame records, lag samples; with ``--processes``
the workers' batches as the master receives them), counted where ``RunWriter`` writes them, in a
thread of gevent's pool, off the event loop: the load's loop does nothing more per request or per
frame. So each figure is as fresh as the last batch written (``--flush-interval``, 2 s by default).

Timing is what this harness measures, so nothing here runs on the gevent loop but ``open`` (one bind)
and ``close``. The listening socket is the standard library's own class (never gevent's), served by
one native thread that answers one scrape at a time; gate states are asked for by a second native
thread at a bounded rate (``GateWatch``), of a judge that runs in a child process
(``loadtests.run.live_gates``: judging holds the GIL for tens of milliseconds at a time).
Counting a batch is vectorised (numpy buckets), its state kept under a native lock that a scrape
holds only to copy it.

Every series has the labels ``scenario`` and ``worker`` (``local`` in one process; on a master the
worker's name as its rows carry it, ``master`` for the master's own lag), except ``gate_state``,
``run_info`` and ``keep_alive_interval_seconds``, which are the run's. Invariant: the series are the
current test's only (``begin`` resets them: one web UI process runs many tests), so their number is
bounded by the run's routes, outcomes, gates and workers, never by its length.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gevent import monkey
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from loadtests.base.ports import http_url
from loadtests.errors import UsageError

PREFIX = "sse_soak_"
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0)
"""TTFT and frame gaps, 5 ms to 2 min: a token gap is milliseconds, a keep-alive interval seconds,
a proxy's read timeout a minute (nginx's 60 s), a stuck stream more."""
LAG_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""The harness's event-loop lag, 0.5 ms to 2.5 s (the ``harness_kept_up`` gate's default limit is 5 ms)."""
FRAME_KINDS = ("data", "keepalive", "done")
GAP_KINDS = ("any", "data")
GATE_INTERVAL_S = 10.0
"""Gate states are judged at most this often."""
GATE_SHARE = 0.05
"""...and for at most this share of the time: the next judgement waits at least 19 times the last's cost."""
NOT_JUDGED, FAILING, PASSING = -1, 0, 1
ACCEPT_POLL_S = 0.5
"""How long the server's accept waits before it looks whether it was closed."""
ANSWER_TIMEOUT_S = 5.0
"""A scraper that sends nothing, or reads nothing, for this long is dropped: one scrape at a time."""
MAX_REQUEST_BYTES = 8192

_native_socket = monkey.get_original("socket", "socket")
_native_lock = monkey.get_original("_thread", "allocate_lock")
_native_thread = monkey.get_original("_thread", "start_new_thread")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunLabels:
    """What ``run_info`` says of the test under way; ``server`` as the run shows it (redacted)."""

    scenario: str
    server: str
    proxy: str
    run_dir: str
    keep_alive_interval: float | None = None
    """The server's keep-alive interval (s; 0: off) when known."""


class _Histogram:
    """Bucket counts (not cumulative; the last is +Inf) and the sum, added to a batch at a time."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)
        self.total = 0.0

    def add(self, values: np.ndarray) -> None:
        if values.size:
            self.counts += np.bincount(np.searchsorted(self.bounds, values, side="left"), minlength=len(self.counts))
            self.total += float(values.sum())

    def exposed(self) -> tuple[list[tuple[str, float]], float]:
        cumulative = np.cumsum(self.counts)
        buckets = [(f"{bound:g}", float(count)) for bound, count in zip(self.bounds, cumulative[:-1], strict=True)]
        return [*buckets, ("+Inf", float(cumulative[-1]))], self.total


def _floats(values: Iterable[Any]) -> np.ndarray:
    """``values`` as a float array, nulls left out."""
    try:
        array = np.asarray(values, dtype=float)
    except TypeError:  # a None among them
        array = np.asarray([value for value in values if value is not None], dtype=float)
    return array[~np.isnan(array)] if array.size else array


@dataclass
class _Counts:
    """One test's figures so far."""

    requests: collections.Counter[tuple[str, str, str]] = field(default_factory=collections.Counter)
    frames: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    inband_errors: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    protocol_errors: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    started: collections.Counter[str] = field(default_factory=collections.Counter)
    finished: collections.Counter[str] = field(default_factory=collections.Counter)
    ttft: dict[tuple[str, str], _Histogram] = field(default_factory=dict)
    gaps: dict[tuple[str, str], _Histogram] = field(default_factory=dict)
    lag: dict[str, _Histogram] = field(default_factory=dict)
    gates: dict[str, int] = field(default_factory=dict)


def _histogram(table: dict[Any, _Histogram], key: Any, bounds: tuple[float, ...]) -> _Histogram:
    if key not in table:
        table[key] = _Histogram(bounds)
    return table[key]


class LiveFigures:
    """The current test's figures, fed batch by batch from any thread, read by the scrape's thread."""

    def __init__(self) -> None:
        self._lock = _native_lock()
        self._counts = _Counts()
        self._labels: RunLabels | None = None

    def begin(self, labels: RunLabels) -> None:
        """A test starts: its figures from zero, its ``run_info``."""
        with self._lock:
            self._counts = _Counts()
            self._labels = labels

    def set_gates(self, states: Mapping[str, int]) -> None:
        """Each gate's state so far (``PASSING``, ``FAILING``, ``NOT_JUDGED``), by name."""
        with self._lock:
            self._counts.gates = dict(states)

    def set_keep_alive_interval(self, interval: float | None) -> None:
        """The interval once known (inferred by a judgement so far), when the run was not told it."""
        with self._lock:
            if self._labels is not None and interval is not None and self._labels.keep_alive_interval is None:
                self._labels = RunLabels(**{**vars(self._labels), "keep_alive_interval": interval})

    def observe_batch(self, batch: Mapping[str, Any]) -> None:
        """Count one ``Recorder.take_batch()`` (with its ``lag`` and ``worker``, as ``run.collect`` makes
        it), once, as it is written. Frames are counted from the frame records where the batch has a
        stream's, else (an ok stream left out by ``--frame-sample-rate``) from its row's counts: every
        frame received either way. Gaps are the frame records' only."""
        worker = str(batch.get("worker") or "local")
        rows: list[dict[str, Any]] = batch.get("rows") or []
        frames: Mapping[str, list[Any]] = batch.get("frames") or {}
        lag: Mapping[str, list[Any]] | None = batch.get("lag")
        requests: collections.Counter[tuple[str, str, str]] = collections.Counter()
        inband: collections.Counter[tuple[str, str]] = collections.Counter()
        protocol: collections.Counter[tuple[str, str]] = collections.Counter()
        frame_counts: collections.Counter[str] = collections.Counter()
        ttft: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        finished: collections.Counter[str] = collections.Counter()
        request_ids: list[str] = frames.get("request_id") or []
        framed = set(request_ids)
        for row in rows:
            row_worker, route, outcome = str(row.get("worker") or worker), str(row["route"]), str(row["outcome"])
            requests[(row_worker, route, outcome)] += 1
            if outcome == "inband_error":
                inband[(row_worker, route)] += 1
            elif outcome == "protocol_error":
                protocol[(row_worker, route)] += 1
            if outcome != "not_sent":
                finished[worker] += 1
            if row.get("ttft_s") is not None:
                ttft[(row_worker, route)].append(row["ttft_s"])
            if row["request_id"] not in framed:
                done = 1 if row.get("done") else 0
                frame_counts["done"] += done
                frame_counts["data"] += max(0, int(row.get("data_frames") or 0) - done)
                frame_counts["keepalive"] += int(row.get("keepalive_frames") or 0)
        kinds = frames.get("kind") or []
        frame_counts.update(kinds)
        gaps = self._gaps(request_ids, kinds, frames.get("t_s") or [], frames.get("gap_s") or [])
        lag_s = _floats(lag["lag_s"]) if lag and lag.get("lag_s") else None
        lag_worker = str(lag["worker"][0]) if lag and lag.get("worker") else worker
        ttft_s = {key: _floats(values) for key, values in ttft.items()}
        with self._lock:
            counts = self._counts
            counts.requests.update(requests)
            counts.inband_errors.update(inband)
            counts.protocol_errors.update(protocol)
            if batch.get("started"):
                counts.started[worker] += int(batch["started"])
            counts.finished.update(finished)
            if rows or kinds:
                for kind in FRAME_KINDS:
                    counts.frames[(worker, kind)] += frame_counts.get(kind, 0)
            for key, values in ttft_s.items():
                _histogram(counts.ttft, key, LATENCY_BUCKETS_S).add(values)
            for kind, values in gaps.items():
                _histogram(counts.gaps, (worker, kind), LATENCY_BUCKETS_S).add(values)
            if lag_s is not None:
                _histogram(counts.lag, lag_worker, LAG_BUCKETS_S).add(lag_s)

    @staticmethod
    def _gaps(request_ids: list[str], kinds: list[str], times: list[float], gaps: list[float]) -> dict[str, np.ndarray]:
        """Every frame's gap (``any``: since the stream's last arrival of any kind, keep-alives
        included) and the token gaps (``data``: between a stream's consecutive data frames)."""
        if not kinds:
            return {}
        is_data = np.asarray(kinds, dtype=object) == "data"
        data_times = np.asarray(times, dtype=float)[is_data]
        data_streams = np.asarray(request_ids, dtype=object)[is_data]
        same_stream = data_streams[1:] == data_streams[:-1]
        return {"any": _floats(gaps), "data": np.diff(data_times)[same_stream]}

    def families(self) -> Iterator[Metric]:
        """The figures as Prometheus metric families (a copy taken under the lock)."""
        with self._lock:
            labels, counts = self._labels, self._counts
            requests = dict(counts.requests)
            frames = dict(counts.frames)
            inband, protocol = dict(counts.inband_errors), dict(counts.protocol_errors)
            open_streams = {w: max(0, counts.started[w] - counts.finished[w]) for w in counts.started | counts.finished}
            ttft = {key: hist.exposed() for key, hist in counts.ttft.items()}
            gaps = {key: hist.exposed() for key, hist in counts.gaps.items()}
            lag = {key: hist.exposed() for key, hist in counts.lag.items()}
            gates = dict(counts.gates)
        if labels is None:
            return
        scenario = labels.scenario
        family = CounterMetricFamily(
            PREFIX + "requests",
            "Requests finished: one per row recorded",
            labels=["scenario", "worker", "route", "outcome"],
        )
        for (worker, route, outcome), count in sorted(requests.items()):
            family.add_metric([scenario, worker, route, outcome], count)
        yield family
        family = CounterMetricFamily(
            PREFIX + "frames", "SSE frames received, every stream's", labels=["scenario", "worker", "kind"]
        )
        for (worker, kind), count in sorted(frames.items()):
            family.add_metric([scenario, worker, kind], count)
        yield family
        for name, text, table in (
            ("inband_errors", "Streams ended by an in-band error (inband_error rows)", inband),
            ("protocol_errors", "Streams whose SSE could not be read (protocol_error rows)", protocol),
        ):
            family = CounterMetricFamily(PREFIX + name, text, labels=["scenario", "worker", "route"])
            for (worker, route), count in sorted(table.items()):
                family.add_metric([scenario, worker, route], count)
            yield family
        histogram = HistogramMetricFamily(
            PREFIX + "ttft_seconds", "Time from the send to the first token", labels=["scenario", "worker", "route"]
        )
        for (worker, route), (buckets, total) in sorted(ttft.items()):
            histogram.add_metric([scenario, worker, route], buckets, total)
        yield histogram
        histogram = HistogramMetricFamily(
            PREFIX + "frame_gap_seconds",
            "Gaps before each frame recorded: any (since the last arrival, keep-alives included) or data (tokens)",
            labels=["scenario", "worker", "kind"],
        )
        for (worker, kind), (buckets, total) in sorted(gaps.items()):
            histogram.add_metric([scenario, worker, kind], buckets, total)
        yield histogram
        gauge = GaugeMetricFamily(
            PREFIX + "open_streams", "Streams open as of the last batch", labels=["scenario", "worker"]
        )
        for worker, count in sorted(open_streams.items()):
            gauge.add_metric([scenario, worker], count)
        yield gauge
        histogram = HistogramMetricFamily(
            PREFIX + "harness_lag_seconds", "The harness's event-loop lag samples", labels=["scenario", "worker"]
        )
        for worker, (buckets, total) in sorted(lag.items()):
            histogram.add_metric([scenario, worker], buckets, total)
        yield histogram
        gauge = GaugeMetricFamily(
            PREFIX + "gate_state",
            "Each gate so far: 1 passing, 0 failing, -1 not judged yet",
            labels=["scenario", "gate"],
        )
        for gate, state in sorted(gates.items()):
            gauge.add_metric([scenario, gate], state)
        yield gauge
        gauge = GaugeMetricFamily(
            PREFIX + "run_info", "The test under way", labels=["scenario", "server", "proxy", "run_dir"]
        )
        gauge.add_metric([scenario, labels.server, labels.proxy, labels.run_dir], 1)
        yield gauge
        gauge = GaugeMetricFamily(
            PREFIX + "keep_alive_interval_seconds", "The server's keep-alive interval (0: off)", labels=["scenario"]
        )
        if labels.keep_alive_interval is not None:
            gauge.add_metric([scenario], labels.keep_alive_interval)
        yield gauge


class _Collector:
    def __init__(self, figures: LiveFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        return self.figures.families()


class LiveMetricsServer:
    """``GET /metrics`` on a native socket, answered by one native thread until ``close()``."""

    def __init__(self, sock: socket.socket, figures: LiveFigures) -> None:
        self._sock = sock
        self.figures = figures
        self.address, self.port = sock.getsockname()[:2]
        self.generated = 0
        """``/metrics`` answers made: the figures were read for the last one at its making."""
        self.sent_generation = 0
        """The last answer made that was sent whole (``generated`` as it was made)."""
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(figures))
        self._closed = False
        _native_thread(self._serve, ())

    @classmethod
    def open(cls, bind: str, port: int, figures: LiveFigures | None = None) -> LiveMetricsServer:
        """Listen on ``bind``:``port`` (0: a free one); ``UsageError`` in one line when it cannot."""
        family = socket.AF_INET6 if ipaddress.ip_address(bind).version == 6 else socket.AF_INET
        sock = _native_socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((bind, port))
            sock.listen(16)
            sock.settimeout(ACCEPT_POLL_S)
        except OSError as exc:
            sock.close()
            reason = exc.strerror or str(exc)
            raise UsageError(f"--live-metrics-port {port}: cannot listen on {bind} port {port} ({reason})") from None
        return cls(sock, figures or LiveFigures())

    @property
    def url(self) -> str:
        return http_url(self.address, self.port) + "/metrics"

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            try:
                conn.settimeout(ANSWER_TIMEOUT_S)
                self._answer(conn)
            except OSError:
                pass  # the scraper went away
            except Exception:  # a bug of ours: this scrape fails, the run and the next scrapes go on
                logger.exception("sse-soak: a live metrics scrape failed")
            finally:
                conn.close()

    def _answer(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < MAX_REQUEST_BYTES:
            received = conn.recv(MAX_REQUEST_BYTES)
            if not received:
                break
            head += received
        words = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
        method, path = (words[0], words[1].split(b"?", 1)[0]) if len(words) >= 2 else (b"", b"")
        if method not in (b"GET", b"HEAD"):
            conn.sendall(_response(405, b"GET only\n"))
        elif path != b"/metrics":
            conn.sendall(_response(404, b"the metrics are at /metrics\n"))
        else:
            self.generated += 1  # only this thread writes it
            generation = self.generated
            body = generate_latest(self._registry)
            conn.sendall(_response(200, body, CONTENT_TYPE_LATEST, head_only=method == b"HEAD"))
            self.sent_generation = generation


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}


def _response(
    status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", head_only: bool = False
) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + (b"" if head_only else body)


class GateWatch:
    """Judges the test's gates so far in a native thread, every ``GATE_INTERVAL_S`` at most and for
    at most ``GATE_SHARE`` of the time, until stopped; ``judge`` returns each gate's state by name
    and the keep-alive interval it found (or None), and writes nothing. A ``judge`` with a
    ``close()`` is closed as the thread ends."""

    def __init__(
        self,
        figures: LiveFigures,
        judge: Callable[[], tuple[dict[str, int], float | None]],
        interval: float = GATE_INTERVAL_S,
    ) -> None:
        self.figures = figures
        self.judge = judge
        self.interval = interval
        self._ended = _native_lock()
        self._ended.acquire()  # released as the thread ends
        self._stop = _native_lock()
        self._stop.acquire()  # released by stop(): the thread's wait ends at once
        self._setting = _native_lock()
        """Held while a judgement's states are set: once ``stop`` returns, none is."""
        self._stopped = False
        _native_thread(self._run, ())

    def stop(self) -> None:
        """No state is set after this returns (a judgement under way is dropped), so the caller's
        final states stand. Blocks at most while one judgement's states are being set."""
        with self._setting:
            if self._stopped:
                return
            self._stopped = True
        self._stop.release()

    def join(self, timeout: float) -> bool:
        """Whether the thread ended within ``timeout`` seconds (blocking: for tests and tools)."""
        if self._ended.acquire(timeout=timeout):
            self._ended.release()
            return True
        return False

    def _run(self) -> None:
        try:
            self._judge_until_stopped()
        finally:
            close = getattr(self.judge, "close", None)
            if close is not None:
                try:
                    close()  # a judge of its own (a child process) ends with the watch
                except Exception:
                    logger.exception("sse-soak: the live gate judge did not close")
            self._ended.release()

    def _judge_until_stopped(self) -> None:
        wait = self.interval
        while not self._stop.acquire(timeout=wait):
            began = time.monotonic()
            try:
                states, interval = self.judge()
            except Exception as exc:  # a part read as it was renamed, say: the next judgement tries again
                logger.debug("sse-soak: gate states not judged this time: %s", exc)
            else:
                with self._setting:
                    if not self._stopped:
                        self.figures.set_gates(states)
                        self.figures.set_keep_alive_interval(interval)
            cost = time.monotonic() - began
            wait = max(self.interval, cost * (1 - GATE_SHARE) / GATE_SHARE)


def serving_line(server: LiveMetricsServer) -> str:
    return f"live metrics: {server.url}"
