"""compare: the side-by-side table and the regression verdict."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from loadtests.errors import SummaryError
from loadtests.judge.summary import Summary
from loadtests.report.compare import Thresholds, compare, incomparable
from tests.loadtests.locust_run import ROOT, run_locust

pytestmark = pytest.mark.extended


def summary(**changes: Any) -> dict[str, Any]:
    base = {
        "requests": 1000,
        "http_500": 0,
        "inband_500": 0,
        "passed": True,
        "outcomes": {"ok": 900, "rejected": 100, "stopped": 0},
        "latency": {"ttft_s": {"p50": 0.2, "p95": 0.4}, "duration_s": {"p95": 1.0}, "max_gap_s": {"p99": 0.5}},
        "keepalive_per_stream": {"mean": 4.0},
    }
    result = copy.deepcopy(base)
    for dotted, value in changes.items():
        target = result
        *path, last = dotted.split("__")
        for key in path:
            target = cast(dict[str, Any], target[key])
        target[last] = value
    return result


def loaded(data: dict[str, Any]) -> Summary:
    """``data`` as ``compare`` is given it: a ``Summary`` read from a file holding it."""
    return Summary.from_json(data, "summary.json", required=())


DEFAULTS = Thresholds()


def regressions(new: dict[str, Any], limits: Thresholds = DEFAULTS) -> list[str]:
    return [row.metric for row in compare(loaded(summary()), loaded(new), limits) if row.regressed]


@pytest.mark.fast
def test_an_identical_run_is_no_regression() -> None:
    assert regressions(summary()) == []


@pytest.mark.fast
def test_a_single_new_500_is_a_regression() -> None:
    # 1 in 1000 is within the failure-rate threshold (0.001), but no 500 is tolerated.
    assert regressions(summary(inband_500=1, outcomes__inband_error=1, outcomes__ok=899)) == [
        "500 rate (HTTP + in-band)"
    ]


@pytest.mark.fast
def test_cuts_beyond_the_failure_threshold_regress_and_within_do_not() -> None:
    assert regressions(summary(outcomes__cut=5, outcomes__ok=895)) == ["failure rate"]
    assert regressions(summary(outcomes__cut=5, outcomes__ok=895), Thresholds(max_failure_rate_increase=0.01)) == []


@pytest.mark.fast
def test_latency_growth_beyond_the_threshold_regresses() -> None:
    assert regressions(summary(latency__ttft_s__p95=0.6)) == ["ttft_s p95"]
    assert regressions(summary(latency__ttft_s__p95=0.45)) == []


@pytest.mark.fast
def test_a_keepalive_drop_and_a_lost_verdict_regress() -> None:
    assert regressions(summary(keepalive_per_stream__mean=1.0)) == ["keep-alive frames per raw stream"]
    verdict = "verdict passed (1 yes, 0 no; an interrupted run fails)"
    every_gate = "every gate passed (1 yes, 0 no)"
    assert regressions(summary(passed=False)) == [every_gate, verdict]  # an older summary: no gates_passed
    interrupted = summary(passed=False, gates_passed=True, interrupted="SIGTERM at 5.0 s of 15 s")
    assert regressions(interrupted) == [verdict]


@pytest.mark.fast
def test_stopped_streams_are_not_judged() -> None:
    rows = compare(loaded(summary()), loaded(summary(requests=1100, outcomes__stopped=100)))
    assert rows[0].base == rows[0].new == 1000


@pytest.mark.fast
def test_load_summary_takes_a_run_dir_or_the_file(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(summary()))
    assert Summary.load(tmp_path) == Summary.load(tmp_path / "summary.json") == loaded(summary())
    assert Summary.load(tmp_path).recorded_verdict == (True, True)  # as the file stated it
    with pytest.raises(SummaryError, match=r"nowhere: no such file or directory"):
        Summary.load(tmp_path / "nowhere")


def run_compare(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadtests", "compare", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)


@pytest.mark.smoke
def test_compare_flags_a_faulty_run_against_a_clean_one(tmp_path: Path) -> None:
    clean = run_locust("mixed_truncate", tmp_path, seconds=4)
    # Fault draws are seeded (--seed 0): at 40% the first in-band error is the 8th request, so even a
    # 4 s run with mixed_truncate's slow prefill (about 30 requests) has one. At 15% it was the 33rd.
    faults = "--server-args=--failure-injection-rate 40 --failure-types inband_error disconnect"
    faulty = run_locust("mixed_truncate", tmp_path, faults, seconds=4)
    assert clean.run_dir and faulty.run_dir
    flagged = run_compare(str(clean.run_dir), str(faulty.run_dir))  # another server, the same load: compared
    assert flagged.returncode == 1, flagged.stdout
    last = flagged.stdout.strip().splitlines()[-1]
    assert last.startswith("compare: REGRESSION:") and "500 rate" in last and "failure rate" in last
    same = run_compare(str(clean.run_dir), str(clean.run_dir / "summary.json"))
    assert same.returncode == 0 and same.stdout.strip().endswith("compare: OK, no regression")


COMPARE = "python -m loadtests compare: "


def bad_input(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused compare prints, after checking exit 2 (not 1, a regression) and no table."""
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(COMPARE), result.stderr
    return result.stderr.removeprefix(COMPARE).rstrip("\n")


def test_compare_on_an_empty_directory_is_bad_input(tmp_path: Path) -> None:
    message = f"{tmp_path}: no summary.json in this directory (not a run directory, or one still running)"
    assert bad_input(run_compare(str(tmp_path), str(tmp_path))) == message


def test_compare_on_a_missing_path_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(summary()))
    missing = tmp_path / "reports" / "nope"
    assert bad_input(run_compare(str(tmp_path), str(missing))) == f"{missing}: no such file or directory"


def test_compare_on_a_file_that_is_not_json_is_bad_input(tmp_path: Path) -> None:
    file = tmp_path / "requests.csv"
    file.write_text("request_id,status\nr1,200\n")
    assert bad_input(run_compare(str(file), str(file))) == (
        f"{file}: not a run summary (not JSON: Expecting value at line 1)"
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "{}",
            "not a run summary (no 'requests', 'http_500', 'inband_500', 'outcomes', 'passed', 'latency', "
            "'keepalive_per_stream')",
            id="empty_object",
        ),
        pytest.param(
            json.dumps({key: value for key, value in summary().items() if key != "latency"}),
            "not a run summary (no 'latency')",
            id="no_latency_section",
        ),
        pytest.param("[]", "not a run summary (a JSON array, expected an object)", id="empty_list"),
        pytest.param("3", "not a run summary (a JSON number, expected an object)", id="a_number"),
        pytest.param("", "not a run summary (not JSON: Expecting value at line 1)", id="empty_file"),
        pytest.param(
            json.dumps(summary(outcomes=[1, 2])),
            "not a run summary ('outcomes' of the wrong type)",
            id="outcomes_not_an_object",
        ),
        pytest.param(
            json.dumps(summary(requests="1000", passed="yes")),
            "not a run summary ('requests', 'passed' of the wrong type)",
            id="strings_for_numbers",
        ),
        pytest.param(
            json.dumps(summary(latency__ttft_s__p95="slow")),
            "not a run summary ('latency' of the wrong type)",
            id="latency_not_a_number",
        ),
    ],
)
def test_compare_on_a_summary_that_is_not_one_is_bad_input(tmp_path: Path, text: str, problem: str) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "run" / "summary.json"
    good.write_text(json.dumps(summary()))
    bad.parent.mkdir()
    bad.write_text(text)
    assert bad_input(run_compare(str(good), str(bad.parent))) == f"{bad}: {problem}"
    assert bad_input(run_compare(str(bad), str(good))) == f"{bad}: {problem}"


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        pytest.param(
            "--max-latency-increase",
            "nan",
            "expected a number >= 0, or inf (never flag), got nan",
            id="nan_would_turn_latency_checks_off",
        ),
        pytest.param(
            "--max-500-rate-increase", "-0.1", "expected a number >= 0, or inf (never flag), got -0.1", id="negative"
        ),
        pytest.param("--max-failure-rate-increase", "lots", "expected a number, got 'lots'", id="not_a_number"),
        pytest.param(
            "--max-keepalive-drop",
            "1.5",
            "expected a share from 0 to 1 (0.5 = half) or inf (never flag), got 1.5",
            id="drop_above_one",
        ),
        pytest.param(
            "--max-keepalive-drop",
            "-inf",
            "expected a share from 0 to 1 (0.5 = half) or inf (never flag), got -inf",
            id="minus_inf",
        ),
    ],
)
def test_compare_refuses_a_threshold_that_is_no_number_of_its_kind(
    tmp_path: Path, option: str, value: str, problem: str
) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(summary()))
    assert bad_input(run_compare(str(tmp_path), str(tmp_path), f"{option}={value}")) == f"{option}: {problem}"


@pytest.mark.fast
def test_thresholds_refuse_nan_and_negative_when_built_in_code() -> None:
    with pytest.raises(
        ValueError, match=r"^max_latency_increase: expected a number >= 0, or inf \(never flag\), got nan$"
    ):
        Thresholds(max_latency_increase=float("nan"))
    with pytest.raises(ValueError, match=r"^max_keepalive_drop: expected a share from 0 to 1"):
        Thresholds(max_keepalive_drop=-1)


@pytest.mark.fast
def test_an_inf_threshold_never_flags() -> None:
    never = Thresholds(*(float("inf"),) * 4)
    worse = summary(
        http_500=500, outcomes__ok=400, outcomes__cut=500, latency__ttft_s__p95=40.0, keepalive_per_stream__mean=0.0
    )
    assert set(regressions(worse)) >= {
        "500 rate (HTTP + in-band)",
        "failure rate",
        "ttft_s p95",
        "keep-alive frames per raw stream",
    }
    assert regressions(worse, never) == []


def test_compare_exit_codes_are_0_for_no_regression_and_1_for_a_regression(tmp_path: Path) -> None:
    base, same, worse = tmp_path / "base.json", tmp_path / "same.json", tmp_path / "worse.json"
    base.write_text(json.dumps(summary()))
    same.write_text(json.dumps(summary()))
    worse.write_text(json.dumps(summary(http_500=1, outcomes__ok=899, outcomes__http_5xx=1)))
    ok = run_compare(str(base), str(same))
    assert (ok.returncode, ok.stderr) == (0, "") and ok.stdout.endswith("compare: OK, no regression\n")
    flagged = run_compare(str(base), str(worse))
    assert (flagged.returncode, flagged.stderr) == (1, "")
    assert flagged.stdout.endswith("compare: REGRESSION: 500 rate (HTTP + in-band)\n")
    off = run_compare(str(base), str(worse), "--max-500-rate-increase=inf", "--max-failure-rate-increase", "inf")
    assert off.returncode == 0, off.stdout


@pytest.mark.fast
def test_the_servers_queue_and_kv_cache_are_shown_never_a_regression() -> None:
    server = {"available": True, "waiting": {"p95": 3.0, "max": 5.0}, "kv_cache_usage": {"max": 0.4}}
    worse = {"available": True, "waiting": {"p95": 30.0, "max": 50.0}, "kv_cache_usage": {"max": 1.0}}
    rows = {
        row.metric: row
        for row in compare(loaded(summary(server_metrics=server)), loaded(summary(server_metrics=worse)))
    }
    shown = {metric: (row.base, row.new, row.regressed) for metric, row in rows.items() if metric.startswith("server")}
    assert shown == {
        "server waiting p95": (3.0, 30.0, False),
        "server waiting max": (5.0, 50.0, False),
        "server KV cache usage max": (0.4, 1.0, False),
    }
    unavailable = {"available": False, "reason": "turned off with --no-server-metrics"}
    older = {row.metric: row for row in compare(loaded(summary()), loaded(summary(server_metrics=unavailable)))}
    assert (older["server waiting max"].base, older["server waiting max"].new) == (None, None)
    assert older["server waiting max"].cells()[1:3] == ["-", "-"]


def test_compare_refuses_a_summary_without_the_timings_it_reads(tmp_path: Path) -> None:
    base, thin = tmp_path / "base.json", tmp_path / "thin.json"
    base.write_text(json.dumps(summary()))
    thin.write_text(json.dumps(summary(latency={"duration_s": {"p95": 1.0}})))
    assert bad_input(run_compare(str(base), str(thin))) == (
        f"{thin}: not a run summary compare can read (no latency.max_gap_s, latency.ttft_s)"
    )


def test_compare_refuses_runs_of_other_scenarios_or_load_settings_unless_asked(tmp_path: Path) -> None:
    files = {
        "base": summary(scenario="soak", settings={"server": "bundled", "proxy": "embedded"}),
        "other_scenario": summary(scenario="slow_prefill", settings={"server": "bundled", "proxy": "embedded"}),
        "other_proxy": summary(scenario="soak", settings={"server": "bundled", "proxy": "nginx"}),
        "other_server": summary(scenario="soak", settings={"server": "vllm", "proxy": "embedded"}),
        "by_hand": summary(),  # a baseline kept by hand, recording neither: held to nothing
    }
    for name, data in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    base = str(tmp_path / "base.json")
    assert bad_input(run_compare(base, str(tmp_path / "other_scenario.json"))) == (
        "the base ran soak, the new run slow_prefill: pass --allow-different to compare them anyway"
    )
    assert bad_input(run_compare(base, str(tmp_path / "other_proxy.json"))) == (
        "the runs differ in proxy 'embedded' against 'nginx': pass --allow-different to compare them anyway"
    )
    assert run_compare(base, str(tmp_path / "other_proxy.json"), "--allow-different").returncode == 0
    assert run_compare(base, str(tmp_path / "other_server.json")).returncode == 0  # comparing servers: the point
    assert run_compare(str(tmp_path / "by_hand.json"), base).returncode == 0


@pytest.mark.fast
def test_a_keep_alive_interval_inferred_from_the_servers_comments_is_not_held_to_be_equal() -> None:
    """Two --host runs infer 0.202 s and 0.201 s from the same server's comments: the same load, comparable."""
    inferred = {"proxy": "none", "keep_alive_interval_source": "inferred"}
    base = loaded(summary(settings={**inferred, "keep_alive_interval": 0.202}))
    new = loaded(summary(settings={**inferred, "keep_alive_interval": 0.201}))
    assert incomparable(base, new) is None
    given = loaded(
        summary(settings={"proxy": "none", "keep_alive_interval_source": "given", "keep_alive_interval": 1.0})
    )
    other = loaded(
        summary(settings={"proxy": "none", "keep_alive_interval_source": "given", "keep_alive_interval": 2.0})
    )
    assert incomparable(given, other) == "the runs differ in keep_alive_interval 1.0 against 2.0"


@pytest.mark.fast
def test_what_each_verdict_covers_is_shown_beside_the_figures_never_a_regression() -> None:
    covered = {"judged": 308, "seen": 2503, "lost": 2195, "not_sent": 0, "max_share": 0.1}
    rows = {row.metric: row for row in compare(loaded(summary()), loaded(summary(coverage=covered)))}
    seen, share = rows["requests seen (Locust, server, schedule)"], rows["share lost or never sent"]
    assert (seen.base, seen.new, share.base) == (None, 2503, None) and share.new == pytest.approx(2195 / 2503)
    assert not seen.regressed and not share.regressed
