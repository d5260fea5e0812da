"""The live metrics' gate states, judged in a child process of their own (``loadtests.record.live_metrics``).

Judging a run so far (``judging.judge_so_far``, the web UI tab's judgement, its gates rebuilt from the
run's manifest as ``report`` rebuilds them) reads every row written, and its pandas work holds the
GIL the load's event loop needs: in the Locust process, a 556,000-row run judged in 4.2 s stalled the
loop up to 63 ms (p99 8.2 ms, against 0.3 ms idle). So it runs in a child: ``python -m
loadtests.run.live_gates``, started once per test at its first judgement (never on the loop: by the
``GateWatch`` thread, with ``posix_spawn`` and raw pipes, no gevent), which answers one line of JSON
per line it reads (``{"run_dir": ..., "max_unjudged_share": ...}`` -> ``{"states": {...},
"interval": ...}`` or ``{"error": ...}``) and exits when its stdin closes: when the test is judged,
or when the run's process dies. It reads the run directory and writes nothing. Like the soak's own
judging it is no part of the load generator: the harness's memory (``run.resources``) leaves it out.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from gevent import monkey

from loadtests.errors import LiveJudgeError

MODULE = "loadtests.run.live_gates"
"""How the child is started (``python -m``): what tells it apart among the run's processes."""
_waitpid = monkey.get_original("os", "waitpid")
_posix_spawn = monkey.get_original("os", "posix_spawn")
"""The standard library's own: gevent's need its hub, which this thread has not."""
_MAX_ANSWER = 1 << 20


class ChildJudge:
    """The judging child of one test: ``judge()`` asks it, blocking (from the ``GateWatch`` thread);
    ``close()`` ends it. Not thread-safe: one thread asks."""

    def __init__(self, run_dir: Path, max_unjudged_share: float) -> None:
        self.request = json.dumps({"run_dir": str(run_dir), "max_unjudged_share": max_unjudged_share}) + "\n"
        self._pid: int | None = None
        self._to_child: int | None = None
        self._from_child: int | None = None
        self._pending = b""

    def __call__(self) -> tuple[dict[str, int], float | None]:
        if self._pid is None:
            self._start()
        assert self._to_child is not None
        os.write(self._to_child, self.request.encode())
        answer = json.loads(self._read_line())
        if "error" in answer:
            raise LiveJudgeError(answer["error"])
        interval = answer.get("interval")
        return {str(name): int(state) for name, state in answer["states"].items()}, interval

    def _start(self) -> None:
        child_in, self._to_child = os.pipe()
        self._from_child, child_out = os.pipe()
        package_root = str(Path(__file__).resolve().parents[2])  # where this loadtests is imported from
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        actions = [
            (os.POSIX_SPAWN_DUP2, child_in, 0),
            (os.POSIX_SPAWN_DUP2, child_out, 1),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        try:
            self._pid = _posix_spawn(
                sys.executable,
                [sys.executable, "-m", MODULE],
                {**os.environ, "PYTHONPATH": path},
                file_actions=actions,
            )
        except OSError:
            self.close()
            raise
        finally:
            os.close(child_in)
            os.close(child_out)

    def _read_line(self) -> str:
        assert self._from_child is not None
        while b"\n" not in self._pending:
            received = os.read(self._from_child, 65536)
            if not received:
                raise LiveJudgeError("the judging child ended")
            self._pending += received
            if len(self._pending) > _MAX_ANSWER:
                raise LiveJudgeError("the judging child answered too much")
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        """End the child (its stdin closes) and reap it."""
        for fd in (self._to_child, self._from_child):
            if fd is not None:
                os.close(fd)
        self._to_child = self._from_child = None
        if self._pid is not None:
            with contextlib.suppress(ChildProcessError):  # reaped already: gevent's child watcher reaps what ends
                _waitpid(self._pid, 0)
            self._pid = None


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """One judgement so far of the run directory ``request`` names, by the gates of its manifest."""
    from loadtests.judge.gates import rebuild_gates
    from loadtests.record.run_dir import RunDir, RunRecord
    from loadtests.run.judging import gate_states, judge_so_far

    run = RunDir(request["run_dir"])
    record = RunRecord(run)
    manifest = record.manifest
    if manifest is None:
        raise LiveJudgeError(f"{run.path} has no manifest yet")
    gates, _ = rebuild_gates(manifest.gate_specs, manifest.gate_sources, never_from=run.path)
    settings = {**manifest.settings, "max_unjudged_share": request["max_unjudged_share"]}
    summary = judge_so_far(record, gates, settings, manifest.point or [])
    interval = summary.settings.get("keep_alive_interval")
    return {"states": gate_states(summary.gates), "interval": None if interval is None else float(interval)}


def main() -> None:
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except Exception as exc:  # the next judgement tries again
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
