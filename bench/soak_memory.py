"""Does a long soak leak? Memory of the harness and of the bundled server, window by window.

Why this exists: the failures a soak is for (a leak in the server or in the harness itself)
show up only over time, so memory growth must be a measured figure, not a guess. This runs
``python -m loadtests soak`` on the default soak scenario for ``--duration`` (10 minutes by
default) with ``--windows`` windows, then prints from its summary the mean RSS of the harness
(Locust and its workers) and of the bundled server in every window, the growth from the second
window to the last (the first is warm-up: imports, prompt building, allocator arenas), the
requests per second held, and the soak's own verdict. The soak fails its ``memory_growth`` gate
at +10% steady growth; this prints the figure whatever the verdict.

How to read it: growth well under 10% for both, with no steady climb across windows, means no
leak at this load and duration; a steady climb that stays under 10% is a leak too slow for this
run to prove, so run longer (``--duration 2h``).

``--quick`` is a smoke run that proves the script still works: a 30 s soak with 3 windows and 4
users (options given explicitly still win). It prints the same figures, but 30 s says nothing
about leaks. The soak is bounded: it is killed (by its pid) if it runs ``--timeout`` seconds past
its duration.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` importable
    sys.path.insert(0, str(ROOT))

from loadtests.declare.options import parse_duration  # noqa: E402
from loadtests.record.run_dir import RunDir  # noqa: E402

STOP_GRACE_S = 30.0
QUICK = {"duration": "30s", "windows": 3, "users": 4}
"""``--quick``: seconds, not minutes; the same figures."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK} unless given")
    parser.add_argument("--duration", default="10m", help="soak duration, e.g. 3m, 10m, 2h (default 10m)")
    parser.add_argument("--windows", type=int, default=10, help="drift windows (default 10)")
    parser.add_argument("--users", type=int, default=12, help="concurrent users (default 12)")
    parser.add_argument("--report-dir", default="/tmp/sse-soak-bench", help="where the run goes")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds past --duration before the soak is killed"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**QUICK)
    options = parser.parse_args(argv)
    try:
        options.duration_s = parse_duration(options.duration)
    except ValueError as exc:
        parser.error(f"--duration: {exc}")
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    command = [
        sys.executable,
        "-m",
        "loadtests",
        "soak",
        "--duration",
        options.duration,
        "--windows",
        str(options.windows),
        "--users",
        str(options.users),
        "--report-dir",
        options.report_dir,
        "--progress-interval",
        "30",
    ]
    print("running:", " ".join(command), flush=True)
    started = time.monotonic()
    result = run_bounded(command, options.duration_s + options.timeout)
    if result is None:
        print(f"the soak was still running {options.timeout:.0f} s after its {options.duration_s} s duration")
        return 1
    wall = time.monotonic() - started
    report = [line for line in result.stdout.splitlines() if line.startswith("report: ")]
    if not report:
        print(result.stdout[-3000:] + result.stderr[-3000:])
        print("the soak wrote no report")
        return 1
    run_dir = Path(report[-1].split(": ", 1)[1])
    summary = json.loads(RunDir(run_dir).summary.read_text())
    figures = _figures(summary, wall)
    _print(summary, figures, run_dir, result.stdout.strip().splitlines()[-1])
    if options.json:
        options.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def run_bounded(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    """Run the soak; past ``timeout_s`` stop it by its pid (SIGTERM, so it stops Locust and the
    server it started, then SIGKILL) and return None."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.communicate(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()
        return None
    finally:
        if process.poll() is None:  # interrupted (Ctrl-C): do not leave the soak behind
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _figures(summary: dict, wall: float) -> dict:
    windows = summary["soak"]["windows"]
    judged = summary["requests"] - summary["outcomes"].get("stopped", 0)
    figures = {
        "wall_s": round(wall, 1),
        "requests": judged,
        "requests_per_s": round(judged / summary["soak"]["duration_s"], 2),
    }
    for key in ("harness_rss_mb", "server_rss_mb"):
        values = [w[key] for w in windows if w[key] is not None]
        figures[key] = values
        if len(values) >= 2:
            figures[f"{key}_start"], figures[f"{key}_end"] = values[0], values[-1]
            figures[f"{key}_growth_second_to_last"] = round(values[-1] / values[1] - 1, 4)
    return figures


def _print(summary: dict, figures: dict, run_dir: Path, verdict: str) -> None:
    print(f"run: {run_dir}")
    print(f"{'window':>6} {'from s':>7} {'to s':>7} {'requests':>8} {'harness MiB':>11} {'server MiB':>10}")
    for window in summary["soak"]["windows"]:
        print(
            f"{window['window']:>6} {window['start_s']:>7.0f} {window['end_s']:>7.0f} {window['requests']:>8} "
            f"{window['harness_rss_mb'] or 0:>11.1f} {window['server_rss_mb'] or 0:>10.1f}"
        )
    for key, label in (("harness_rss_mb", "harness"), ("server_rss_mb", "server")):
        if f"{key}_growth_second_to_last" in figures:
            print(
                f"{label} memory: first window {figures[f'{key}_start']:.1f} MiB, last {figures[f'{key}_end']:.1f} "
                f"MiB, growth second->last window {figures[f'{key}_growth_second_to_last']:+.1%} (gate: +10%)"
            )
    print(
        f"held: {figures['requests']} requests in {summary['soak']['duration_s']:.0f} s = "
        f"{figures['requests_per_s']} requests/s"
    )
    print(f"soak {verdict}")


if __name__ == "__main__":
    sys.exit(main())
