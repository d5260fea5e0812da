"""Does the verdict judge the server, whatever else the load generator's machine is doing?

Runs, on the bundled server, the main job (``mixed_truncate``: a good server, expected PASS) and two
negative controls (expected FAIL): ``proxy_timeout`` with keep-alive off behind its 2 s proxy, and
``mixed_truncate`` with in-band errors injected into 20% of the requests. Each runs several times at
each level of CPU pressure beside it: no CPU-burning process, as many as cores, and three times as
many (each burner a bounded busy loop, stopped by its pid). It prints one row per scenario and
level: the verdicts seen and the false ones (a good server failed, or a control not failing), then
a total; the target is 0 false verdicts at every level. An inconclusive run is counted apart: it is
no pass, and no false FAIL.

    python bench/verdict_stability.py                 # 3 runs x 3 levels x 3 cases, 15 s each
    python bench/verdict_stability.py --quick         # 1 run of each case, 4 s, no pressure: proves it works
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` importable
    sys.path.insert(0, str(REPO_ROOT))

from loadtests.launch import Launch, run  # noqa: E402

BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


@dataclass(frozen=True)
class Case:
    label: str
    scenario: str
    expected: str
    options: dict[str, object] = field(default_factory=dict)


CASES = (
    Case("good server (main job)", "mixed_truncate", "PASS"),
    Case("keep-alive off behind proxy", "proxy_timeout", "FAIL", {"keep_alive_interval": 0}),
    Case(
        "in-band faults (20%)",
        "mixed_truncate",
        "FAIL",
        {"server_args": "--failure-injection-rate 20 --failure-types inband_error"},
    ),
)


@contextmanager
def cpu_pressure(burners: int, seconds: float) -> Iterator[list[int]]:
    """``burners`` busy loops beside the run, each ending by itself after ``seconds`` and killed by
    its pid on the way out."""
    processes = [
        subprocess.Popen([sys.executable, "-c", BURN.format(seconds=seconds)], stdin=subprocess.DEVNULL)
        for _ in range(burners)
    ]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def verdict_of(case: Case, duration_s: int, users: int, report_dir: Path) -> str:
    result = run(Launch(case.scenario, users=users, duration_s=duration_s, report_dir=report_dir, options=case.options))
    if result.summary is None:
        return f"none ({result.problem})"
    return result.summary.verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 run of each case, 4 s each, no CPU pressure")
    parser.add_argument("--runs", type=int, default=3, help="runs of each case at each level (default 3)")
    parser.add_argument("--duration", type=int, default=15, help="seconds of load per run (default 15)")
    parser.add_argument("--users", type=int, default=8, help="users per run (default 8)")
    options = parser.parse_args()
    cores = os.cpu_count() or 1
    levels = [0] if options.quick else [0, cores, 3 * cores]
    runs, duration = (1, 4) if options.quick else (options.runs, options.duration)
    print(f"cores: {cores}; levels (CPU-burning processes beside the run): {levels}; {runs} run(s) of {duration} s")
    print(f"{'case':<30} {'burners':>7}  {'expected':<8} {'verdicts':<34} false")
    false_total = inconclusive_total = 0
    with tempfile.TemporaryDirectory(prefix="sse-soak-verdicts-") as scratch:
        for burners in levels:
            for case in CASES:
                seen: Counter[str] = Counter()
                for _ in range(runs):
                    with cpu_pressure(burners, duration + 120):
                        seen[verdict_of(case, duration, options.users, Path(scratch))] += 1
                false = sum(n for verdict, n in seen.items() if verdict not in (case.expected, "INCONCLUSIVE"))
                false_total += false
                inconclusive_total += seen["INCONCLUSIVE"]
                shown = ", ".join(f"{verdict} x{n}" for verdict, n in sorted(seen.items()))
                print(f"{case.label:<30} {burners:>7}  {case.expected:<8} {shown:<34} {false}")
    print(f"false verdicts: {false_total} (target 0); inconclusive: {inconclusive_total}")


if __name__ == "__main__":
    main()
