"""The pytest plugin as a user meets it: a separate pytest, outside this project, with the plugin
loaded from the installed package's ``pytest11`` entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from loadtests.declare.catalog import shipped
from tests.conftest import StartServer
from tests.readme import readme_python_block
from tests.user_pytest import outcomes, user_pytest

pytestmark = pytest.mark.smoke

ROOT = Path(__file__).resolve().parents[1]
# the bundled server with mixed_truncate's limits, started by the test, not by the runs
SEPARATE_SERVER = ("--max-model-len", "8192", "--max-num-seqs", "4", "--prefill-time-per-token", "0.2")


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.extended  # a minute: every shipped scenario in turn
def test_smoke_mode_runs_every_shipped_scenario_with_one_test_per_gate(tmp_path: Path) -> None:
    result = user_pytest(tmp_path, "--pyargs", "loadtests.smoke", "--sse-soak-report-dir", "runs")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    seen = outcomes(result.stdout)
    assert set(seen.values()) <= {"PASSED", "SKIPPED"}  # a gate with nothing to judge is skipped, never passed
    assert all(seen[test] == "PASSED" for test in seen if test[0] == "test_verdict")
    names = [scenario.name for scenario in shipped()]
    run_dirs = sorted((tmp_path / "runs").iterdir())
    assert [path.name.split("-", 1)[0] for path in run_dirs] == names  # one run each, in order
    for name, run_dir in zip(names, run_dirs, strict=True):
        judged = [gate["name"] for gate in summary_of(run_dir)["gates"]]
        prefix = f"{name}-"
        tested = [
            param.removeprefix(prefix) for test, param in seen if test == "test_gate" and param.startswith(prefix)
        ]
        assert tested == judged  # the plan made at collection is what the run was judged by
        assert ("test_verdict", name) in seen
        unjudged = {gate["name"] for gate in summary_of(run_dir)["gates"] if gate["skipped"]}
        assert {gate for gate in tested if seen["test_gate", prefix + gate] == "SKIPPED"} == unjudged
    mixed = summary_of(run_dirs[names.index("mixed_truncate")])
    assert mixed["settings"]["host"] is None and mixed["keepalive_frames"] > 0  # the bundled server, keep-alive at work


def test_smoke_mode_against_a_separately_started_server(tmp_path: Path, start_server: StartServer) -> None:
    server = start_server(*SEPARATE_SERVER)
    args = ("--pyargs", "loadtests.smoke", "-k", "mixed_truncate", "--sse-soak-report-dir", "runs")
    result = user_pytest(tmp_path, *args, "--sse-soak-host", server.url, "--sse-soak-duration", "5")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    seen = outcomes(result.stdout)
    assert seen and set(seen.values()) <= {"PASSED", "SKIPPED"} and all(p.startswith("mixed_truncate") for _, p in seen)
    assert seen["test_verdict", "mixed_truncate"] == "PASSED"
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["settings"]["host"] == server.url and manifest["services"] == []  # it started nothing
    assert ("test_gate", "mixed_truncate-keepalive_covered") not in seen  # that server's interval is not known
    assert summary_of(run_dir)["requests"] > 0


def test_the_readmes_user_test_passes_on_a_good_server_and_explains_a_bad_one(
    tmp_path: Path, start_server: StartServer
) -> None:
    (tmp_path / "test_sse_soak.py").write_text(readme_python_block("In your pytest suite"))
    good = start_server(*SEPARATE_SERVER)
    options = ("test_sse_soak.py", "--sse-soak-duration", "4", "--sse-soak-report-dir", "runs")
    passed = user_pytest(tmp_path, *options, "--sse-soak-host", good.url)
    assert passed.returncode == 0, passed.stdout[-5000:]
    assert "test_sse_soak.py::test_concurrent_mixed_truncation_never_500s PASSED" in passed.stdout

    earlier = set((tmp_path / "runs").iterdir())
    faults = ("--failure-injection-rate", "40", "--failure-types", "inband_error")  # seeded: from the 8th request
    bad = start_server(*SEPARATE_SERVER, *faults)
    failed = user_pytest(tmp_path, *options, "--sse-soak-host", bad.url)
    assert failed.returncode == 1, failed.stdout[-5000:]
    (failing_run,) = set((tmp_path / "runs").iterdir()) - earlier
    requests = pd.read_parquet(failing_run / "requests.parquet")
    in_band = requests.loc[requests["outcome"] == "inband_error", "request_id"]
    summary = summary_of(failing_run)
    assert summary["inband_500"] == len(in_band) > 0
    log = failed.stdout  # what a CI log shows: enough to start debugging
    assert f"run directory: {failing_run}" in log
    assert f"gate FAIL no_inband_500: {summary['inband_500']} in-band" in log
    assert "worst streams (as in report.html):" in log and any(request_id in log for request_id in in_band)


def test_key_model_and_proxy_options_reach_the_run_and_the_key_is_written_nowhere(
    tmp_path: Path, start_server: StartServer
) -> None:
    key = "k3y-never-written"
    server = start_server(*SEPARATE_SERVER, "--api-key", key, "--model", "acme/model-7")
    (tmp_path / "test_sse_soak.py").write_text(readme_python_block("In your pytest suite"))
    common = ("test_sse_soak.py", "--sse-soak-host", server.url, "--sse-soak-duration", "3")
    refused = user_pytest(tmp_path, *common, "--sse-soak-report-dir", "refused")
    assert refused.returncode == 1 and list((tmp_path / "refused").iterdir()) == []  # refused: no run directory
    assert f"HTTP 401 from {server.url}/v1/models: pass --api-key or set SSE_SOAK_API_KEY" in refused.stdout
    options = ("--sse-soak-api-key", key, "--sse-soak-model", "acme/model-7", "--sse-soak-proxy", "embedded")
    passed = user_pytest(tmp_path, *common, *options, "--sse-soak-report-dir", "runs")
    assert passed.returncode == 0, passed.stdout[-5000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [service["name"] for service in manifest["services"]] == ["embedded proxy"]
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) > 0 and (requests["status"] != 401).all()
    assert not any(key in path.read_text(errors="replace") for path in run_dir.rglob("*") if path.is_file())
    assert key not in passed.stdout + refused.stdout


def test_bad_plugin_options_are_a_usage_error_and_help_lists_them(tmp_path: Path) -> None:
    refused = user_pytest(tmp_path, "--sse-soak-users", "0")
    assert refused.returncode == 4
    assert "argument --sse-soak-users: expected a whole number >= 1, got '0'" in refused.stderr
    no_scheme = user_pytest(tmp_path, "--sse-soak-host", "localhost:8000")
    assert no_scheme.returncode == 4
    assert "argument --sse-soak-host: expected an http:// or https:// URL with a host" in no_scheme.stderr
    helped = user_pytest(tmp_path, "--help")
    for option in ("host", "api-key", "model", "duration", "users", "report-dir", "proxy"):
        assert f"--sse-soak-{option}" in helped.stdout


def test_the_plugin_leaves_trio_importable_in_pytests_process(tmp_path: Path) -> None:
    import trio  # noqa: F401  # the test extra declares it: sse-soak hides trio from httpcore where gevent runs, never here

    (tmp_path / "test_trio.py").write_text(
        "def test_plugin_loaded_and_trio_imports(request):\n"
        "    assert request.config.pluginmanager.has_plugin('sse_soak')\n"
        "    import trio  # noqa: F401\n"
    )
    result = user_pytest(tmp_path, "test_trio.py")
    assert result.returncode == 0, result.stdout[-3000:]
