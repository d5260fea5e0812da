"""Run a scenario the way a user does (``locust -f ... --headless``, or in the background to talk to
its web UI and send it signals; ``python -m loadtests soak``) and read what it wrote."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from loadtests.judge.summary import Summary
from loadtests.record.run_dir import RunDir, RunRecord

ROOT = Path(__file__).resolve().parents[2]
REPORT_LINE = re.compile(r"^report: (?P<path>.+)$", re.MULTILINE)


@dataclass
class LocustRun:
    returncode: int
    output: str
    run_dir: Path | None

    @property
    def checked_run_dir(self) -> Path:
        """The run's directory; an ``AssertionError`` with the end of its output when it printed none."""
        assert self.run_dir is not None, self.output[-3000:]
        return self.run_dir

    @functools.cached_property
    def summary(self) -> dict[str, Any]:
        """The summary the run wrote, checked to be what a later judgement of the run gives."""
        assert self.run_dir is not None, self.output[-3000:]
        return rejudged_alike(self.run_dir)

    @property
    def requests(self) -> pd.DataFrame:
        assert self.run_dir is not None, self.output[-3000:]
        return pd.read_parquet(self.run_dir / "requests.parquet")

    @property
    def frames(self) -> pd.DataFrame:
        assert self.run_dir is not None, self.output[-3000:]
        return pd.read_parquet(self.run_dir / "frames.parquet")

    @property
    def lag(self) -> pd.DataFrame:
        assert self.run_dir is not None, self.output[-3000:]
        return pd.read_parquet(self.run_dir / "lag.parquet")

    @functools.cached_property
    def judged(self) -> Summary:
        """The summary as the library reads it (``Summary.read``), once ``summary`` checked it."""
        assert self.run_dir is not None, self.output[-3000:]
        self.summary  # noqa: B018 - re-judged alike first
        return Summary.read(RunDir(self.run_dir).summary)

    def gate(self, name: str) -> dict[str, Any]:
        return next(gate for gate in self.summary["gates"] if gate["name"] == name)


def rejudged_alike(run_dir: Path) -> dict[str, Any]:
    """The summary ``run_dir`` holds, as its file says it, after checking that the library reads it as
    a whole summary (``Summary.read``) and that judging a copy of the run again (what ``python -m
    loadtests report`` does) gives the same summary: verdict, gates, figures, sections."""
    from loadtests.run.judging import judge  # pandas: only for the tests that read a run

    file = RunDir(run_dir).summary
    Summary.read(file)  # a whole summary, every field of its type, or SummaryError naming the file
    written = json.loads(file.read_text())
    with tempfile.TemporaryDirectory(prefix="rejudged-") as scratch:
        copy = Path(scratch) / run_dir.name
        shutil.copytree(run_dir, copy)
        again = json.loads(json.dumps(judge(RunRecord(RunDir(copy)), html=False).to_json()))
    differing = sorted(key for key in written.keys() | again.keys() if written.get(key) != again.get(key))
    assert not differing, f"re-judged {run_dir} differs in {differing}: {[again.get(k) for k in differing]}"
    return written


def run_in_checkout(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``command`` run from this checkout, its ``loadtests`` first on the path, with no stdin."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL
    )


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``code`` (dedented) run by a fresh interpreter from this checkout."""
    return run_in_checkout(sys.executable, "-c", textwrap.dedent(code), timeout=timeout)


def locust_command(locustfile: str | Path, *args: str) -> list[str]:
    """``python -m locust -f <locustfile> <args>``: how every test starts Locust."""
    return [sys.executable, "-m", "locust", "-f", str(locustfile), *args]


def run_locust(scenario: str, report_dir: Path, *args: str, users: int = 4, seconds: int = 4) -> LocustRun:
    """Headless run of ``scenarios/<scenario>.py`` for ``seconds``; never longer than 3 minutes."""
    command = locust_command(
        ROOT / "scenarios" / f"{scenario}.py",
        "--headless",
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        "--report-dir",
        str(report_dir),
        "--only-summary",
        *args,
    )
    result = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order a terminal shows it
        text=True,
        timeout=180,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    match = REPORT_LINE.search(result.stdout)
    return LocustRun(result.returncode, result.stdout, Path(match["path"]) if match else None)


def soak_command(report_dir: Path, *args: str) -> list[str]:
    """``python -m loadtests soak`` into ``report_dir``, with progress, checkpoints and windows short
    enough for a run of seconds."""
    return [
        sys.executable,
        "-m",
        "loadtests",
        "soak",
        "--report-dir",
        str(report_dir),
        "--progress-interval",
        "2",
        "--checkpoint-interval",
        "5",
        "--windows",
        "3",
        *args,
    ]


LOCUST_OWN_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d |^Type +Name|^-+\||Aggregated|^Response time percentiles|^Error report"
)
"""A line of Locust's own: a log line, or a line of its statistics tables."""


def assert_the_verdict_comes_last(output: str, after_tables: bool = True) -> list[str]:
    """The run's closing block (``requests:``, gate lines, ``timing:``, ``ended:``, the verdict,
    ``report:``) is the last thing in ``output``, with none of Locust's lines inside, and (unless
    ``after_tables`` is False: Locust's ``--skip-log`` prints none) after Locust's final tables;
    returns the block."""
    lines = [line for line in output.splitlines() if line.strip()]
    tail = "\n".join(lines[-60:])
    starts = [index for index, line in enumerate(lines) if line.startswith("requests: ")]
    assert starts, tail
    block = lines[starts[-1] :]
    assert [line.split(":")[0] for line in block[-3:]] == ["ended", "verdict", "report"], tail
    assert not [line for line in block if LOCUST_OWN_LINE.search(line)], tail
    assert any(line.startswith("gate ") for line in block), tail
    if after_tables:
        assert any("Aggregated" in line for line in lines[: starts[-1]]), tail  # Locust's final tables came first
    return block


SERVICE_PID = re.compile(r"^(?:target server|embedded proxy|nginx|haproxy|caddy|apache|squid): \S+ \(pid (\d+)\)$")


class LiveLocust:
    """``locust -f scenarios/<scenario>.py ...`` running in the background: its output line by line
    as it comes, signals, its exit. In its own session, so ``close()`` can end it, its forked
    workers and the services it started, by their ids, whatever state a failed test left."""

    def __init__(self, scenario: str, report_dir: Path, *args: str) -> None:
        command = locust_command(
            ROOT / "scenarios" / f"{scenario}.py", "--report-dir", str(report_dir), "--only-summary", *args
        )
        self._start(command)

    @classmethod
    def of(cls, command: list[str]) -> LiveLocust:
        """Any ``command`` run the same way (``python -m loadtests soak ...``, say)."""
        live = cls.__new__(cls)
        live._start(command)
        return live

    def _start(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def matching(self, pattern: str) -> list[re.Match[str]]:
        regex = re.compile(pattern)
        with self._changed:
            return [match for line in self.lines if (match := regex.search(line))]

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 60.0) -> re.Match[str]:
        """The ``count``-th output line matching ``pattern``, once it is printed."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                matches = [match for line in self.lines if (match := regex.search(line))]
                if len(matches) >= count:
                    return matches[count - 1]
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    tail = "\n".join(self.lines[-40:])
                    raise AssertionError(f"no line {count} matching {pattern!r}; output ends:\n{tail}")
                self._changed.wait(left)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def signal_group(self, signum: int) -> None:
        """``signum`` to Locust and every process it forked, as a terminal's Ctrl-C sends SIGINT."""
        os.killpg(self.process.pid, signum)  # its own session: the group is Locust's alone

    def wait(self, timeout: float = 60.0) -> int:
        """Locust's exit code; an ``AssertionError`` with the end of its output when it does not
        exit within ``timeout`` (a hang shows what it printed last)."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            tail = "\n".join(self.lines[-40:])
            raise AssertionError(f"Locust did not exit within {timeout:g} s; output ends:\n{tail}") from None
        self._reader.join(timeout)
        return code

    def close(self) -> None:
        """End whatever a failed test left: the process group (Locust and its forked workers), then
        the services it started (a Locust that exited by itself stopped them)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
            for match in self.matching(SERVICE_PID.pattern):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(match[1]), signal.SIGKILL)
        self._reader.join(10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> LiveLocust:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
