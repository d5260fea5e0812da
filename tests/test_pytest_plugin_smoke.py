"""The pytest plugin as a user meets it: a user's own pytest (``pytester``), in a project that knows
nothing of sse-soak, with the plugin loaded from the installed package's ``pytest11`` entry point."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from loadtests.declare.catalog import shipped
from loadtests.judge.summary import Summary
from loadtests.record.run_dir import Manifest, RunDir
from tests.conftest import StartServer
from tests.readme import readme_python_block
from tests.user_pytest import user_pytest

pytestmark = pytest.mark.smoke

# the bundled server with mixed_truncate's limits, started by the test, not by the runs
SEPARATE_SERVER = ("--max-model-len", "8192", "--max-num-seqs", "4", "--prefill-time-per-token", "0.2")


def summary_of(run_dir: Path) -> Summary:
    return Summary.read(RunDir(run_dir).summary)


def manifest_of(run_dir: Path) -> Manifest:
    manifest = RunDir(run_dir).read_manifest()
    assert manifest is not None, f"{run_dir} has no manifest"
    return manifest


def tail(result: pytest.RunResult) -> str:
    """The end of what the user's pytest printed, for a failing assertion."""
    return "\n".join(result.outlines[-80:] + result.errlines[-30:])


@pytest.mark.extended  # a minute: every shipped scenario in turn
def test_smoke_mode_runs_every_shipped_scenario_with_one_test_per_gate(pytester: pytest.Pytester) -> None:
    result, seen = user_pytest(pytester, "--pyargs", "loadtests.smoke", "--sse-soak-report-dir", "runs")
    assert result.ret == 0, tail(result)
    assert set(seen.values()) <= {"PASSED", "SKIPPED"}  # a gate with nothing to judge is skipped, never passed
    words = list(seen.values())
    result.assert_outcomes(passed=words.count("PASSED"), skipped=words.count("SKIPPED"))  # its reports, its summary
    assert all(seen[test] == "PASSED" for test in seen if test[0] == "test_verdict")
    names = [scenario.name for scenario in shipped()]
    run_dirs = sorted((pytester.path / "runs").iterdir())
    assert [path.name.split("-", 1)[0] for path in run_dirs] == names  # one run each, in order
    for name, run_dir in zip(names, run_dirs, strict=True):
        judged = [gate.name for gate in summary_of(run_dir).gates]
        prefix = f"{name}-"
        tested = [
            param.removeprefix(prefix) for test, param in seen if test == "test_gate" and param.startswith(prefix)
        ]
        assert tested == judged  # the plan made at collection is what the run was judged by
        assert ("test_verdict", name) in seen
        unjudged = {gate.name for gate in summary_of(run_dir).gates if gate.skipped}
        assert {gate for gate in tested if seen["test_gate", prefix + gate] == "SKIPPED"} == unjudged
    mixed = summary_of(run_dirs[names.index("mixed_truncate")])
    assert mixed.settings["host"] is None and mixed.keepalive_frames > 0  # the bundled server, keep-alive at work


def test_smoke_mode_against_a_separately_started_server(pytester: pytest.Pytester, start_server: StartServer) -> None:
    server = start_server(*SEPARATE_SERVER)
    args = ("--pyargs", "loadtests.smoke", "-k", "mixed_truncate", "--sse-soak-report-dir", "runs")
    result, seen = user_pytest(pytester, *args, "--sse-soak-host", server.url, "--sse-soak-duration", "5")
    assert result.ret == 0, tail(result)
    assert result.parseoutcomes().get("failed", 0) == 0 and result.parseoutcomes()["deselected"] > 0
    assert seen and set(seen.values()) <= {"PASSED", "SKIPPED"} and all(p.startswith("mixed_truncate") for _, p in seen)
    assert seen["test_verdict", "mixed_truncate"] == "PASSED"
    (run_dir,) = (pytester.path / "runs").iterdir()
    manifest = manifest_of(run_dir)
    assert manifest.settings["host"] == server.url and manifest.services == []  # it started nothing
    assert ("test_gate", "mixed_truncate-keepalive_covered") not in seen  # that server's interval is not known
    assert summary_of(run_dir).requests > 0


def test_the_readmes_user_test_passes_on_a_good_server_and_explains_a_bad_one(
    pytester: pytest.Pytester, start_server: StartServer
) -> None:
    pytester.makepyfile(test_sse_soak=readme_python_block("In your pytest suite"))
    good = start_server(*SEPARATE_SERVER)
    options = ("test_sse_soak.py", "--sse-soak-duration", "4", "--sse-soak-report-dir", "runs")
    passed, _ = user_pytest(pytester, *options, "--sse-soak-host", good.url)
    assert passed.ret == 0, tail(passed)
    passed.assert_outcomes(passed=1)
    assert "test_sse_soak.py::test_concurrent_mixed_truncation_never_500s PASSED" in passed.stdout.str()

    earlier = set((pytester.path / "runs").iterdir())
    faults = ("--failure-injection-rate", "40", "--failure-types", "inband_error")  # seeded: from the 8th request
    bad = start_server(*SEPARATE_SERVER, *faults)
    failed, _ = user_pytest(pytester, *options, "--sse-soak-host", bad.url)
    assert failed.ret == 1, tail(failed)
    failed.assert_outcomes(failed=1)
    (failing_run,) = set((pytester.path / "runs").iterdir()) - earlier
    requests = pd.read_parquet(failing_run / "requests.parquet")
    in_band = requests.loc[requests["outcome"] == "inband_error", "request_id"]
    summary = summary_of(failing_run)
    assert summary.inband_500 == len(in_band) > 0
    log = failed.stdout.str()  # what a CI log shows: enough to start debugging
    assert f"run directory: {failing_run}" in log
    assert f"gate FAIL no_inband_500: {summary.inband_500} in-band" in log
    assert "worst streams (as in report.html):" in log and any(request_id in log for request_id in in_band)


def test_key_model_and_proxy_options_reach_the_run_and_the_key_is_written_nowhere(
    pytester: pytest.Pytester, start_server: StartServer
) -> None:
    key = "k3y-never-written"
    server = start_server(*SEPARATE_SERVER, "--api-key", key, "--model", "acme/model-7")
    pytester.makepyfile(test_sse_soak=readme_python_block("In your pytest suite"))
    common = ("test_sse_soak.py", "--sse-soak-host", server.url, "--sse-soak-duration", "3")
    refused, _ = user_pytest(pytester, *common, "--sse-soak-report-dir", "refused")
    assert refused.ret == 1 and list((pytester.path / "refused").iterdir()) == []  # refused: no run directory
    refused.assert_outcomes(failed=1)
    assert f"HTTP 401 from {server.url}/v1/models: pass --api-key or set SSE_SOAK_API_KEY" in refused.stdout.str()
    options = ("--sse-soak-api-key", key, "--sse-soak-model", "acme/model-7", "--sse-soak-proxy", "embedded")
    passed, _ = user_pytest(pytester, *common, *options, "--sse-soak-report-dir", "runs")
    assert passed.ret == 0, tail(passed)
    passed.assert_outcomes(passed=1)
    (run_dir,) = (pytester.path / "runs").iterdir()
    assert [service.name for service in manifest_of(run_dir).services] == ["embedded proxy"]
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) > 0 and (requests["status"] != 401).all()
    assert not any(key in path.read_text(errors="replace") for path in run_dir.rglob("*") if path.is_file())
    assert key not in passed.stdout.str() + refused.stdout.str()


def test_bad_plugin_options_are_a_usage_error_and_help_lists_them(pytester: pytest.Pytester) -> None:
    refused, _ = user_pytest(pytester, "--sse-soak-users", "0")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "argument --sse-soak-users: expected a whole number >= 1, got '0'" in refused.stderr.str()
    no_scheme, _ = user_pytest(pytester, "--sse-soak-host", "localhost:8000")
    assert no_scheme.ret == 4
    assert "argument --sse-soak-host: expected an http:// or https:// URL with a host" in no_scheme.stderr.str()
    helped, _ = user_pytest(pytester, "--help")
    for option in ("host", "api-key", "model", "duration", "users", "report-dir", "proxy"):
        assert f"--sse-soak-{option}" in helped.stdout.str()


def test_the_plugin_leaves_trio_and_httpxs_client_importable_in_pytests_process(pytester: pytest.Pytester) -> None:
    """In a pytest process of its own, as every user's run here: this one has imported trio already."""
    import trio  # type: ignore[import-untyped, unused-ignore]  # noqa: F401  # the test extra declares it: sse-soak hides trio from httpcore where gevent runs, never here

    pytester.makepyfile(
        test_trio="def test_plugin_loaded_and_trio_imports(request):\n"
        "    assert request.config.pluginmanager.has_plugin('sse_soak')\n"
        "    import trio  # noqa: F401\n"
        "    from httpx._main import main  # a run leaves httpx's command-line client out, pytest's process does not\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_trio.py", timeout=600)
    assert result.ret == 0, tail(result)
    result.assert_outcomes(passed=1)
