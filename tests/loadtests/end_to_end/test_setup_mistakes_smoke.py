"""The common set-up mistakes stop a run before it starts, in one line naming the cause and the fix,
with exit code 2 (1 is a failed verdict) and no run directory; a server dying mid-run is recorded."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import StartServer
from tests.loadtests.locust_run import (
    LiveLocust,
    LocustRun,
    locust_command,
    run_in_checkout,
    run_locust,
    run_python,
    soak_command,
)

pytestmark = [pytest.mark.smoke, pytest.mark.extended]


def refused(run: LocustRun, line: str, report_dir: Path) -> None:
    """The run ended with exit 2 and exactly this one line of ours, no traceback, no run directory."""
    assert run.returncode == 2, run.output[-3000:]
    ours = [text for text in run.output.splitlines() if text.startswith("sse-soak: ")]
    assert ours == [line], run.output[-3000:]
    assert "Traceback" not in run.output
    assert not report_dir.exists() or not any(report_dir.iterdir())


class _HtmlEverywhere(BaseHTTPRequestHandler):
    def _page(self) -> None:
        body = b"<!doctype html><title>Sign in</title><form>login</form>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    """A captive-portal-like server: a login page, 200, for every request."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlEverywhere)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections (the kernel's backlog does) and never answers."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_nothing_listening_is_one_line_not_a_traceback_per_task(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path / "r", "--host", "http://127.0.0.1:1", seconds=3)
    refused(
        run,
        "sse-soak: cannot reach http://127.0.0.1:1/v1/models (connection refused): is the server running? check --host",
        tmp_path / "r",
    )


def test_a_server_answering_html_to_everything_is_named(tmp_path: Path, html_server: str) -> None:
    run = run_locust("mixed_truncate", tmp_path / "r", "--host", html_server, seconds=3)
    refused(
        run,
        f"sse-soak: {html_server}/v1/models answered 'text/html; charset=utf-8', not the OpenAI list "
        "of models (body starts '<!doctype html><title>Sign in</title><form>login</form>'): is --host an "
        "OpenAI-compatible server?",
        tmp_path / "r",
    )


def test_a_host_ending_in_v1_is_stripped_with_a_notice_and_the_run_goes_on(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server("--max-model-len", "8192")
    run = run_locust("mixed_truncate", tmp_path, "--host", f"{server.url}/v1/", seconds=3)
    assert f"sse-soak: --host {server.url}/v1/ ends in /v1; using {server.url} (the harness adds /v1 itself)" in (
        run.output
    )
    assert run.returncode == 0, run.output[-3000:]
    assert run.judged.requests > 0 and "Traceback" not in run.output


def test_a_host_without_scheme_is_refused_with_the_fix(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path / "r", "--host", "127.0.0.1:8000", seconds=3)
    refused(run, "sse-soak: --host 127.0.0.1:8000 has no scheme: use --host http://127.0.0.1:8000", tmp_path / "r")


def test_a_host_that_is_no_url_is_refused_in_one_line(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path / "r", "--host", "http://[::1", seconds=3)
    refused(
        run, "sse-soak: --host http://[::1 is not a URL (Invalid IPv6 URL): e.g. http://127.0.0.1:8000", tmp_path / "r"
    )


def test_a_server_that_wants_a_key_names_the_option(tmp_path: Path, start_server: StartServer) -> None:
    server = start_server("--api-key", "s3cret")
    run = run_locust("mixed_truncate", tmp_path / "r", "--host", server.url, seconds=3)
    refused(
        run, f"sse-soak: HTTP 401 from {server.url}/v1/models: pass --api-key or set SSE_SOAK_API_KEY", tmp_path / "r"
    )
    wrong = run_locust("mixed_truncate", tmp_path / "r", "--host", server.url, "--api-key", "nope", seconds=3)
    refused(
        wrong,
        f"sse-soak: HTTP 401 from {server.url}/v1/models: the key given was refused: check --api-key",
        tmp_path / "r",
    )


def test_a_server_that_never_answers_is_given_up_on_in_bounded_time(tmp_path: Path, silent_server: str) -> None:
    run = run_locust("mixed_truncate", tmp_path / "r", "--host", silent_server, "--preflight-timeout", "1", seconds=3)
    refused(
        run,
        f"sse-soak: no answer from {silent_server}/v1/models within 1 s: is the server up and serving? "
        "(--preflight-timeout sets the wait)",
        tmp_path / "r",
    )


def test_a_nan_keepalive_interval_means_off_as_in_vllm_and_judges_cleanly(tmp_path: Path) -> None:
    run = run_locust("slow_prefill", tmp_path, "--keep-alive-interval", "nan", users=2, seconds=4)
    assert run.returncode == 1, run.output[-3000:]  # keep-alive off: the negative control fails, as it should
    assert run.summary["settings"]["keep_alive_interval"] == 0.0
    assert (
        "where client == 'raw' and silence_before_first_token_s > 0.25"
        in run.gate("keepalive_through_silence")["detail"]
    )
    assert "Traceback" not in run.output and "nan" not in run.gate("max_gap_within_interval_plus_0.25s")["detail"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--keep-alive-interval", "-1"),
            "--keep-alive-interval must not be negative, got -1 (0 turns keep-alive off)",
        ),
        (("--client-idle-timeout", "0"), "--client-idle-timeout must be a positive number of seconds, got 0"),
        (("--proxy-read-timeout", "inf"), "--proxy-read-timeout must be a positive number of seconds, got inf"),
        (("--flush-interval", "nan"), "--flush-interval must be a positive number of seconds, got nan"),
        (("--frame-sample-rate", "1.5"), "--frame-sample-rate must be a share from 0 to 1, got 1.5"),
        (
            ("--server-metrics-interval", "0"),
            "--server-metrics-interval must be a positive number of seconds, got 0",
        ),
        (
            ("--server-args=--model 'abc",),
            '--server-args "--model \'abc": No closing quotation (quote as a shell would)',
        ),
    ],
    ids=[
        "keepalive_negative",
        "client_idle_timeout_zero",
        "proxy_read_timeout_inf",
        "flush_interval_nan",
        "frame_sample_rate_above_1",
        "server_metrics_interval_zero",
        "server_args_unbalanced_quote",
    ],
)
def test_bad_option_values_are_refused_where_parsed(tmp_path: Path, args: tuple[str, ...], line: str) -> None:
    run = run_locust("slow_prefill", tmp_path / "r", *args, users=1, seconds=2)
    refused(run, f"sse-soak: {line}", tmp_path / "r")
    assert "target server:" not in run.output  # refused before anything started


@pytest.mark.parametrize("run_time", ["0s", "0"])
def test_a_run_time_of_zero_is_refused_not_run_until_stopped(tmp_path: Path, run_time: str) -> None:
    """Locust reads ``-t 0s`` as no limit: the run went on until Ctrl-C, then passed."""
    run = run_locust("mixed_truncate", tmp_path / "r", "-t", run_time, users=1, seconds=2)
    line = f"sse-soak: -t/--run-time must be positive (got {run_time!r}); omit it to run until stopped"
    refused(run, line, tmp_path / "r")
    assert run.output.strip() == line  # the one line: refused before Locust starts anything (or logs a word)


def test_a_report_dir_that_is_a_file_or_unwritable_is_refused(tmp_path: Path) -> None:
    in_the_way = tmp_path / "reports"
    in_the_way.write_text("a file")
    run = run_locust("mixed_truncate", in_the_way, users=1, seconds=2)
    assert run.returncode == 2 and f"sse-soak: --report-dir {in_the_way}: not a directory (a file is in the way)" in (
        run.output
    )
    below_a_file = in_the_way / "sub"
    run = run_locust("mixed_truncate", below_a_file, users=1, seconds=2)
    assert run.returncode == 2, run.output[-3000:]
    assert f"sse-soak: --report-dir {below_a_file}: cannot be created (a file is in the way: {in_the_way})" in (
        run.output
    )
    assert "Traceback" not in run.output and in_the_way.read_text() == "a file"


def test_a_server_dying_mid_run_leaves_connect_error_rows(tmp_path: Path) -> None:
    with LiveLocust("mixed_truncate", tmp_path, "--headless", "-u", "4", "-r", "4", "-t", "8s") as locust:
        pid = int(locust.wait_for(r"^target server: \S+ \(pid (\d+)\)$")[1])
        parts = Path(locust.wait_for(r"^run directory: (.+)$")[1]) / "requests.parquet"
        deadline = time.monotonic() + 30
        while not any(parts.glob("*.parquet")) and time.monotonic() < deadline:  # rows of the live server first
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        assert locust.wait(60) == 1
    output = locust.output
    assert "Traceback" not in output, output[-3000:]
    run = LocustRun(1, output, Path(locust.wait_for(r"^report: (.+)$")[1]))
    outcomes = run.requests["outcome"].value_counts()
    assert outcomes.get("ok", 0) > 0 and outcomes.get("connect_error", 0) > 0, outcomes
    assert outcomes.get("harness_error", 0) == 0


def test_a_key_in_the_server_args_is_used_and_never_written(tmp_path: Path) -> None:
    secret = "s3cret-7f1d-do-not-leak"
    run = run_locust("mixed_truncate", tmp_path, f"--server-args=--api-key {secret}", seconds=3)
    assert run.returncode == 0, run.output[-3000:]  # the harness sent the bundled server's own key
    assert run.judged.requests > 0
    assert run.summary["settings"]["server_args"][-2:] == ["--api-key", "<redacted>"]
    assert secret not in run.output
    assert run.run_dir is not None
    for written in run.run_dir.rglob("*"):
        if written.is_file():
            assert secret.encode() not in written.read_bytes(), written


BAD_NAME = "../evil"
BAD_NAME_LINE = (
    f"Scenario name {BAD_NAME!r} is not a plain name: use letters, digits, '.', '_' and '-', starting with a "
    "letter or digit (it names a directory)"
)


BAD_DECLARATIONS = {
    "scenario_name": (f"scenario = Scenario(name={BAD_NAME!r})", BAD_NAME_LINE),
    "request_route": (
        "scenario = Scenario(name='fine')\nMIX = RequestMix([RequestSpec('small', 'bogus', 8)])",
        "request spec small: no route 'bogus' (routes: chat, completions)",
    ),
}
"""A locustfile's declaration Locust would import, and the one line that refuses it."""


def _locustfile_declaring(directory: Path, declaration: str) -> Path:
    locustfile = directory / "bad_declaration.py"
    locustfile.write_text(
        "from loadtests import RequestMix, RequestSpec, Scenario, SSEUser\n\n"
        f"{declaration}\n\n\n"
        "class User(SSEUser):\n"
        "    pass\n"
    )
    return locustfile


SCENARIO_PICKERS = {
    "locust": lambda file, reports: locust_command(file, "--headless", "-t", "2s", "--report-dir", str(reports)),
    "run": lambda file, reports: [
        sys.executable, "-m", "loadtests", "run", str(file), "--headless", "-t", "2s", "--report-dir", str(reports)
    ],
    "soak": lambda file, reports: soak_command(reports, "--scenario", str(file), "--duration", "2s"),
}  # fmt: skip


@pytest.mark.parametrize("declaration", sorted(BAD_DECLARATIONS))
@pytest.mark.parametrize("picker", sorted(SCENARIO_PICKERS))
def test_a_bad_declaration_is_one_line_and_exit_2_however_the_locustfile_is_picked(
    tmp_path: Path, picker: str, declaration: str
) -> None:
    """Declared in a locustfile that Locust imports, a bad scenario name (or a request on no route) is
    refused as every set-up mistake is, not with the 21 lines of Locust's traceback of the import
    (exit 1), nor (the route) a harness_error on every request."""
    reports = tmp_path / "reports"
    source, refusal = BAD_DECLARATIONS[declaration]
    command = SCENARIO_PICKERS[picker](_locustfile_declaring(tmp_path, source), reports)
    result = run_in_checkout(*command, timeout=120)
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, lines
    assert lines[0].endswith(f"sse-soak: {refusal}"), lines
    assert not reports.exists() or not any(reports.iterdir())


def test_a_scenario_with_a_bad_name_is_a_usage_error_where_locust_does_not_run() -> None:
    """Outside a Locust process (a test, ``launch``) the declaration raises, and the process goes on."""
    result = run_python(
        f"""
        import locust  # imported, yet no locustfile is being loaded
        from loadtests import Scenario, UsageError
        try:
            Scenario(name={BAD_NAME!r})
        except UsageError as exc:
            print("raised:", exc)
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == f"raised: {BAD_NAME_LINE}", result.stderr[-2000:]
