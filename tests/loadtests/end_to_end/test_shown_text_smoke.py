"""What a run writes and prints holds no secret of its command line and no live control character
of the server's: real Locust runs against a bundled server given with credentials, and against a
hostile server that puts terminal escape sequences in its error messages and Content-Type."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from loadtests.launch import worst_streams_text
from tests.conftest import StartServer
from tests.loadtests.locust_run import REPORT_LINE, ROOT, locust_command, run_locust
from tests.loadtests.misbehaving import MISBEHAVING_LOCUSTFILE, start_misbehaving_server

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

LIVE_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
"""Control characters other than the newline that ends each line."""


def test_a_credentialed_host_is_sent_but_never_written_nor_printed(tmp_path: Path, start_server: StartServer) -> None:
    server = start_server()
    host = server.url.replace("http://", "http://user:PASS@") + "/?token=SECRET"
    run = run_locust("mixed_truncate", tmp_path, "--host", host, users=2, seconds=3)
    assert run.returncode == 0 and run.run_dir is not None, run.output[-3000:]
    assert run.summary["settings"]["host"] == server.url.replace("http://", "http://user:***@") + "/?token=***"
    for name in ("summary.json", "manifest.json", "report.html", "requests.csv"):
        text = (run.run_dir / name).read_text()
        assert "PASS@" not in text and "SECRET" not in text, name
    assert "PASS@" not in run.output and "SECRET" not in run.output
    assert (run.requests["outcome"] != "connect_error").all()  # the URL given is the one used


def test_a_credentialed_host_unreachable_is_named_redacted(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--host", "http://user:PASS@127.0.0.1:1/?token=SECRET")
    assert run.returncode == 2 and run.run_dir is None, run.output[-3000:]
    assert "cannot reach http://127.0.0.1:1/v1/models" in run.output  # the credentials travel as a header
    assert "PASS" not in run.output and "SECRET" not in run.output


def test_an_api_key_with_crlf_is_refused_at_option_check_without_being_shown(tmp_path: Path) -> None:
    key = "abc\r\nX-Injected: KEYSECRET"
    run = run_locust("mixed_truncate", tmp_path, "--host", "http://127.0.0.1:1", "--api-key", key)
    assert run.returncode == 2 and run.run_dir is None, run.output[-3000:]
    assert "sse-soak: --api-key must be printable ASCII without spaces or control characters" in run.output
    assert "KEYSECRET" not in run.output and "Illegal header value" not in run.output


def test_terminal_escapes_a_server_sends_reach_no_console_and_no_worst_streams_table(tmp_path: Path) -> None:
    server = start_misbehaving_server(
        tmp_path / "modes.jsonl", lifetime=60.0, modes=("escape_in_error", "escape_in_content_type")
    )
    try:
        command = locust_command(
            MISBEHAVING_LOCUSTFILE,
            "--headless", "-u", "2", "-r", "2", "-t", "3s", "--host", server.url,
            "--client-idle-timeout", "2", "--stop-timeout", "5", "--report-dir", str(tmp_path / "reports"),
        )  # fmt: skip
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL
        )
    finally:
        server.stop()
    output = result.stdout + result.stderr
    match = REPORT_LINE.search(result.stdout)
    assert result.returncode == 1 and match, output[-3000:]
    requests = pd.read_parquet(Path(match["path"]) / "requests.parquet")
    kept = requests["error_message"].fillna("")
    assert kept.str.contains("\x1b]0;pwned\x07", regex=False).any()  # the record keeps what the server sent
    assert not LIVE_CONTROL.search(output), LIVE_CONTROL.findall(output)
    assert "content-type text/html\\x9b2J\\x9d0;pwned\\x9c, not text/event-stream" in output
    table = worst_streams_text(requests)
    assert not LIVE_CONTROL.search(table) and "boom\\x1b]0;pwned\\x07" in table
