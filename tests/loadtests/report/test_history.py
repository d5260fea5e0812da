"""The history across nights: reading run directories into nights, the rolling baselines and the
regressions they flag, left-out inputs, and ``python -m loadtests history``'s output and exit code."""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from loadtests.cli.commands import main, parser
from loadtests.judge.summary import TOKEN_GAP, Summary
from loadtests.record.run_dir import RunDir
from loadtests.report import history
from loadtests.report.history import CHECKPOINT_ONLY, FIGURES, NEVER_JUDGED, read_history
from tests.loadtests.synthetic_nights import OLD_VERSION, as_older_version, night_figures, write_night, write_nights

pytestmark = pytest.mark.fast

START = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.timezone.utc)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """``python -m loadtests history ARGS`` in this process: its exit code and its lines."""
    with pytest.raises(SystemExit) as ended:
        main(["history", *args])
    out = capsys.readouterr()
    return int(ended.value.code or 0), (out.out + out.err).splitlines()


def test_the_cli_defaults_are_the_modules() -> None:
    options = parser().parse_args(["history", "reports"])
    assert options.out == Path("reports/history")
    assert (options.window, options.sensitivity, options.min_nights) == (
        history.DEFAULT_WINDOW,
        history.DEFAULT_SENSITIVITY,
        history.DEFAULT_MIN_NIGHTS,
    )


def test_thirty_normal_nights_flag_nothing(tmp_path: Path) -> None:
    """Realistic noise on every figure: no flag on any figure of any night."""
    write_nights(tmp_path, 30)
    found = read_history([tmp_path])
    assert len(found.nights) == 30 and not found.left_out
    assert found.flags == []
    for column in [figure.column for figure in FIGURES]:
        assert found.nights[column].notna().all(), column  # every figure read: each was checked
    judged = found.baselines[found.baselines["median"].notna()]
    assert set(judged["figure"]) == {figure.column for figure in FIGURES}
    assert judged["nights"].max() == history.DEFAULT_WINDOW and judged["nights"].min() == history.DEFAULT_MIN_NIGHTS


@pytest.mark.parametrize(
    ("column", "factor"),
    [("ttft_p99_s", 1.6), ("gap_p99_s", 1.8), ("keepalive_per_silent_s", 0.5), ("server_peak_rss_mb", 1.5)],
)
def test_one_injected_regression_is_flagged_and_only_it(tmp_path: Path, column: str, factor: float) -> None:
    write_nights(tmp_path, 30, changed={17: {column: factor}})
    found = read_history([tmp_path])
    assert [(flag.figure, flag.run_dir) for flag in found.flags] == [(column, found.nights["run_dir"][17])]
    flag = found.flags[0]
    assert flag.baseline_nights == history.DEFAULT_WINDOW
    assert flag.score > history.DEFAULT_SENSITIVITY
    assert math.isclose(flag.change, flag.value - flag.baseline_median)
    baseline = found.baselines[(found.baselines["run_dir"] == flag.run_dir) & (found.baselines["figure"] == column)]
    assert baseline["median"].item() == flag.baseline_median
    worse_than_limit = flag.value > baseline["limit"].item() if factor > 1 else flag.value < baseline["limit"].item()
    assert worse_than_limit


def test_a_change_the_better_way_is_no_flag(tmp_path: Path) -> None:
    write_nights(tmp_path, 30, changed={20: {"ttft_p99_s": 0.4, "keepalive_per_silent_s": 2.0}})
    assert read_history([tmp_path]).flags == []


def test_a_forming_baseline_flags_nothing(tmp_path: Path) -> None:
    write_nights(tmp_path, 5, changed={4: {"ttft_p99_s": 3.0}})
    found = read_history([tmp_path])
    assert found.flags == []
    assert found.baselines["median"].isna().all()
    assert len(read_history([tmp_path], min_nights=4).flags) == 1


def test_one_bad_night_does_not_move_the_baseline(tmp_path: Path) -> None:
    """A regression stays in its successors' baselines, but the median is robust to it: the night
    after it, back to normal, is not flagged, and a second regression two nights later still is."""
    write_nights(tmp_path, 30, changed={15: {"ttft_p99_s": 2.0}, 17: {"ttft_p99_s": 2.0}})
    flagged = [flag.run_dir for flag in read_history([tmp_path]).flags]
    names = sorted(path.name for path in tmp_path.iterdir())
    assert flagged == [names[15], names[17]]


def test_the_newest_night_regressed_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "reports"
    write_nights(runs, 30, changed={29: {"ttft_p99_s": 1.6}})
    code, lines = run_cli(capsys, str(runs), "--out", str(tmp_path / "out"))
    assert code == 1
    assert lines[-1] == f"history: 30 nights in 1 series, 1 regression(s): {tmp_path / 'out' / 'history.html'}"
    (line,) = [line for line in lines if line.startswith("regression: ")]
    assert line.startswith(
        "regression: soak on bundled: TTFT p99 on soak-20261130T020000Z (2026-11-30 02:00, the newest"
    )
    assert "against a baseline median of" in line and "robust SDs, over 14 nights)" in line
    for name in ("history.parquet", "history-flags.parquet", "history-baselines.parquet", "history.html"):
        assert (tmp_path / "out" / name).is_file(), name


def test_an_older_regression_is_shown_and_exits_0_unless_fail_on_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "reports"
    write_nights(runs, 30, changed={20: {"gap_p99_s": 1.8}})
    code, lines = run_cli(capsys, str(runs), "--out", str(tmp_path / "out"))
    assert code == 0
    assert sum(line.startswith("regression: soak on bundled: inter-token gap p99 on ") for line in lines) == 1
    assert lines[-1].startswith("history: 30 nights in 1 series, 1 regression(s): ")
    assert run_cli(capsys, str(runs), "--out", str(tmp_path / "out"), "--fail-on-any")[0] == 1


def test_a_timing_move_within_the_harness_own_error_is_no_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tonight's gap p99 rose 4.8 ms, past the statistics' limit, but the harness's loop lag p99 rose
    to 5.5 ms with it: the harness's own error (5.5 + 1.1 ms) could make that move, so it is no
    regression; the lag itself is a harness change, which fails nothing. The same move with the
    lag as usual is a regression (the control)."""
    busy, control = tmp_path / "busy", tmp_path / "control"
    write_nights(busy, 30, changed={29: {"gap_p99_s": 1.8, "harness_lag_p99_ms": 5.0}})
    write_nights(control, 30, changed={29: {"gap_p99_s": 1.8}})
    code, lines = run_cli(capsys, str(busy), "--out", str(tmp_path / "out"))
    assert code == 0
    assert [line.split(":")[0] for line in lines[:-1]] == ["harness change"]
    assert "harness loop lag p99" in lines[0]
    assert lines[-1].startswith(
        "history: 30 nights in 1 series, 0 regression(s), 1 harness change(s), "
        "1 move(s) within the harness's timing error: "
    )
    found = read_history([busy])
    (within,) = found.within_timing_error
    assert within.figure == "gap_p99_s" and within.change < within.timing_error
    assert math.isclose(within.timing_error, (found.nights["harness_lag_p99_ms"].iloc[-1] + 1.1) / 1000, rel_tol=0.2)
    assert [flag.figure for flag in read_history([control]).flags] == ["gap_p99_s"]
    assert run_cli(capsys, str(control), "--out", str(tmp_path / "out2"))[0] == 1


def test_the_longest_silence_is_judged_against_the_longest_stall(tmp_path: Path) -> None:
    """A keep-alive 80 ms late (silence 1.3x the interval) is a regression when the harness never
    stalled long; behind a 200 ms stall of the harness's loop it is within its error."""
    write_nights(tmp_path / "steady", 30, changed={29: {"longest_silence_s": 1.3}})
    write_nights(tmp_path / "stalled", 30, changed={29: {"longest_silence_s": 1.3, "harness_lag_max_ms": 10.0}})
    steady = read_history([tmp_path / "steady"])
    assert [flag.figure for flag in steady.flags] == ["silence_over_interval"]
    stalled = read_history([tmp_path / "stalled"])
    assert stalled.flags == [] and [flag.figure for flag in stalled.within_timing_error] == ["silence_over_interval"]


def test_a_night_with_a_failed_gate_is_fail_not_a_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    for index in range(10):
        failed = ("no_http_500",) if index == 9 else ()
        write_night(tmp_path, START + dt.timedelta(days=index), night_figures(rng), failed=failed)
    found = read_history([tmp_path])
    last = found.nights.iloc[-1]
    assert (last["verdict"], last["gates_failed"]) == ("FAIL", "no_http_500")
    assert set(found.nights["verdict"][:-1]) == {"PASS"} and found.flags == []
    code, lines = run_cli(capsys, str(tmp_path), "--out", str(tmp_path / "out"))
    assert code == 0 and lines[-1].startswith("history: 10 nights in 1 series, 0 regression(s): ")


def test_a_corrupt_directory_among_good_ones_is_named_and_the_rest_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "reports"
    paths = write_nights(runs, 8)
    (paths[3] / "summary.json").write_text('{"scenario": "soak", "requests": ', encoding="utf-8")
    (paths[5] / "manifest.json").write_text("[]", encoding="utf-8")
    (paths[6] / "summary.json").unlink()  # killed before its judgement
    checkpoint = json.loads((paths[7] / "summary.json").read_text())
    checkpoint["soak"]["partial"] = True  # a soak killed after a checkpoint
    (paths[7] / "summary.json").write_text(json.dumps(checkpoint))
    (runs / "notes").mkdir()  # not a run: skipped inside a directory of runs
    missing = tmp_path / "nowhere"
    code, lines = run_cli(capsys, str(runs), str(missing), "--out", str(tmp_path / "out"))
    assert code == 2
    left = [line for line in lines if line.startswith("left out: ")]
    assert left[0].startswith(f"left out: {paths[3]}: {paths[3] / 'summary.json'}: not a run summary (not JSON")
    assert left[0].endswith("(written by sse-soak 0.1.0; this version cannot read it)")
    assert left[1].startswith(f"left out: {paths[5]}: {paths[5] / 'manifest.json'}: not a run manifest")
    assert left[2] == f"left out: {paths[6]}: " + NEVER_JUDGED.format(path=paths[6])
    assert left[3] == f"left out: {paths[7]}: " + CHECKPOINT_ONLY.format(path=paths[7])
    assert left[4] == f"left out: {missing}: no such file or directory"
    page = tmp_path / "out" / "history.html"
    assert lines[-1] == f"history: 4 nights in 1 series, 0 regression(s), 5 left out: {page}"
    assert len(pd.read_parquet(tmp_path / "out" / "history.parquet")) == 4


def test_nothing_readable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, lines = run_cli(capsys, str(tmp_path / "empty"), "--out", str(tmp_path / "out"))
    assert code == 2
    assert lines[-1].startswith("history: 0 nights in 0 series, 0 regression(s), 1 left out: ")


def test_mixed_scenarios_and_servers_are_series_never_compared(tmp_path: Path) -> None:
    """Three series on the same nights; one series' nights are twice another's TTFT, and neither is
    flagged; a regression in one series is flagged in it alone."""
    secret_host = "https://user:s3cret@llm.example.com:8443/v1?key=abc"
    write_nights(tmp_path / "a", 20, scenario="soak", server="bundled")
    write_nights(tmp_path / "b", 20, scenario="soak", server="vllm", changed={19: {"ttft_p99_s": 1.6}})
    write_nights(tmp_path / "c", 20, scenario="mixed_truncate", server=secret_host, proxy="nginx", soak=False, seed=9)
    for path in (tmp_path / "a").iterdir():  # the bundled server twice as slow, every night
        data = json.loads((path / "summary.json").read_text())
        data["latency"]["ttft_s"]["p99"] *= 2
        (path / "summary.json").write_text(json.dumps(data))
    found = read_history([tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    assert sorted(found.nights["series"].unique()) == [
        "mixed_truncate on https://user:***@llm.example.com:8443/v1?key=*** via nginx",
        "soak on bundled",
        "soak on vllm",
    ]
    assert "s3cret" not in found.nights.to_csv()
    assert [(flag.series, flag.figure) for flag in found.flags] == [("soak on vllm", "ttft_p99_s")]
    assert history.newest_flags(found) == found.flags
    kinds = found.nights.groupby("series")["kind"].first().to_dict()
    assert kinds["soak on bundled"] == "soak" and kinds[next(s for s in kinds if str(s).startswith("mixed"))] == "run"


def test_history_parquet_fed_back_carries_nights_taken_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The nightly job keeps only history.parquet and tonight's run: the nights carried and
    tonight's together flag as the whole set would; a night given twice is taken once."""
    runs = tmp_path / "reports"
    paths = write_nights(runs, 25, changed={24: {"ttft_p99_s": 1.6}})
    kept = tmp_path / "kept"
    for path in paths[:24]:
        shutil.copytree(path, kept / path.name)
    assert run_cli(capsys, str(kept), "--out", str(tmp_path / "night24"))[0] == 0
    carried = tmp_path / "night24" / "history.parquet"
    code, lines = run_cli(capsys, str(carried), str(paths[24]), str(paths[23]), "--out", str(tmp_path / "night25"))
    assert code == 1, lines
    assert lines[-1].startswith("history: 25 nights in 1 series, 1 regression(s): ")
    table = pd.read_parquet(tmp_path / "night25" / "history.parquet")
    assert list(table["run_dir"]) == [path.name for path in paths]
    assert table["path"].iloc[23] == str(paths[23])  # the run directory won over the carried row
    by_summary = read_history([carried, paths[24] / "summary.json"]).nights  # a run given by its summary.json
    assert list(by_summary["run_dir"]) == list(table["run_dir"]) and by_summary["path"].iloc[24] == str(paths[24])
    whole = read_history([runs])
    pd.testing.assert_frame_equal(
        table[[f.column for f in FIGURES]], whole.nights[[f.column for f in FIGURES]], check_exact=False
    )
    back = history.load_history(tmp_path / "night25")
    assert [(f.figure, f.run_dir) for f in back.flags] == [(f.figure, f.run_dir) for f in whole.flags]
    assert len(back.baselines) == 25 * len(FIGURES)


def test_a_damaged_history_parquet_is_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_nights(tmp_path / "runs", 3)
    assert run_cli(capsys, str(tmp_path / "runs"), "--out", str(tmp_path / "out"))[0] == 0
    data = (tmp_path / "out" / "history.parquet").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    other = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(other)
    code, lines = run_cli(capsys, str(cut), str(other), str(tmp_path / "runs"), "--out", str(tmp_path / "out2"))
    assert code == 2
    assert any(line.startswith(f"left out: {cut}: not a history.parquet this version reads (") for line in lines)
    assert f"left out: {other}: not a history table (no series, scenario, server column)" in lines
    assert lines[-1].startswith("history: 3 nights in 1 series, 0 regression(s), 2 left out: ")


def test_an_older_version_is_read_with_its_missing_figures_nan(tmp_path: Path) -> None:
    """A run directory written by an older sse-soak (no coverage, no server metrics, no token gaps,
    no keep-alive per silent second, no frames left): read, its version named, what it lacks NaN."""
    paths = write_nights(tmp_path, 2)
    as_older_version(paths[0])
    older, newer = read_history([tmp_path]).nights.to_dict("records")
    assert (older["version"], newer["version"]) == (OLD_VERSION, "0.1.0")
    for column in ("gap_p50_s", "gap_p99_s", "keepalive_per_silent_s", "server_waiting_p95", "server_kv_cache_max"):
        assert math.isnan(older[column]) and not math.isnan(newer[column]), column
    assert older["ttft_p99_s"] > 0 and older["verdict"] == "PASS"


def test_a_run_without_a_manifest_starts_when_its_name_says(tmp_path: Path) -> None:
    paths = write_nights(tmp_path, 3)
    (paths[1] / "manifest.json").unlink()  # a run from before manifests
    manifest = json.loads((paths[2] / "manifest.json").read_text())
    manifest["started_at"] = "the night before"
    (paths[2] / "manifest.json").write_text(json.dumps(manifest))
    nights = read_history([tmp_path]).nights
    assert list(nights["run_dir"]) == [path.name for path in paths]
    assert list(nights["started_at"]) == [pd.Timestamp(START + dt.timedelta(days=n)) for n in range(3)]
    assert list(nights["version"]) == ["0.1.0", "unknown", "0.1.0"]


def test_an_older_run_whose_frames_are_cut_is_left_out_naming_them(tmp_path: Path) -> None:
    """An older summary without the token gaps sends the history to frames.parquet: a cut part there
    leaves the night out, the file named, and the other nights read."""
    paths = write_nights(tmp_path, 3)
    as_older_version(paths[1])
    part = paths[1] / "frames.parquet" / "part-0.parquet"
    part.parent.mkdir()
    pd.DataFrame({"request_id": ["a"], "seq": [0], "kind": ["data"], "t_s": [0.1]}).to_parquet(part)
    part.write_bytes(part.read_bytes()[:40])
    found = read_history([tmp_path])
    assert list(found.nights["run_dir"]) == [paths[0].name, paths[2].name]
    (left,) = found.left_out
    assert left.path == str(paths[1])
    assert left.why.startswith(f"{paths[1] / 'frames.parquet'}: cannot be read (")


def test_a_summary_of_an_unknown_format_is_refused_with_its_version(tmp_path: Path) -> None:
    (path,) = write_nights(tmp_path, 1)
    as_older_version(path, "0.0.1")
    data = json.loads((path / "summary.json").read_text())
    del data["requests"], data["outcomes"]
    (path / "summary.json").write_text(json.dumps(data))
    found = read_history([path])
    assert found.nights.empty
    (left,) = found.left_out
    assert left.why == (
        f"{path / 'summary.json'}: not a run summary (no 'requests') (written by sse-soak 0.0.1; this version "
        "cannot read it)"
    )


def test_a_summary_section_of_a_shape_never_written_is_refused_with_its_version(tmp_path: Path) -> None:
    paths = write_nights(tmp_path, 2)
    as_older_version(paths[0], "0.0.2")
    data = json.loads((paths[0] / "summary.json").read_text())
    data["harness_lag_ms"] = {"p99": 1.0, "by_worker": {}, "samples": 1, "max": 2.0}
    data["server_metrics"] = {"available": True, "waiting": [1, 2]}  # a list where this version wrote an object
    (paths[0] / "summary.json").write_text(json.dumps(data))
    found = read_history([tmp_path])
    assert list(found.nights["run_dir"]) == [paths[1].name]
    (left,) = found.left_out
    assert left.why.startswith(f"{paths[0] / 'summary.json'}: not a run summary this version reads (AttributeError: ")
    assert left.why.endswith("(written by sse-soak 0.0.2)")


def test_a_summary_is_read_by_the_summary_types(tmp_path: Path) -> None:
    """The synthetic nights are real summary.json files: the library reads them whole."""
    (path,) = write_nights(tmp_path, 1)
    summary = Summary.read(RunDir(path).summary)
    assert summary.verdict == "PASS" and TOKEN_GAP in summary.latency


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--window", "0"], "--window: must be at least 1, got 0"),
        (["--sensitivity", "-1"], "--sensitivity: expected a finite number above 0, got '-1'"),
        (["--sensitivity", "x"], "--sensitivity: expected a number, got 'x'"),
        (["--sensitivity", "inf"], "--sensitivity: expected a finite number above 0, got 'inf'"),
        (["--window", "two"], "--window: expected a whole number, got 'two'"),
        (["--min-nights", "20"], "--min-nights 20 is more than --window 14: no baseline would ever form"),
    ],
)
def test_a_bad_option_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    code, lines = run_cli(capsys, str(tmp_path), *args)
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("python -m loadtests history: ") and lines[0].endswith(said)


def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    code, lines = run_cli(capsys, str(tmp_path), "--out", str(tmp_path / "file"))
    assert code == 2 and lines == [f"python -m loadtests history: --out {tmp_path / 'file'}: not a directory"]
