"""The run writer works off the event loop: other greenlets run while a batch is written, and every
batch handed over is still written exactly once, in order, whatever happens to the greenlet that
handed it over (the writer's other invariants are in test_recorder.py)."""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gevent
import pytest

from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.record import parts_writer as run_writer
from loadtests.record.parts_writer import RunWriter, _off_loop
from loadtests.record.recorder import Recorder

ROOT = Path(__file__).resolve().parents[3]


def batch_of(*request_ids: str, frames: int = 3) -> dict[str, Any]:
    recorder = Recorder()
    for request_id in request_ids:
        stream = StreamTracker(RequestPlan(request_id, "n", "chat"), 0.0)
        stream.headers(200, 0.01, "text/event-stream")
        for index in range(frames):
            stream.frame(Frame(t=0.0, nbytes=14, comments=["keep-alive"]), 0.05 * (index + 1))
        recorder.add(stream.finish(1.0), stream.frames)
    return recorder.take_batch()


class Ticker:
    """A greenlet that wakes every millisecond and notes when: it can only run while the loop does."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self._greenlet = gevent.spawn(self._run)
        gevent.sleep(0.005)

    def _run(self) -> None:
        while True:
            gevent.sleep(0.001)
            self.ticks.append(time.perf_counter())

    def between(self, start: float, end: float) -> list[float]:
        self._greenlet.kill()
        return [tick for tick in self.ticks if start < tick < end]


@pytest.fixture
def slow_parts(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Each part takes 0.1 s more to write (a blocking sleep, like a slow disk); the event is set
    when the first write has started."""
    started = threading.Event()
    write = RunWriter._write

    def slow_write(table: Any, path: Path) -> None:
        started.set()
        time.sleep(0.1)
        write(table, path)

    monkeypatch.setattr(RunWriter, "_write", staticmethod(slow_write))
    return started


def written_ids(writer: RunWriter) -> list[str]:
    """Request ids in the order their parts were written."""
    return list(writer.run.read_requests()["request_id"])


@pytest.mark.fast
def test_other_greenlets_keep_running_while_a_large_batch_is_written(tmp_path: Path) -> None:
    batch = batch_of(*(f"r{index}" for index in range(3000)), frames=12)
    writer = RunWriter(tmp_path)
    ticker = Ticker()
    start = time.perf_counter()
    writer.write_batch(batch)
    end = time.perf_counter()
    during = ticker.between(start, end)
    # Written on the loop, the batch (tens of ms of Arrow conversion and parquet) let no greenlet run.
    assert len(during) >= 3, f"{len(during)} ticks in {1000 * (end - start):.0f} ms of writing"
    assert writer.rows_written == 3000 and len(writer.run.read_frames()) == 36_000


@pytest.mark.fast
def test_a_slow_disk_stalls_only_the_greenlet_that_writes(tmp_path: Path, slow_parts: threading.Event) -> None:
    writer = RunWriter(tmp_path)
    ticker = Ticker()
    start = time.perf_counter()
    writer.write_batch(batch_of("a"))
    end = time.perf_counter()
    during = ticker.between(start, end)
    assert end - start >= 0.2  # two parts, 0.1 s each
    assert len(during) >= 50  # the loop ran on: a tick every millisecond, give or take a noisy machine
    assert max(b - a for a, b in itertools.pairwise(during)) < 0.1  # on the loop: one gap of 0.2 s


@pytest.mark.fast
def test_batches_handed_over_together_are_each_written_once_in_order(
    tmp_path: Path, slow_parts: threading.Event
) -> None:
    writer = RunWriter(tmp_path)
    writers = [gevent.spawn(writer.write_batch, batch_of(f"r{index}")) for index in range(4)]
    gevent.joinall(writers, raise_error=True)
    assert written_ids(writer) == ["r0", "r1", "r2", "r3"]
    assert writer.rows_written == 4 and writer.rows_pending == 0
    assert len(list(writer.requests_dir.glob("*.parquet"))) == 4


def writing(writer: RunWriter, request_id: str, slow_parts: threading.Event) -> gevent.Greenlet:
    """A greenlet handing a batch to ``writer``, returned once its (slowed) write is under way."""
    greenlet = gevent.spawn(writer.write_batch, batch_of(request_id))
    while not slow_parts.is_set():
        gevent.sleep(0.001)
    return greenlet


@pytest.mark.fast
def test_a_greenlet_killed_during_its_write_leaves_the_batch_written_once(
    tmp_path: Path, slow_parts: threading.Event
) -> None:
    writer = RunWriter(tmp_path)
    handing_over = writing(writer, "a", slow_parts)
    handing_over.kill()  # waits until it is dead: once its write has ended
    assert handing_over.dead and isinstance(handing_over.value, gevent.GreenletExit)
    assert (writer.rows_written, writer.rows_pending) == (1, 0)
    writer.write_batch(batch_of("b"))
    assert written_ids(writer) == ["a", "b"]


@pytest.mark.fast
def test_a_greenlet_killed_while_waiting_for_its_turn_still_gets_its_batch_written(
    tmp_path: Path, slow_parts: threading.Event
) -> None:
    writer = RunWriter(tmp_path)
    first = writing(writer, "a", slow_parts)
    second = gevent.spawn(writer.write_batch, batch_of("b"))
    gevent.sleep(0)  # it hands its batch over and waits for the first write to end
    second.kill()
    first.join()
    assert written_ids(writer) == ["a", "b"] and writer.rows_pending == 0


@pytest.mark.fast
def test_a_disk_error_keeps_the_batch_and_is_logged_not_printed_as_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    writer = RunWriter(tmp_path / "run")
    writer.requests_dir.rmdir()
    writer.requests_dir.write_text("in the way")  # writing a part now fails with an OSError
    with caplog.at_level(logging.ERROR, logger=run_writer.__name__):
        writer.write_batch(batch_of("early"))
        writer.write_batch(batch_of("later"))
    assert writer.rows_pending == 2 and writer.rows_written == 0
    assert [record.getMessage().count("kept in memory") for record in caplog.records] == [1, 1]
    assert "Traceback" not in capfd.readouterr().err  # the hub did not report the thread's exception
    writer.requests_dir.unlink()
    writer.requests_dir.mkdir()
    writer.write_batch(batch_of("last"))
    assert written_ids(writer) == ["early", "later", "last"] and writer.rows_pending == 0


@pytest.mark.fast
def test_off_loop_runs_in_another_thread_and_raises_what_the_function_raised() -> None:
    assert _off_loop(threading.get_ident) != threading.get_ident()
    assert _off_loop(divmod, 7, 2) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        _off_loop(divmod, 1, 0)


@pytest.mark.fast
def test_off_loop_called_from_the_hub_runs_in_place() -> None:
    seen: list[int] = []
    gevent.get_hub().loop.run_callback(lambda: seen.append(_off_loop(threading.get_ident)))
    gevent.sleep(0.01)
    assert seen == [threading.get_ident()]


PATCHED_PROCESS = """
import json, logging, sys, time
from gevent import monkey
monkey.patch_all()
from pathlib import Path
import gevent
from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.record.recorder import Recorder
from loadtests.record.parts_writer import UNWRITABLE_ROWS, RunWriter
from loadtests.client.sse import Frame

def batch_of(*request_ids):
    recorder = Recorder()
    for request_id in request_ids:
        stream = StreamTracker(RequestPlan(request_id, "n", "chat"), 0.0)
        stream.headers(200, 0.01, "text/event-stream")
        for index in range(12):
            stream.frame(Frame(t=0.0, nbytes=14, comments=["keep-alive"]), 0.05 * (index + 1))
        recorder.add(stream.finish(1.0), stream.frames)
    return recorder.take_batch()

def tick():
    while True:
        gevent.sleep(0.001)
        ticks.append(time.perf_counter())

logging.basicConfig(stream=sys.stderr, level=logging.ERROR)
writer = RunWriter(Path(sys.argv[1]))
large = batch_of(*(f"r{i}" for i in range(2000)))
large["rows"][7]["usage_prompt_tokens"] = 2**64  # row by row from here: seconds of Arrow calls
ticks = []
ticker = gevent.spawn(tick)
start = time.perf_counter()
gevent.joinall([gevent.spawn(writer.write_batch, large), gevent.spawn(writer.write_batch, batch_of("x"))],
               raise_error=True)
end = time.perf_counter()
ticker.kill()
kept = (writer.directory / UNWRITABLE_ROWS).read_text().splitlines()
print(json.dumps({"ticks": sum(start < t < end for t in ticks), "written": writer.rows_written,
                  "unwritable": writer.rows_unwritable, "kept": len(kept)}))
"""


def test_in_a_monkey_patched_process_the_writer_logs_from_its_thread_and_the_loop_runs(tmp_path: Path) -> None:
    """As in Locust: gevent-patched locks in logging, used from the writer's native thread."""
    command = [sys.executable, "-c", PATCHED_PROCESS, str(tmp_path / "run")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert (outcome["written"], outcome["unwritable"], outcome["kept"]) == (2000, 1, 1)
    assert outcome["ticks"] >= 3, outcome
    assert "did not fit the parquet schema" in result.stderr and "Traceback" not in result.stderr
