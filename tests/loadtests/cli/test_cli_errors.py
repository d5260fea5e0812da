"""Bad input on ``python -m loadtests``: one line on stderr naming the option or file and what is
wrong, no traceback, exit 2 (1 is a failed verdict or a regression), and nothing written.

Most cases call ``main()`` in this process (a soak that got past its checks would fail the test,
never start); a few run the real command to show the same line and code from a process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.cli.commands import main
from loadtests.run import soak
from loadtests.run.soak import SoakPlan
from tests.loadtests.locust_run import ROOT
from tests.loadtests.soak_plans import planned_soak

SOAK = "python -m loadtests soak: "
PROXY = "python -m loadtests proxy: "
REPORT = "python -m loadtests report: "
EXPECTED_DURATION = "expected e.g. 90s, 20m, 8h, 1h30m or plain seconds"


@pytest.fixture(autouse=True)
def no_soak_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any soak that gets past its checks fails the test instead of starting Locust; and the
    current directory is an empty one, so that 'nothing written' can be checked."""

    def refuse(self: soak.Soak) -> int:
        raise AssertionError(f"the soak would have started: {self.plan}")

    monkeypatch.setattr(soak.Soak, "run", refuse)
    monkeypatch.chdir(tmp_path)


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line ``main(argv)`` prints on stderr, after checking it exits 2 and prints nothing else."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, ""), err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.rstrip("\n")


def written(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


# -- soak: --duration ---------------------------------------------------------------------------

DURATIONS = [
    pytest.param(
        "0.4s",
        "'0.4s' is under 1 s, the resolution of Locust's -t (which reads 0s as no limit); use at least 1s",
        id="under_a_second_is_refused_not_run_unbounded",
    ),
    pytest.param(
        "0.5",
        "'0.5' is under 1 s, the resolution of Locust's -t (which reads 0s as no limit); use at least 1s",
        id="plain_seconds_under_one",
    ),
    pytest.param(
        "1.5s",
        "'1.5s' is 1.5 s, not a whole number of seconds (the resolution of Locust's -t); use 1s or 2s",
        id="a_fraction_of_a_second_is_refused_not_rounded",
    ),
    pytest.param("1h2", "'1h2': 2 after 1h has no unit (write 1h2m or 1h2s)", id="number_without_unit_after_hours"),
    pytest.param(
        "1h30m2", "'1h30m2': 2 after 1h30m has no unit (write 1h30m2s)", id="number_without_unit_after_minutes"
    ),
    pytest.param(
        "1s2",
        "'1s2': 2 after 1s has no unit (each number needs a unit: h, m or s)",
        id="number_without_unit_after_seconds",
    ),
    pytest.param("1h1h", "'1h1h': the unit h comes twice", id="repeated_unit"),
    pytest.param(
        "30m1h", "'30m1h': units out of order (hours, then minutes, then seconds, e.g. 1h30m)", id="units_out_of_order"
    ),
    pytest.param("nan", f"'nan' is not a duration; {EXPECTED_DURATION}", id="nan"),
    pytest.param("inf", f"'inf' is not a duration; {EXPECTED_DURATION}", id="inf"),
    pytest.param("-5s", "must be positive (got '-5s')", id="negative"),
    pytest.param("0s", "must be positive (got '0s')", id="zero_with_unit"),
    pytest.param("0", "must be positive (got '0')", id="zero_plain"),
    pytest.param("", f"empty; {EXPECTED_DURATION}", id="empty"),
    pytest.param("5x", f"'5x': unknown unit 'x'; {EXPECTED_DURATION}", id="unknown_unit"),
    pytest.param("1ms", f"'1ms': unknown unit 'ms'; {EXPECTED_DURATION}", id="milliseconds_unknown"),
    pytest.param("1h 30m", f"'1h 30m' is not a duration; {EXPECTED_DURATION}", id="space_inside"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("value", "message"), DURATIONS)
def test_soak_refuses_a_bad_duration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str, message: str
) -> None:
    assert usage_error(capsys, "soak", f"--duration={value}") == f"{SOAK}--duration: {message}"
    assert written(tmp_path) == []


@pytest.mark.fast
@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90s", 90), ("1.5h", 5400), ("1h30m15s", 5415), ("0.5m", 30), ("45", 45), ("1s", 1), ("90.0s", 90)],
)
def test_soak_takes_a_whole_duration_and_gives_locust_exactly_it(
    monkeypatch: pytest.MonkeyPatch, value: str, seconds: int
) -> None:
    plan = planned_soak(monkeypatch, "--duration", value)
    assert plan.duration_s == seconds
    command = plan.command()
    assert command[command.index("-t") + 1] == f"{seconds}s"


@pytest.mark.fast
@pytest.mark.parametrize("duration", [0.4, 0.0, 1.5])
def test_a_soak_plan_never_asks_locust_for_an_unbounded_or_rounded_run(duration: float) -> None:
    with pytest.raises(ValueError, match=r"whole number of seconds, at least 1"):
        SoakPlan(duration_s=duration).command()


# -- soak: every other option -------------------------------------------------------------------

OPTIONS = [
    pytest.param(["--users", "0"], "--users: expected a whole number >= 1, got '0'", id="users_zero"),
    pytest.param(["--users", "-3"], "--users: expected a whole number >= 1, got '-3'", id="users_negative"),
    pytest.param(["--users", "1.5"], "--users: expected a whole number >= 1, got '1.5'", id="users_not_whole"),
    pytest.param(
        ["--spawn-rate", "0"], "--spawn-rate: expected a positive, finite number, got '0'", id="spawn_rate_zero"
    ),
    pytest.param(
        ["--spawn-rate", "nan"], "--spawn-rate: expected a positive, finite number, got 'nan'", id="spawn_rate_nan"
    ),
    pytest.param(
        ["--spawn-rate", "inf"], "--spawn-rate: expected a positive, finite number, got 'inf'", id="spawn_rate_inf"
    ),
    pytest.param(["--spawn-rate", "fast"], "--spawn-rate: expected a number, got 'fast'", id="spawn_rate_not_a_number"),
    pytest.param(["--processes", "0"], "--processes: expected a whole number >= 1, got '0'", id="processes_zero"),
    pytest.param(
        ["--frame-sample-rate", "1.5"],
        "--frame-sample-rate: expected a share from 0 to 1, got '1.5'",
        id="frame_sample_rate_above_one",
    ),
    pytest.param(
        ["--frame-sample-rate", "-0.1"],
        "--frame-sample-rate: expected a share from 0 to 1, got '-0.1'",
        id="frame_sample_rate_negative",
    ),
    pytest.param(
        ["--frame-sample-rate", "nan"],
        "--frame-sample-rate: expected a share from 0 to 1, got 'nan'",
        id="frame_sample_rate_nan",
    ),
    pytest.param(
        ["--progress-interval", "0"],
        "--progress-interval: expected a positive, finite number of seconds, got '0'",
        id="progress_interval_zero",
    ),
    pytest.param(
        ["--progress-interval", "inf"],
        "--progress-interval: expected a positive, finite number of seconds, got 'inf'",
        id="progress_interval_inf",
    ),
    pytest.param(
        ["--progress-interval", "nan"],
        "--progress-interval: expected a positive, finite number of seconds, got 'nan'",
        id="progress_interval_nan",
    ),
    pytest.param(
        ["--checkpoint-interval", "-1"],
        "--checkpoint-interval: expected a positive, finite number of seconds, got '-1'",
        id="checkpoint_interval_negative",
    ),
    pytest.param(["--windows", "2"], "--windows: expected a whole number >= 3, got '2'", id="windows_below_three"),
    pytest.param(
        ["--max-memory-growth", "nan"],
        "--max-memory-growth: expected a finite number >= 0, got 'nan'",
        id="max_memory_growth_nan",
    ),
    pytest.param(
        ["--max-latency-drift", "-0.5"],
        "--max-latency-drift: expected a finite number >= 0, got '-0.5'",
        id="max_latency_drift_negative",
    ),
    pytest.param(
        ["--max-latency-drift", "inf"],
        "--max-latency-drift: expected a finite number >= 0, got 'inf'",
        id="max_latency_drift_inf_is_not_json",
    ),
    pytest.param(
        ["--host", "127.0.0.1:8000"],
        "--host: expected an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000, got '127.0.0.1:8000'",
        id="host_without_scheme",
    ),
    pytest.param(
        ["--host", "http://127.0.0.1:99999"],
        "--host: the port of 'http://127.0.0.1:99999' must be a number from 1 to 65535",
        id="host_port_out_of_range",
    ),
    pytest.param(
        ["--host", "http://[::1"],
        "--host: expected an http:// or https:// URL, e.g. http://127.0.0.1:8000, got 'http://[::1' (Invalid IPv6 URL)",
        id="host_not_a_url",
    ),
]


@pytest.mark.fast
@pytest.mark.parametrize(("argv", "message"), OPTIONS)
def test_soak_refuses_a_bad_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    assert usage_error(capsys, "soak", *argv) == SOAK + message
    assert written(tmp_path) == []


@pytest.mark.fast
def test_soak_refuses_a_report_dir_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("x")
    line = usage_error(capsys, "soak", "--duration", "5s")  # the default --report-dir, reports
    assert line == f"{SOAK}--report-dir reports: not a directory (a file is in the way)"
    assert written(tmp_path) == ["reports"]


@pytest.mark.fast
def test_soak_refuses_a_report_dir_under_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "reports").write_text("x")
    line = usage_error(capsys, "soak", "--report-dir", "reports/nightly")
    assert line == f"{SOAK}--report-dir reports/nightly: cannot be created (a file is in the way: reports)"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_soak_refuses_an_unwritable_report_dir(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "locked").mkdir(mode=0o500)
    try:
        assert usage_error(capsys, "soak", "--report-dir", "locked") == f"{SOAK}--report-dir locked: not writable"
        line = usage_error(capsys, "soak", "--report-dir", "locked/new")
        assert line == f"{SOAK}--report-dir locked/new: cannot be created (locked is not writable)"
    finally:
        (tmp_path / "locked").chmod(0o700)


SHIPPED = "mixed_truncate, proxy_timeout, slow_prefill, soak"


@pytest.mark.fast
def test_soak_refuses_a_missing_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "soak", "--scenario", "scenarios/nope.py")
    assert line == f"{SOAK}--scenario: scenarios/nope.py: no such file (a locustfile, or a shipped scenario: {SHIPPED})"
    line = usage_error(capsys, "soak", "--scenario", "nope")
    assert line == f"{SOAK}--scenario: nope: no such scenario (shipped: {SHIPPED}; or give a locustfile's path)"


@pytest.mark.fast
def test_soak_refuses_a_scenario_that_is_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    line = usage_error(capsys, "soak", "--scenario", "scenarios")
    assert line == f"{SOAK}--scenario: scenarios: not a file (a locustfile, or a shipped scenario: {SHIPPED})"


@pytest.mark.fast
def test_run_refuses_an_unknown_scenario_before_starting_locust(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "run", "mixed", "--headless")
    unknown = f"mixed: no such scenario (shipped: {SHIPPED}; or give a locustfile's path)"
    assert line == f"python -m loadtests run: scenario: {unknown}"


@pytest.mark.fast
def test_soak_refuses_a_missing_baseline_before_running(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, "soak", "--baseline", "reports/last-good")
    assert line == f"{SOAK}--baseline reports/last-good: no such file or directory"
    assert written(tmp_path) == []


@pytest.mark.fast
def test_soak_refuses_a_baseline_that_is_not_a_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("[]")
    line = usage_error(capsys, "soak", "--baseline", "summary.json")
    assert line == f"{SOAK}--baseline summary.json: not a run summary (a JSON array, expected an object)"


def test_soak_usage_errors_come_from_a_process_without_traceback(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "loadtests", "soak", "--duration", "0.4s", "--report-dir", str(tmp_path / "r")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"{SOAK}--duration: '0.4s' is under 1 s, the resolution of Locust's -t (which reads 0s "
        "as no limit); use at least 1s\n"
    )
    assert written(tmp_path) == []


# -- report -------------------------------------------------------------------------------------


def report_error(capsys: pytest.CaptureFixture[str], target: Path) -> str:
    return usage_error(capsys, "report", str(target)).removeprefix(REPORT)


@pytest.mark.fast
@pytest.mark.parametrize("what", ["missing_path", "a_file", "an_empty_directory"])
def test_report_refuses_what_is_not_a_run_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, what: str
) -> None:
    target = tmp_path / "run"
    if what == "a_file":
        target.write_text("x")
    elif what == "an_empty_directory":
        target.mkdir()
    assert report_error(capsys, target) == f"{target} is not a run directory (it holds no requests.parquet)"
    assert written(tmp_path) == ([] if what == "missing_path" else ["run"])


def run_dir_with_summary(tmp_path: Path, text: str) -> Path:
    directory = tmp_path / "demo-20260101T000000Z"
    (directory / "requests.parquet").mkdir(parents=True)
    (directory / "summary.json").write_text(text)
    return directory


@pytest.mark.fast
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(
            "{not json",
            "not a run summary (not JSON: Expecting property name enclosed in double quotes at line 1)",
            id="not_json",
        ),
        pytest.param("[]", "not a run summary (a JSON array, expected an object)", id="a_list"),
        pytest.param('"summary"', "not a run summary (a JSON string, expected an object)", id="a_string"),
        pytest.param("null", "not a run summary (a JSON null, expected an object)", id="null"),
        pytest.param(
            '{"gate_specs": 5}',
            "not a run summary ('gate_specs' must be a list of objects)",
            id="gate_specs_not_a_list",
        ),
        pytest.param(
            '{"frame_sample_rate": 2}',
            "not a run summary ('frame_sample_rate' must be a number from 0 to 1)",
            id="frame_sample_rate_out_of_range",
        ),
        pytest.param('{"soak": true}', "not a run summary ('soak' must be an object)", id="soak_not_an_object"),
        pytest.param(
            '{"gate_specs": [{"type": "Nope"}]}',
            "gate spec 1 cannot be rebuilt (ValueError: unknown gate type 'Nope'; known: ",
            id="unknown_gate_type",
        ),
    ],
)
def test_report_refuses_a_summary_that_is_not_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, problem: str
) -> None:
    directory = run_dir_with_summary(tmp_path, text)
    assert report_error(capsys, directory).startswith(f"{directory / 'summary.json'}: {problem}")
    assert sorted(path.name for path in directory.iterdir()) == ["requests.parquet", "summary.json"]
    assert (directory / "summary.json").read_text() == text  # nothing rewritten


def test_report_bad_summary_from_a_process_without_traceback(tmp_path: Path) -> None:
    directory = run_dir_with_summary(tmp_path, "{}" + "x")
    command = [sys.executable, "-m", "loadtests", "report", str(directory)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (result.returncode, result.stdout) == (2, "")
    assert (
        result.stderr == f"{REPORT}{directory / 'summary.json'}: not a run summary (not JSON: Extra data at line 1)\n"
    )


# -- proxy --------------------------------------------------------------------------------------

UPSTREAM = ("--upstream", "http://127.0.0.1:9")
PROXY_OPTIONS = [
    pytest.param(
        ["--listen", "127.0.0.1:99999", *UPSTREAM],
        "--listen: the port of '127.0.0.1:99999' must be a number from 0 to 65535 (0 picks a free one)",
        id="listen_port_out_of_range",
    ),
    pytest.param(
        ["--listen", "127.0.0.1:-1", *UPSTREAM],
        "--listen: the port of '127.0.0.1:-1' must be a number from 0 to 65535 (0 picks a free one)",
        id="listen_port_negative",
    ),
    pytest.param(
        ["--listen", "127.0.0.1:http", *UPSTREAM],
        "--listen: the port of '127.0.0.1:http' must be a number from 0 to 65535 (0 picks a free one)",
        id="listen_port_not_a_number",
    ),
    pytest.param(
        ["--listen", "127.0.0.1", *UPSTREAM],
        "--listen: expected HOST:PORT, e.g. 127.0.0.1:8080, got '127.0.0.1'",
        id="listen_without_port",
    ),
    pytest.param(
        ["--listen", ":8080", *UPSTREAM],
        "--listen: expected HOST:PORT, e.g. 127.0.0.1:8080, got ':8080'",
        id="listen_without_host",
    ),
    pytest.param(
        ["--listen", "127.0.0.1:", *UPSTREAM],
        "--listen: expected HOST:PORT, e.g. 127.0.0.1:8080, got '127.0.0.1:'",
        id="listen_empty_port",
    ),
    pytest.param(
        ["--listen", "::1:8080", *UPSTREAM],
        "--listen: expected HOST:PORT with an IPv6 host in brackets, e.g. [::1]:8080, got '::1:8080'",
        id="listen_ipv6_without_brackets",
    ),
    pytest.param(
        [*UPSTREAM, "--read-timeout", "nan"],
        "--read-timeout: expected a positive, finite number of seconds, got 'nan'",
        id="read_timeout_nan",
    ),
    pytest.param(
        [*UPSTREAM, "--read-timeout=-2"],
        "--read-timeout: expected a positive, finite number of seconds, got '-2'",
        id="read_timeout_negative",
    ),
    pytest.param(
        [*UPSTREAM, "--read-timeout", "0"],
        "--read-timeout: expected a positive, finite number of seconds, got '0'",
        id="read_timeout_zero",
    ),
    pytest.param(
        [*UPSTREAM, "--read-timeout", "inf"],
        "--read-timeout: expected a positive, finite number of seconds, got 'inf'",
        id="read_timeout_inf",
    ),
    pytest.param(
        ["--upstream", "https://127.0.0.1:8000"],
        "--upstream: expected an http:// URL with a host, e.g. http://127.0.0.1:8000, got 'https://127.0.0.1:8000'",
        id="upstream_https",
    ),
    pytest.param(
        ["--upstream", "127.0.0.1:8000"],
        "--upstream: expected an http:// URL with a host, e.g. http://127.0.0.1:8000, got '127.0.0.1:8000'",
        id="upstream_without_scheme",
    ),
    pytest.param(
        ["--upstream", "http://127.0.0.1:70000"],
        "--upstream: the port of 'http://127.0.0.1:70000' must be a number from 1 to 65535",
        id="upstream_port_out_of_range",
    ),
    pytest.param([], "the following arguments are required: --upstream", id="upstream_missing"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("argv", "message"), PROXY_OPTIONS)
def test_proxy_refuses_a_bad_option(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert usage_error(capsys, "proxy", *argv) == PROXY + message


def run_proxy(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loadtests", "proxy", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_proxy_port_out_of_range_from_a_process_without_traceback() -> None:
    result = run_proxy("--listen", "127.0.0.1:99999", *UPSTREAM)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"{PROXY}--listen: the port of '127.0.0.1:99999' must be a number from 0 to 65535 (0 picks a free one)\n"
    )


def test_proxy_on_a_port_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_proxy("--listen", f"127.0.0.1:{port}", *UPSTREAM)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"{PROXY}--listen 127.0.0.1:{port}: cannot listen there (Address already in use)\n"


# -- the parser's own errors --------------------------------------------------------------------


@pytest.mark.fast
def test_an_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "soka")
    choices = (
        "'scenarios', 'run', 'proxy', 'report', 'compare', 'history', 'soak', 'vllm', 'litellm', 'kubernetes', 'docs'"
    )
    assert line == f"python -m loadtests: COMMAND: invalid choice: 'soka' (choose from {choices})"


@pytest.mark.fast
def test_an_unknown_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "compare", "a", "b", "--bogus")
    assert line == "python -m loadtests: unrecognized arguments: --bogus"


@pytest.mark.fast
def test_an_option_without_its_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, "compare", "a", "b", "--max-latency-increase")
    assert line == "python -m loadtests compare: --max-latency-increase: expected one argument"


@pytest.mark.fast
def test_the_baseline_summary_is_read_with_the_compare_rules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"requests": 1}))
    line = usage_error(capsys, "soak", "--baseline", "summary.json")
    missing = "'http_500', 'inband_500', 'outcomes', 'passed', 'latency', 'keepalive_per_stream'"
    assert line == f"{SOAK}--baseline summary.json: not a run summary (no {missing})"


@pytest.mark.fast
def test_an_abbreviated_option_is_refused_not_guessed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, "compare", str(tmp_path), str(tmp_path), "--max-latency", "0.1")
    assert line == "python -m loadtests: unrecognized arguments: --max-latency 0.1", line


@pytest.mark.fast
def test_soak_refuses_an_in_flight_limit_without_a_rate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, "soak", "--max-in-flight", "4")
    assert line == f"{SOAK}--max-in-flight limits an open-loop run: give --rate too"
    assert written(tmp_path) == []
