"""The load generator's own limits are its own: a Locust process out of file descriptors records
``harness_error`` rows naming the limit and its fix, never ``connect_error`` rows charged to the
server. Before: ``ulimit -n 256`` with 400 users gave 2,792 ``connect_error`` rows and
``no_harness_errors`` passed."""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from loadtests.services.stack import TargetServerProcess
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun, locust_command

pytestmark = [pytest.mark.smoke, pytest.mark.extended]

FILES = 128
"""The Locust process's file-descriptor limit: its own files and a few dozen sockets."""


def test_a_locust_process_out_of_file_descriptors_records_harness_errors(
    tmp_path: Path, start_server: Callable[..., TargetServerProcess]
) -> None:
    server = start_server("--max-num-seqs", "256", "--inter-token-latency", "50")  # its own, unlimited process

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))

    command = locust_command(
        ROOT / "scenarios" / "mixed_truncate.py", "--headless", "-u", "200", "-r", "200", "-t", "5s",
        "--host", server.url, "--report-dir", str(tmp_path), "--only-summary", "--harness-lag-limit-ms", "10000",
    )  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL, preexec_fn=few_files
    )
    match = REPORT_LINE.search(result.stdout)
    run = LocustRun(result.returncode, result.stdout + result.stderr, Path(match["path"]) if match else None)
    assert run.returncode == 1, run.output[-3000:]
    requests = run.requests
    ours = requests[requests["outcome"] == "harness_error"]
    assert len(ours) >= 1, requests["outcome"].value_counts()
    assert ours["error_message"].str.contains("ran out of file descriptors").all(), ours["error_message"].unique()
    assert (requests["outcome"] != "connect_error").all(), requests.loc[requests["outcome"] == "connect_error"]
    assert not run.gate("no_harness_errors")["passed"]
