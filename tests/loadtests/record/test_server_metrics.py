"""Scraping a server's /metrics: what a scrape keeps, what the summary says, and a target without metrics."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import gevent
import pandas as pd
import pyarrow.parquet as pq
import pytest

from loadtests.record.run_dir import RunDir
from loadtests.record.server_metrics import (
    NOT_RECORDED,
    SERVER_METRICS_SCHEMA,
    ServerMetricsScraper,
    concept_series,
    parse_exposition,
    server_metrics_summary,
)
from loadtests.services.stack import ChildService, TargetServerProcess
from tests.loadtests.locust_run import ROOT

VLLM_LIKE = """\
# HELP vllm:num_requests_running Requests in the batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Requests queued.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} {waiting}
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc Share of the KV cache in use.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# HELP vllm:gpu_cache_usage_perc The same, by its name before vLLM 0.9.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
# HELP vllm:prompt_tokens_total Prompt tokens.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} {prompt}
# HELP vllm:prompt_tokens_created Creation time.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
# HELP vllm:generation_tokens_total Generated tokens.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 50.0
# HELP vllm:time_to_first_token_seconds TTFT.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 6.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 6.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.7
# HELP pool_bucket A gauge whose name ends like a bucket.
# TYPE pool_bucket gauge
pool_bucket 2.0
# HELP build_info An info sample with an odd label value.
# TYPE build_info gauge
build_info{version="1.0 \\"beta\\""} 1.0
"""


def exposition(waiting: float = 2.0, prompt: float = 100.0) -> str:
    return VLLM_LIKE.replace("{waiting}", repr(waiting)).replace("{prompt}", repr(prompt))


def scrapes(*expositions: str, start: float = 1000.0) -> pd.DataFrame:
    """Rows of one scrape per exposition, one second apart, as read back from parquet."""
    tables = [pd.DataFrame(parse_exposition(text, start + number)) for number, text in enumerate(expositions)]
    return pd.concat(tables, ignore_index=True)


@pytest.mark.fast
def test_a_scrape_keeps_gauges_and_counters_and_only_the_sum_and_count_of_a_histogram() -> None:
    rows = pd.DataFrame(parse_exposition(exposition(), 1234.5))
    assert list(rows.columns) == SERVER_METRICS_SCHEMA.names
    assert (rows["time"] == 1234.5).all()
    assert set(rows["name"]) == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:time_to_first_token_seconds_sum",
        "build_info",
        "pool_bucket",
    }  # no histogram bucket, no _created
    running = rows[rows["name"] == "vllm:num_requests_running"]
    assert list(running["labels"]) == ['engine="0",model_name="m"', 'engine="1",model_name="m"']
    assert list(running["value"]) == [3.0, 1.0]
    assert rows.loc[rows["name"] == "build_info", "labels"].item() == 'version="1.0 \\"beta\\""'
    assert rows.loc[rows["name"] == "vllm:time_to_first_token_seconds_sum", "value"].item() == 0.7


@pytest.mark.fast
def test_a_body_that_is_not_prometheus_text_is_refused() -> None:
    for body in ("<!doctype html><html>", '{"error": "Unauthorized"}', "Not Found"):
        with pytest.raises(ValueError):
            parse_exposition(body, 0.0)


@pytest.mark.fast
def test_concepts_sum_label_sets_average_shares_and_prefer_vllm_v1_names() -> None:
    series = concept_series(scrapes(exposition(waiting=2.0), exposition(waiting=5.0)))
    assert list(series.columns) == ["running", "waiting", "kv_cache_usage", "prompt_tokens", "generation_tokens"]
    assert list(series.index) == [1000.0, 1001.0]
    assert list(series["running"]) == [4.0, 4.0]  # engines 0 and 1 summed
    assert list(series["waiting"]) == [2.0, 5.0]
    assert list(series["kv_cache_usage"]) == [0.375, 0.375]  # kv_cache_usage_perc, averaged over engines
    older = scrapes(exposition().replace("vllm:kv_cache_usage_perc", "vllm:other"))
    assert list(concept_series(older)["kv_cache_usage"]) == [0.9]  # only the pre-0.9 name: it is read


@pytest.mark.fast
def test_the_summary_gives_queue_spread_and_tokens_counted_through_a_restart() -> None:
    metrics = scrapes(
        exposition(waiting=0.0, prompt=100.0),
        exposition(waiting=4.0, prompt=160.0),
        exposition(waiting=2.0, prompt=30.0),  # the server restarted: its counter began again from 0
    )
    summary = json.loads(json.dumps(server_metrics_summary(metrics)))
    assert summary["available"] and summary["scrapes"] == 3
    assert summary["waiting"] == {"mean": 2.0, "p95": 3.8, "max": 4.0}
    assert summary["running"] == {"mean": 4.0, "p95": 4.0, "max": 4.0}
    assert summary["kv_cache_usage"]["max"] == 0.375
    assert summary["prompt_tokens"] == 60.0 + 30.0 and summary["generation_tokens"] == 0.0
    assert summary["names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"


@pytest.mark.fast
def test_a_server_without_the_kv_gauge_has_none_and_no_rows_say_why() -> None:
    bare = scrapes("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n")
    summary = server_metrics_summary(bare)
    assert summary["kv_cache_usage"] is None and summary["running"] is None and summary["prompt_tokens"] is None
    assert summary["waiting"] == {"mean": 1.0, "p95": 1.0, "max": 1.0}
    empty = SERVER_METRICS_SCHEMA.empty_table().to_pandas()
    assert server_metrics_summary(empty) == {"available": False, "reason": NOT_RECORDED}
    assert server_metrics_summary(empty, "turned off") == {"available": False, "reason": "turned off"}


# --- scraping real servers ---------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Let the gevent loop run until ``condition`` holds (the scraper's thread reports to it)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        gevent.sleep(0.01)


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[ChildService]:
    server = TargetServerProcess.start(("--max-num-seqs", "2", "--max-model-len", "100"))
    yield server
    server.stop()


def test_scrapes_of_the_bundled_server_are_parquet_parts_with_the_schema(
    bundled_server: TargetServerProcess, tmp_path: Path
) -> None:
    run = RunDir(tmp_path)
    scraper = ServerMetricsScraper(bundled_server.url, run.server_metrics, interval=0.02, flush_interval=0.05)
    scraper.start()
    wait_until(lambda: scraper.scrapes >= 8)
    assert scraper.stop() is None and scraper.failed_scrapes == 0
    parts = sorted(run.server_metrics.glob("*.parquet"))
    assert len(parts) >= 2 and all(pq.read_schema(part).equals(SERVER_METRICS_SCHEMA) for part in parts)
    assert not list(run.server_metrics.glob(".*.tmp"))
    metrics = run.read_server_metrics()
    assert metrics["time"].nunique() == scraper.scrapes and scraper.rows_written == len(metrics)
    usage = metrics.loc[metrics["name"] == "vllm:kv_cache_usage_perc", "value"]
    assert len(usage) == scraper.scrapes and usage.between(0, 1).all()
    assert server_metrics_summary(metrics)["names"] == {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers each GET with the next of ``server.answers`` (status, body), the last one repeated."""

    def do_GET(self) -> None:
        answers: list[tuple[int, bytes]] = self.server.answers  # type: ignore[attr-defined]
        status, body = answers.pop(0) if len(answers) > 1 else answers[0]
        if status == 0:  # no answer: hold the connection until the client gives up
            self.server.silent.wait(10)  # type: ignore[attr-defined]
            return
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve((404, b"..."), ...)`` starts a local HTTP server answering so; its URL. Stopped at teardown."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(*answers: tuple[int, bytes]) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.answers = list(answers)  # type: ignore[attr-defined]
        server.silent = threading.Event()  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.silent.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def refused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.fast
@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ((404, b'{"error": "not found"}'), "answered HTTP 404"),
        ((401, b'{"error": "Unauthorized"}'), "answered HTTP 401"),
        ((200, b"<!doctype html><html><body>Sign in</body></html>"), "answered a body that is not Prometheus text"),
        ((200, b""), "answered no samples"),
        ((0, b""), "got no answer within 0.5 s"),
        (None, "failed (connection refused)"),
    ],
    ids=["404", "401", "html", "empty", "silent", "refused"],
)
def test_a_target_without_metrics_is_said_once_and_scraping_stops(
    serve: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    answer: tuple[int, bytes] | None,
    reason: str,
) -> None:
    url = serve(answer) if answer is not None else f"http://127.0.0.1:{refused_port()}"
    scraper = ServerMetricsScraper(url, tmp_path / "server_metrics.parquet", interval=0.01, timeout=0.5)
    scraper.start()
    unavailable = scraper.stop()
    assert unavailable is not None and unavailable.startswith(f"GET {url}/metrics {reason}")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"sse-soak: no server metrics: {unavailable}; the run goes on without them"]
    assert scraper.scrapes == 0 and not (tmp_path / "server_metrics.parquet").exists()


def test_a_refusal_shows_the_url_without_its_password(
    serve: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scraper scrapes the URL given and shows it redacted: the notice goes to the console,
    summary.json and report.html."""
    url = serve((404, b"")).replace("http://", "http://user:PASSWORD@")
    scraper = ServerMetricsScraper(url, tmp_path / "server_metrics.parquet", interval=0.01, timeout=0.5)
    scraper.start()
    unavailable = scraper.stop()
    shown = url.replace("user:PASSWORD@", "user:***@")
    assert unavailable == f"GET {shown}/metrics answered HTTP 404"
    assert "PASSWORD" not in capsys.readouterr().out


@pytest.mark.fast
def test_failures_after_a_good_scrape_are_skipped_and_counted(
    serve: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = serve((200, exposition().encode()), (500, b"oops"))
    directory = tmp_path / "server_metrics.parquet"
    scraper = ServerMetricsScraper(url, directory, interval=0.01)
    scraper.start()
    wait_until(lambda: scraper.failed_scrapes >= 3)
    assert scraper.stop() is None
    assert scraper.scrapes == 1 and capsys.readouterr().out == ""
    assert RunDir(tmp_path).read_server_metrics()["time"].nunique() == 1


NATIVE_SCRIPT = """
from gevent import monkey
monkey.patch_all()
import gc, json, sys
from pathlib import Path
import gevent, gevent.hub
from loadtests.record.server_metrics import ServerMetricsScraper, native_connection
url, directory = sys.argv[1], Path(sys.argv[2])
scraper = ServerMetricsScraper(url, directory, interval=0.01, flush_interval=0.02)
scraper.start()
while scraper.scrapes < 10:
    gevent.sleep(0.01)
scraper.stop()
host, port = url.rsplit("/", 1)[1].split(":")
with native_connection((host, int(port)), 5.0) as sock:
    kind = type(sock)
hubs = [thing for thing in gc.get_objects() if isinstance(thing, gevent.hub.Hub)]
print(json.dumps({"hubs": len(hubs), "class": f"{kind.__module__}.{kind.__qualname__}", "scrapes": scraper.scrapes}))
"""


def test_scraping_in_a_gevent_patched_process_uses_native_sockets_and_starts_no_second_hub(
    bundled_server: TargetServerProcess, tmp_path: Path
) -> None:
    """A gevent socket used from the scraper's native thread would start a hub (an event loop) there."""
    command = [sys.executable, "-c", NATIVE_SCRIPT, bundled_server.url, str(tmp_path / "server_metrics.parquet")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found == {"hubs": 1, "class": "socket.socket", "scrapes": found["scrapes"]} and found["scrapes"] >= 10
    assert RunDir(tmp_path).read_server_metrics()["time"].nunique() == found["scrapes"]
