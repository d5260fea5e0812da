"""The server's own view of a run: its Prometheus ``/metrics``, scraped while the run goes, and condensed.

A vLLM server (and the bundled one) exposes its scheduler's state at ``GET /metrics``. The process
that holds the run's results (the master, or the single local process; never a worker) scrapes the
server itself, not a proxy in front of it, every ``interval`` seconds into
``server_metrics.parquet`` (``SERVER_METRICS_SCHEMA``: ``time``, ``name``, ``labels``, ``value``), a
directory of parts written as the run goes, so a killed run keeps what was scraped and memory holds
one batch. Gauges and counters are kept whole; histograms and summaries only as their ``_sum`` and
``_count`` samples (their buckets would make a vLLM scrape many times bigger); ``_created`` samples
(creation times, not states) are dropped.

Timing is what this harness measures, so scraping never runs on the gevent event loop: the loop
only starts and stops it. Requests, parsing and part writes run in one native thread of gevent's
threadpool, over sockets of the standard library's own class (``native_connection``), never
gevent's, which would start a second hub in that thread. An https target is scraped over TLS done
in memory (``NativeTLS``: once gevent has patched the process, the ``ssl`` module's sockets are
gevent's, its in-memory ``SSLObject`` is not), trusting what the run's clients trust.

A target without ``/metrics`` (a refused connection, an HTTP error status, a body that is not
Prometheus text, no answer within ``SCRAPE_TIMEOUT_S``) is told once, in one line, and scraping
stops; the run goes on. After a first good scrape, a failed one is skipped and counted.

``CONCEPTS`` names, in one place, the samples the summary, report and soak windows read. The names
are vLLM's V1 metrics (``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``): gauges
``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` (a
share from 0 to 1; ``vllm:gpu_cache_usage_perc`` is its name before vLLM 0.9, deprecated since),
counters ``vllm:prompt_tokens`` and ``vllm:generation_tokens``, exposed with prometheus_client's
``_total`` suffix, each labelled by ``model_name`` and ``engine``. The bundled server uses the same
names. A concept's value at one scrape is the sum over label sets (engines), except a share
(KV-cache usage), which is their mean.
"""

from __future__ import annotations

import http.client
import io
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import gevent
import pandas as pd
import pyarrow as pa
from gevent import monkey
from prometheus_client.parser import text_string_to_metric_families

from loadtests.base.lines import say
from loadtests.base.safe_text import redacted_url
from loadtests.client.tls import TLS_FIX, certificate_problem, client_context
from loadtests.errors import ScrapeError
from loadtests.record.figures import quantile
from loadtests.record.recorder import write_part

_SERVER_METRICS_FIELDS: list[tuple[str, pa.DataType]] = [  # typed: a literal's mixed DataTypes would join to object
    ("time", pa.float64()),
    ("name", pa.string()),
    ("labels", pa.string()),
    ("value", pa.float64()),
]
SERVER_METRICS_SCHEMA = pa.schema(_SERVER_METRICS_FIELDS)
"""server_metrics.parquet: the wall-clock time (epoch s) the scrape's answer arrived, the sample's name as
exposed, its labels as ``k="v"`` pairs sorted by key and comma-joined ("" for none), its value."""
DEFAULT_SCRAPE_INTERVAL_S = 1.0
SCRAPE_TIMEOUT_S = 5.0
"""How long one scrape may take, connecting and reading included."""
MAX_BODY_BYTES = 16 << 20
"""A larger answer is no metrics page: a vLLM one is a few hundred KiB with its buckets."""
OFF = "turned off with --no-server-metrics"
NOT_RECORDED = "the run recorded no server metrics"

CONCEPTS: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
}
"""What the harness reads from a server's metrics: concept -> candidate sample names, first present wins."""
SHARES = frozenset({"kv_cache_usage"})
"""Concepts that are a share per label set: averaged over label sets, not summed."""
GAUGES = ("running", "waiting", "kv_cache_usage")
COUNTERS = ("prompt_tokens", "generation_tokens")
_AGGREGATE_SUFFIXES = {"histogram": ("_sum", "_count"), "summary": ("_sum", "_count"), "gaugehistogram": ("_gsum",)}

Rows = dict[str, list[Any]]
_T = TypeVar("_T")
logger = logging.getLogger(__name__)


def empty_rows() -> Rows:
    return {name: [] for name in SERVER_METRICS_SCHEMA.names}


def labels_text(labels: Mapping[str, str]) -> str:
    """``k="v"`` pairs sorted by key and comma-joined, values escaped as in Prometheus text."""
    escaped = {
        key: value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for key, value in labels.items()
    }
    return ",".join(f'{key}="{escaped[key]}"' for key in sorted(escaped))


def parse_exposition(text: str, at: float) -> Rows:
    """The samples of Prometheus text ``text`` as rows stamped ``at`` (module docstring: what is
    kept). Raises ``ValueError`` when ``text`` is not Prometheus text."""
    rows = empty_rows()
    for family in text_string_to_metric_families(_without_buckets(text)):
        suffixes = _AGGREGATE_SUFFIXES.get(family.type)
        for sample in family.samples:
            if suffixes is not None and sample.name not in {family.name + suffix for suffix in suffixes}:
                continue
            rows["time"].append(at)
            rows["name"].append(sample.name)
            rows["labels"].append(labels_text(sample.labels))
            rows["value"].append(float(sample.value))
    return rows


def _without_buckets(text: str) -> str:
    """``text`` without the histograms' ``_bucket`` lines and the ``_created`` ones, which are never
    kept. Parsing is Python code that holds the GIL the event loop needs, even in another thread, and
    most of a vLLM page is buckets: a 756-line page (2 engines, 14 histograms) parsed in 14.5 ms of
    CPU whole, in 0.5 ms (this filter) + 1.4 ms without them. Scraped every second for 10 s on a
    2-core machine, the whole page lifted the loop's lag p99 to 4.2 ms (max 15.9 ms; 1.0-2.0 ms and
    4.4 ms in the same runs without scraping); filtered, p99 0.42 ms and max 3.1 ms, within the
    runs without scraping (0.36-0.46 ms, 3.7-4.0 ms)."""
    histograms: set[str] = set()
    kept = []
    for line in text.split("\n"):
        if line.startswith("# TYPE "):
            words = line.split()
            if len(words) >= 4 and words[3] in ("histogram", "gaugehistogram"):
                histograms.add(words[2])
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith("_created") or (name.endswith("_bucket") and name.removesuffix("_bucket") in histograms):
            continue
        kept.append(line)
    return "\n".join(kept)


# --- scraping, in a native thread ------------------------------------------------------------

_native_socket = monkey.get_original("socket", "socket")
_native_getaddrinfo = monkey.get_original("socket", "getaddrinfo")
_native_lock = monkey.get_original("_thread", "allocate_lock")


def native_connection(address: tuple[str, int], timeout: float | None) -> socket.socket:
    """A TCP connection on the standard library's own socket class, whether or not gevent patched
    the process: blocking with ``timeout``, usable from any native thread, never starting a hub."""
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, target in _native_getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = _native_socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(target)
        except OSError as exc:
            sock.close()
            error = exc
        else:
            return sock
    raise error or OSError(f"no address for {host}")


class _NativeHTTPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = native_connection((self.host, self.port), self.timeout)


class NativeTLS:
    """TLS over a native socket, never gevent's: an ``ssl.SSLObject`` over memory BIOs (which does
    no I/O of its own), its records sent and received here with the socket's blocking calls. It
    verifies as the run's other clients do (``loadtests.client.tls.client_context``). Offers what
    ``http.client`` asks of a socket: ``sendall``, ``makefile("rb")`` and ``close``."""

    def __init__(self, sock: socket.socket, hostname: str) -> None:
        self._sock = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = client_context().wrap_bio(self._incoming, self._outgoing, server_hostname=hostname)
        self._until_done(self._tls.do_handshake)

    def _until_done(self, operation: Callable[..., _T], *args: Any) -> _T:
        """``operation(*args)``, feeding it the server's records until it has what it needs; every
        record it produced is sent before this returns."""
        while True:
            try:
                result = operation(*args)
            except ssl.SSLWantReadError:
                self._send_produced()
                received = self._sock.recv(65536)
                if received:
                    self._incoming.write(received)
                else:
                    self._incoming.write_eof()
                continue
            self._send_produced()
            return result

    def _send_produced(self) -> None:
        produced = self._outgoing.read()
        if produced:
            self._sock.sendall(produced)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._until_done(self._tls.write, view) :]

    def read_into(self, buffer: memoryview) -> int:
        """Up to ``len(buffer)`` bytes of the answer into ``buffer``; 0 at its end (a close with or
        without TLS's close_notify: the HTTP framing says whether the answer was whole)."""
        try:
            return cast(int, self._until_done(self._tls.read, len(buffer), buffer))  # the count, given a buffer
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return 0

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        return io.BufferedReader(_TLSReader(self))

    def close(self) -> None:
        self._sock.close()


class _TLSReader(io.RawIOBase):
    def __init__(self, tls: NativeTLS) -> None:
        self._tls = tls

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._tls.read_into(memoryview(buffer).cast("B"))


class _NativeHTTPSConnection(http.client.HTTPConnection):
    default_port = http.client.HTTPS_PORT

    def connect(self) -> None:
        sock = native_connection((self.host, self.port), self.timeout)
        try:
            self.sock = NativeTLS(sock, self.host)  # what http.client asks of a socket
        except BaseException:
            sock.close()
            raise


def fetch_samples(url: str, headers: Mapping[str, str] | None = None, timeout: float = SCRAPE_TIMEOUT_S) -> Rows:
    """One scrape of the metrics page ``url`` (http or https) as rows stamped when its answer
    arrived. Blocking; raises ``ScrapeError`` when it gives no metrics."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError("is not scraped: only http and https targets are")
    kind = _NativeHTTPSConnection if parts.scheme == "https" else _NativeHTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("GET", parts.path or "/", headers={"Accept": "text/plain", **(headers or {})})
        response = connection.getresponse()
        body = response.read(MAX_BODY_BYTES + 1)
    except TimeoutError:
        raise ScrapeError(f"got no answer within {timeout:g} s") from None
    except ssl.SSLError as exc:
        reason = certificate_problem(exc) or f"{type(exc).__name__}: {exc}"
        raise ScrapeError(f"failed (TLS: {reason}; {TLS_FIX})") from None
    except (OSError, http.client.HTTPException) as exc:
        reason = "connection refused" if isinstance(exc, ConnectionRefusedError) else f"{type(exc).__name__}: {exc}"
        raise ScrapeError(f"failed ({reason})") from None
    finally:
        connection.close()
    at = time.time()
    if response.status != 200:
        raise ScrapeError(f"answered HTTP {response.status}")
    if len(body) > MAX_BODY_BYTES:
        raise ScrapeError(f"answered more than {MAX_BODY_BYTES >> 20} MiB")
    try:
        rows = parse_exposition(body.decode("utf-8"), at)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ScrapeError(f"answered a body that is not Prometheus text ({str(exc)[:80]})") from None
    if not rows["name"]:
        raise ScrapeError("answered no samples")
    return rows


class ServerMetricsScraper:
    """Scrapes one server's ``/metrics`` into one ``server_metrics.parquet`` directory until stopped.
    ``start()`` and ``stop()`` are called from the gevent loop; everything else runs in the scraper's
    own native thread. Invariant: a row scraped is written once, by the thread, before ``stop()``
    returns (or kept in memory while the disk refuses it)."""

    def __init__(
        self,
        server_url: str,
        directory: Path,
        interval: float = DEFAULT_SCRAPE_INTERVAL_S,
        flush_interval: float = 2.0,
        headers: Mapping[str, str] | None = None,
        timeout: float = SCRAPE_TIMEOUT_S,
    ) -> None:
        self.url = server_url.rstrip("/") + "/metrics"
        self.shown_url = redacted_url(self.url)
        """The URL as every line and file shows it: ``--host``'s password and query values masked."""
        self.directory = directory
        self.interval = interval
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.scrapes = 0
        self.failed_scrapes = 0
        """Scrapes that failed after a first good one: skipped."""
        self.refusal: str | None = None
        """Why the server gave no metrics at the first scrape; scraping stopped there."""
        self.rows_written = 0
        self._headers = dict(headers or {})
        self._batch = empty_rows()
        self._parts = 0
        self._write_failed = False
        self._stop = _native_lock()
        self._stop.acquire()  # released by stop(): the thread's sleeps end at once
        self._done: Any = None

    def start(self) -> None:
        if self._done is None:
            self._done = gevent.get_hub().threadpool.spawn(self._run)

    def stop(self) -> str | None:
        """Stop scraping and write what is left; the calling greenlet waits for the thread, the loop
        runs on. Returns why the run has no server metrics, None when it has some."""
        if self._done is not None:
            self._stop.release()
            self._done.get()
            self._done = None
        return self.unavailable

    @property
    def unavailable(self) -> str | None:
        if self.refusal is not None:
            return self.refusal
        return None if self.scrapes else NOT_RECORDED

    def _run(self) -> None:
        """Scrape at once, then at ``interval`` against absolute deadlines (a slow scrape skips the
        slots it overran, never bunches them), write a part every ``flush_interval``, and the rest at
        the end."""
        try:
            due = flushed = time.monotonic()
            while self._scrape_once():
                now = time.monotonic()
                due += self.interval * ((now - due) // self.interval + 1)
                if now - flushed >= self.flush_interval:
                    self._flush()
                    flushed = now
                if self._stop.acquire(timeout=max(0.0, due - time.monotonic())):
                    break
            self._flush()
        except Exception:  # a bug of ours: the run goes on, without the rest of its server metrics
            logger.exception("sse-soak: scraping %s stopped", self.shown_url)

    def _scrape_once(self) -> bool:
        """One scrape into the batch; False once the server refused the first one (scraping stops)."""
        try:
            rows = fetch_samples(self.url, self._headers, self.timeout)
        except ScrapeError as exc:
            if self.scrapes:
                self.failed_scrapes += 1
                return True
            self.refusal = f"GET {self.shown_url} {exc}"
            say(f"sse-soak: no server metrics: {self.refusal}; the run goes on without them")
            return False
        self.scrapes += 1
        for name, values in rows.items():
            self._batch[name] += values
        return True

    def _flush(self) -> None:
        """The batch as one part, written under a temporary name then renamed; kept for the next
        flush when the disk refuses it (said once)."""
        if not self._batch["name"]:
            return
        self._parts += 1
        path = self.directory / f"part-{os.getpid()}-{self._parts:06d}.parquet"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_part(pa.Table.from_pydict(self._batch, schema=SERVER_METRICS_SCHEMA), path)
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                logger.error("sse-soak: could not write %s (%s); server metrics kept in memory", path, exc)
            return
        self.rows_written += len(self._batch["name"])
        self._batch = empty_rows()


# --- reading ---------------------------------------------------------------------------------


def concept_series(metrics: pd.DataFrame) -> pd.DataFrame:
    """One column per concept the server exposes (``CONCEPTS``), one row per scrape time (ascending):
    the value summed over label sets (a share: averaged); NaN where a scrape lacked it."""
    columns: dict[str, pd.Series] = {}
    for concept, names in CONCEPTS.items():
        name = next((name for name in names if (metrics["name"] == name).any()), None)
        if name is not None:
            values = metrics.loc[metrics["name"] == name].groupby("time")["value"]
            columns[concept] = values.mean() if concept in SHARES else values.sum()
    return pd.DataFrame(columns, dtype=float).sort_index()


def _spread(values: pd.Series | None) -> dict[str, float] | None:
    present = values.dropna() if values is not None else pd.Series(dtype=float)
    if present.empty:
        return None
    return {
        "mean": round(float(present.mean()), 6),
        "p95": round(float(quantile(present, 0.95) or 0.0), 6),
        "max": round(float(present.max()), 6),
    }


def increase(values: pd.Series | None) -> float | None:
    """How much a counter grew over the scrapes, counting through a reset (a restarted server starts
    again from 0, as Prometheus's ``increase`` reads it); None without the counter."""
    present = values.dropna() if values is not None else pd.Series(dtype=float)
    if present.empty:
        return None
    steps = present.diff().iloc[1:]
    steps = steps.where(steps >= 0, present.iloc[1:])
    return round(float(steps.sum()), 6)


def server_metrics_summary(metrics: pd.DataFrame, unavailable: str | None = None) -> dict[str, Any]:
    """The ``server_metrics`` section of summary.json: ``available``, ``scrapes``, ``names`` (the
    sample name read for each concept), mean/p95/max of ``running``, ``waiting`` and
    ``kv_cache_usage`` (None when the server has no such gauge), the ``prompt_tokens`` and
    ``generation_tokens`` counted during the run; without rows, ``available: false`` and the
    ``reason`` (``unavailable``, else ``NOT_RECORDED``)."""
    if metrics.empty:
        return {"available": False, "reason": unavailable or NOT_RECORDED}
    series = concept_series(metrics)
    present = set(metrics["name"])
    section: dict[str, Any] = {
        "available": True,
        "scrapes": int(metrics["time"].nunique()),
        "names": {
            concept: next(n for n in names if n in present) for concept, names in CONCEPTS.items() if concept in series
        },
    }
    section.update({concept: _spread(series.get(concept)) for concept in GAUGES})
    section.update({concept: increase(series.get(concept)) for concept in COUNTERS})
    return section
