"""The run directory: its files, readable back, a summary computed from the rows, and one judgement
that gives the same verdict, gates and sections however often a run is judged again."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from loadtests.cli.commands import main
from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.errors import INCONCLUSIVE_EXIT_CODE, SummaryError
from loadtests.judge.drift import DriftLimits, drift_gates
from loadtests.judge.gates import ALWAYS_ON, Expect
from loadtests.judge.summary import KEEPALIVE_COUNTED_ON, Summary
from loadtests.record.parts_writer import RunWriter
from loadtests.record.recorder import FRAME_COLUMNS, Recorder
from loadtests.record.run_dir import Manifest, RunDir, RunRecord, read_table
from loadtests.run.judging import JudgeOptions, SoakState, judge, unfinished
from tests.loadtests.tables import requests_of

pytestmark = pytest.mark.fast


def recorded() -> Recorder:
    recorder = Recorder()
    for index, (status, error) in enumerate([(200, None), (200, "500"), (500, "500"), (400, "400")]):
        stream = StreamTracker(RequestPlan(f"r{index}", "n", "chat"), 0.0)
        stream.headers(status, 0.01, "text/event-stream")
        if status == 200:
            stream.frame(Frame(t=0, nbytes=14, comments=["keep-alive"]), 0.5)
            if error:
                stream.frame(Frame(t=0, nbytes=40, data=json.dumps({"error": {"message": "x", "code": 500}})), 0.6)
            stream.frame(Frame(t=0, nbytes=14, data="[DONE]"), 0.7)
        else:
            stream.error_body(json.dumps({"error": {"message": "m", "param": None, "code": status}}))
        recorder.add(stream.finish(0.8), stream.frames)
    return recorder


def written(directory: Path) -> RunDir:
    run = RunDir(directory)
    RunWriter(run).write_batch(recorded().take_batch())
    return run


def test_a_run_directory_holds_parts_and_a_true_summary(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "demo")
    RunWriter(run).write_batch(recorded().take_batch())
    gates = [Expect("all_ok", where=None, require="outcome == 'ok'")]
    result = judge(
        RunRecord(run), JudgeOptions(gates, scenario="demo", settings={"proxy": "none"}, frame_sample_rate=0.5)
    )
    directory = run.path
    assert directory.name.startswith("demo-") and directory.name.endswith("Z")
    assert sorted(p.name for p in directory.iterdir()) == [
        "frames.parquet",
        "lag.parquet",
        "report.html",
        "requests.csv",
        "requests.parquet",
        "summary.json",
    ]
    summary = json.loads(run.summary.read_text())
    assert summary == result.to_json()
    assert summary["requests"] == 4 and summary["http_500"] == 1 and summary["inband_500"] == 1
    assert summary["outcomes"]["ok"] == 1 and summary["outcomes"]["rejected"] == 1
    assert summary["keepalive_frames"] == 2 and summary["passed"] is False
    assert summary["settings"] == {"proxy": "none"} and summary["frame_sample_rate"] == 0.5
    failed = [g["name"] for g in summary["gates"] if not g["passed"] and not g["skipped"]]
    assert failed == ["outcomes_as_expected", "no_http_500", "no_inband_500", "all_ok"]
    expect = {"type": "Expect", "name": "all_ok", "where": None, "require": "outcome == 'ok'", "min_rows": 1}
    assert summary["gate_specs"] == [expect]
    assert summary["latency"]["duration_s"]["p50"] == 0.8 and summary["latency"]["ttfb_s"]["count"] == 4
    assert summary["keepalive_per_stream"] == {
        "streams": 2,
        "mean": 1.0,
        "max": 1,
        "counted_on": KEEPALIVE_COUNTED_ON,
        "silent_s": 1.6,  # the two raw 200 streams' waits for their first token, summed
        "per_silent_s": 1.25,  # their 2 keep-alive frames over it
    }
    assert len(pd.read_parquet(run.frames)) == 4  # the [DONE] after the error frame ends nothing: the stream ended
    pd.testing.assert_frame_equal(read_table(run.requests), requests_of(recorded()))


def test_parts_written_apart_read_back_as_one_table(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    first, second = recorded(), recorded()
    writer.write_batch(first.take_batch())
    writer.write_batch({"rows": [], "frames": {c: [] for c in FRAME_COLUMNS}})  # nothing new: no part
    writer.write_batch(second.take_batch())
    assert len(list(writer.requests_dir.glob("*.parquet"))) == 2
    assert len(writer.run.read_requests()) == 8 == writer.rows_written
    assert str(writer.run.read_requests()["status"].dtype) == "Int64"


def test_rebuild_rejudges_a_run_from_its_files_alone(tmp_path: Path) -> None:
    run = written(tmp_path / "demo-20260101T000000Z")
    first = judge(RunRecord(run), JudgeOptions([Expect("x", None, "status == 200")], scenario="demo"))
    run.summary.write_text(json.dumps({**first.to_json(), "gates": [], "passed": True}))  # a summary edited to pass
    assert judge(RunRecord(run)) == first


def test_a_killed_run_without_summary_is_judged_by_the_always_on_gates(tmp_path: Path) -> None:
    run = written(tmp_path / "demo-20260101T000000Z")
    summary = judge(RunRecord(run))
    assert summary.scenario == "demo" and summary.requests == 4
    assert [gate.name for gate in summary.gates] == [gate.name for gate in ALWAYS_ON]


def test_a_killed_run_is_judged_by_the_gates_its_manifest_declared(tmp_path: Path) -> None:
    run = written(tmp_path / "x")
    gate = {"type": "Expect", "name": "all_ok", "where": None, "require": "outcome == 'ok'", "min_rows": 1}
    run.write_manifest(Manifest("declared", "2026-01-01T00:00:00Z", {"proxy": "none"}, [gate]))
    summary = judge(RunRecord(run), JudgeOptions(interrupted=unfinished(None)))
    assert summary.scenario == "declared" and summary.settings == {"proxy": "none"}
    assert [g.name for g in summary.gates][-1] == "all_ok" and not summary.passed
    assert summary.interrupted == "the run ended before writing its summary"


def test_a_failing_soak_rebuilt_keeps_its_verdict_gates_and_sections(tmp_path: Path) -> None:
    """The defect this design removes: re-judging a failed soak made it PASS and dropped its section."""
    run = written(tmp_path / "soak-20260101T000000Z")
    judge(RunRecord(run), JudgeOptions([], scenario="soak"), html=False)  # the scenario's own judgement at its end
    limits = DriftLimits(windows=3, max_latency_drift=0.0, min_latency_drift_s=0.0)
    ended = judge(RunRecord(run), JudgeOptions(add_gates=drift_gates(limits), soak=SoakState(False, 30.0)), html=False)
    again = judge(RunRecord(run), html=False)  # python -m loadtests report
    assert again == ended
    assert again.soak is not None and again.soak.duration_s == 30.0 and not again.soak.partial
    assert [g.name for g in again.gates][-2:] == ["memory_growth", "latency_drift"]
    assert not again.passed
    assert Summary.from_json(json.loads(run.summary.read_text())) == again


def test_a_checkpoint_stays_partial_until_the_soak_ends(tmp_path: Path) -> None:
    run = written(tmp_path / "soak-20260101T000000Z")
    checkpoint = judge(
        RunRecord(run), JudgeOptions(add_gates=drift_gates(DriftLimits()), soak=SoakState(True, 60.0)), html=False
    )
    assert checkpoint.soak is not None and checkpoint.soak.partial
    assert unfinished(checkpoint) == "the run ended before writing its summary (summary.json is a soak checkpoint)"
    assert judge(RunRecord(run), html=False).soak == checkpoint.soak  # a report does not pretend the soak finished


def test_two_runs_in_one_second_get_two_directories(tmp_path: Path) -> None:
    assert RunDir.create(tmp_path, "same") != RunDir.create(tmp_path, "same")


def test_a_summary_written_reads_back_equal_and_a_cut_short_one_says_only_what_it_holds(tmp_path: Path) -> None:
    run = written(tmp_path / "demo-20260101T000000Z")
    first = judge(RunRecord(run), JudgeOptions([Expect("x", None, "status == 200")], scenario="demo"), html=False)
    assert Summary.read(run.summary) == first and Summary.read(run.summary).said >= {"scenario", "gates"}
    run.summary.write_text(json.dumps({"gate_specs": first.gate_specs, "settings": None}))
    cut = Summary.read(run.summary, whole=False)
    assert cut.said == {"gate_specs"} and cut.stated is None  # a null is not said: the manifest's counts
    with pytest.raises(SummaryError, match=r"summary.json: not a run summary \(no 'scenario'\)$"):
        Summary.read(run.summary)
    assert judge(RunRecord(run), html=False) == first  # its gates carried over, the rest recomputed


OWN_GATE = '''
from dataclasses import dataclass

import pandas as pd

from loadtests.judge.gates import Gate, GateResult


@dataclass(frozen=True)
class {kind}(Gate):
    """A gate of a user's own, in a file sse-soak has not loaded."""

    fewest: int
    name: str = "at_least_requests"

    def evaluate(self, requests: pd.DataFrame) -> GateResult:
        detail = f"{{len(requests)}} requests, {{self.fewest}} needed"
        return GateResult(self.name, len(requests) >= self.fewest, detail)
'''


def clean(directory: Path) -> RunDir:
    """A run of four streams that all ended ``ok``."""
    recorder = Recorder()
    for index in range(4):
        stream = StreamTracker(RequestPlan(f"r{index}", "n", "chat"), 0.0)
        stream.headers(200, 0.01, "text/event-stream")
        stream.frame(Frame(t=0, nbytes=14, data="[DONE]"), 0.7)
        recorder.add(stream.finish(0.8), stream.frames)
    run = RunDir(directory)
    RunWriter(run).write_batch(recorder.take_batch())
    return run


def stored_by_a_user(run: RunDir, kind: str, file: Path) -> None:
    """The summary a run that declared the gate ``kind`` of ``file`` writes: its spec and where its class
    is defined (added by hand: this process must not load ``file`` before the judgement under test)."""
    judge(RunRecord(run), JudgeOptions([Expect("x", None, "status > 0")], scenario="demo"), html=False)
    data = json.loads(run.summary.read_text())
    data["gate_specs"].append({"type": kind, "fewest": 2, "name": "at_least_requests"})
    data["gate_sources"] = {kind: {"module": file.stem, "file": str(file)}}
    data["point"] = ["at_least_requests", "requests_completed"]
    run.summary.write_text(json.dumps(data))


def test_a_users_gate_is_rebuilt_from_the_file_its_summary_names_and_judged(tmp_path: Path) -> None:
    kind = f"AtLeast{tmp_path.name.replace('-', '_').replace('.', '_')}"  # a class no test loaded before
    file = tmp_path / "own_gates_locustfile.py"
    file.write_text(OWN_GATE.format(kind=kind))
    run = written(tmp_path / "demo-20260101T000000Z")
    stored_by_a_user(run, kind, file)
    summary = judge(RunRecord(run), html=False)  # what python -m loadtests report does
    assert summary.unrebuilt == ()
    assert summary.gates[-1].line() == "gate PASS at_least_requests: 4 requests, 2 needed"
    again = json.loads(run.summary.read_text())
    assert again["gate_specs"][-1] == {"type": kind, "fewest": 2, "name": "at_least_requests"}
    assert again["gate_sources"] == {kind: {"module": "own_gates_locustfile", "file": str(file.resolve())}}


def test_a_users_gate_whose_class_is_gone_is_unjudged_with_one_line_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kind = f"Gone{tmp_path.name.replace('-', '_').replace('.', '_')}"
    file = tmp_path / "moved_locustfile.py"  # never written: the locustfile was moved away
    run = clean(tmp_path / "demo-20260101T000000Z")
    stored_by_a_user(run, kind, file)
    stored = json.loads(run.summary.read_text())
    with pytest.raises(SystemExit) as ended:
        main(["report", str(run.path)])
    line = (
        f"report: gate at_least_requests ({kind}) cannot be rebuilt: its module 'moved_locustfile' cannot be "
        f"imported here and its file {file} is gone; the other gates are judged, at_least_requests is unjudged"
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == line
    assert out[1:3] == ["requests: 4 (4 ok)", "coverage: 4 of 4 requests judged"]
    unjudged = "gate UNJUDGED at_least_requests: cannot be rebuilt in this process: its module 'moved_locustfile'"
    assert unjudged in "\n".join(out)
    assert out[-2].startswith("verdict: INCONCLUSIVE (its point could not be judged: at_least_requests; ")
    assert ended.value.code == INCONCLUSIVE_EXIT_CODE
    again = json.loads(run.summary.read_text())
    assert (again["gate_specs"], again["gate_sources"]) == (stored["gate_specs"], stored["gate_sources"])  # kept
    (gate,) = [gate for gate in again["gates"] if gate["name"] == "at_least_requests"]
    assert gate["skipped"] and gate["detail"].startswith("cannot be rebuilt in this process: its module")
    assert [gate["passed"] for gate in again["gates"] if gate["name"] == "x"] == [True]  # the rest judged as ever


def test_a_gate_file_inside_the_run_directory_is_never_run(tmp_path: Path) -> None:
    """A run directory is data (someone may have sent it): a gate source inside it stays unloaded, the
    gate unjudged with the reason, and nothing in the file runs."""
    kind = f"Inside{tmp_path.name.replace('-', '_').replace('.', '_')}"
    run = clean(tmp_path / "demo-20260101T000000Z")
    ran = tmp_path / "ran"
    file = run.path / "planted_locustfile.py"
    file.write_text(f"from pathlib import Path\nPath({str(ran)!r}).touch()\n" + OWN_GATE.format(kind=kind))
    stored_by_a_user(run, kind, file)
    summary = judge(RunRecord(run), html=False)
    assert not ran.exists()
    (line,) = summary.unrebuilt
    assert f"its file {file} lies inside the run directory, whose files are never run as code" in line
    (gate,) = [gate for gate in summary.gates if gate.name == "at_least_requests"]
    assert gate.skipped
