"""The collector's end of a test: once ``finish()`` returns, nothing adds a part to the run
directory, so the summary's ``parts`` are what a later ``report`` finds. Run in its own process,
monkey-patched as Locust's are (importing Locust here would patch pytest's process too late)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

FINISHED_TEST = """
import gevent.monkey; gevent.monkey.patch_all()
import json, sys
from pathlib import Path
import gevent
from locust.env import Environment
from loadtests.run.collect import Collector
from loadtests.record.run_dir import RunDir
from loadtests.load.state import run_state
from loadtests.record.parts_writer import RunWriter

environment = Environment()
environment.create_local_runner()
state = run_state(environment)
state.lag.start()  # a sample every 10 ms: each periodic write has some to write
collector = Collector(environment, flush_interval=0.05)
run = RunDir(Path(sys.argv[1]))
collector.start()
collector.begin(RunWriter(run))
gevent.sleep(0.3)
while_running = run.part_counts()
collector.finish()
judged = run.part_counts()  # what the judging counts, as a summary records it
gevent.sleep(0.3)  # six flush intervals: the periodic write goes on, with no test to write to
after = run.part_counts()
collector.stop(); state.lag.stop(); environment.runner.quit()
print(json.dumps({"while_running": len(while_running), "judged": judged, "after": after}))
"""


def test_no_part_is_written_after_the_test_is_finished(tmp_path: Path) -> None:
    command = [sys.executable, "-c", FINISHED_TEST, str(tmp_path / "run")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    parts = json.loads(result.stdout)
    assert parts["while_running"] >= 2  # the periodic write ran while the test did
    assert parts["after"] == parts["judged"]


ORPHANED_WORKER = """
import gevent.monkey; gevent.monkey.patch_all()
import argparse, sys, time
from locust.env import Environment
from loadtests.load.open_loop import Ticket, not_sent_row
from loadtests.run.collect import TEST_RUN_DIR, Collector
from loadtests.load.state import run_state

report_root, run_dir = sys.argv[1], sys.argv[2]
options = argparse.Namespace(report_dir=report_root, **{TEST_RUN_DIR: run_dir})
environment = Environment(parsed_options=options)
state = run_state(environment)
for number in range(3):
    state.recorder.add(not_sent_row(Ticket(number, 0.0, time.time()), "worker-0"), None)
collector = Collector(environment, flush_interval=60)
collector._keep_locally(collector._own_batch())  # what master_gone leads to, without a master to lose
"""


def orphan_rows(tmp_path: Path, run_dir: Path) -> None:
    command = [sys.executable, "-c", ORPHANED_WORKER, str(tmp_path), str(run_dir)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_worker_that_lost_its_master_writes_its_rows_into_the_run_else_beside_it(tmp_path: Path) -> None:
    import pandas as pd

    from loadtests.record.parts_writer import RunWriter
    from loadtests.record.run_dir import RunDir

    run = RunWriter(tmp_path / "run").run  # the master made it at test start
    orphan_rows(tmp_path, run.path)
    assert len(run.read_requests()) == 3 and not list(tmp_path.glob("orphaned-rows-*.jsonl"))
    orphan_rows(tmp_path, tmp_path / "on-another-host")  # named, but not on this filesystem
    (kept,) = tmp_path.glob("orphaned-rows-*.jsonl")
    rows = pd.read_json(kept, lines=True)
    assert len(rows) == 3 and set(rows["outcome"]) == {"not_sent"} and rows["request_id"].is_unique
    assert not RunDir(tmp_path / "on-another-host").holds_results() and len(run.read_requests()) == 3


def test_a_worker_that_lost_its_master_after_the_run_was_judged_keeps_its_parts_apart(tmp_path: Path) -> None:
    """A worker frozen until after its master judged the run (or a ``report`` did) must not add
    parts to the judged run: they go to ``late/``, named by ``late_writers``, and the run re-judges
    as it was judged (before, its parts joined the run's and every later judgement refused it)."""
    import pandas as pd

    from loadtests.record.parts_writer import RunWriter
    from loadtests.record.run_dir import RunRecord
    from loadtests.run.judging import judge

    run = RunWriter(tmp_path / "run").run
    orphan_rows(tmp_path, run.path)  # the master was killed before judging: the rows are the run's
    judged = judge(RunRecord(run), html=False)
    assert judged.requests == 3
    orphan_rows(tmp_path, run.path)  # another worker, resumed after the run was judged
    assert len(run.read_requests()) == 3 and len(pd.read_parquet(run.late.requests)) == 3
    (late,) = run.late_writers()
    assert (late.worker, late.rows, late.parts) == ("worker-0", 3, 1)
    assert late.line() == (
        "1 late part(s) (3 rows) from worker-0, written after the run was judged: kept apart in late/, not judged"
    )
    assert judge(RunRecord(run), html=False).parts == judged.parts  # no RunDirChanged: the run is as judged
