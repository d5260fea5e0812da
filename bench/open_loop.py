"""Closed loop against open loop while the server slows down midway: what coordinated omission hides.

Two runs of ``mixed_truncate`` on the bundled server, each with a server that prefills and decodes
``--slowdown-factor`` times slower from ``--slowdown-after`` seconds after its first request:

- closed: ``-u USERS`` users, each sending its next request when its last one ended (Locust's way);
- open: ``--rate R`` at the closed run's own request rate before the slowdown (the same nominal
  load), Poisson, with up to ``--max-in-flight`` requests open, so the schedule is kept.

For each run and each phase (before and after the slowdown) it prints the requests sent and their
rate, TTFT p99 (the open run's also from the scheduled time: what a user arriving then waited) and
the server's queue depth (``vllm:num_requests_waiting`` scraped from ``/metrics``: mean and max).
What it shows: after the slowdown the closed loop sends fewer requests (each user waits for its
last answer) and so hides part of the slowdown; the open loop keeps sending, the queue grows and
its TTFT from the schedule shows the backlog. The last lines give those two ratios.

    python bench/open_loop.py            # 30 s runs, slowdown after 12 s, x4
    python bench/open_loop.py --quick    # a smoke run (about a minute in all) that proves the script works
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run as a plain script: make ``loadtests`` importable
    sys.path.insert(0, str(REPO_ROOT))

from loadtests.launch import Launch, ScenarioRun, run  # noqa: E402
from loadtests.record.figures import quantiles  # noqa: E402

WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True)
class Phase:
    sent: int
    seconds: float
    ttft_p99: float | None
    ttft_from_schedule_p99: float | None
    waiting_mean: float | None
    waiting_max: float | None

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else float("nan")


def phases(result: ScenarioRun, slowdown_after: float, duration: float) -> tuple[Phase, Phase]:
    """The run before and after its server slowed down: from its first request to ``slowdown_after``
    seconds later, and from there to the end of its load (``duration`` seconds after the first request)."""
    requests = result.requests
    sent = requests[requests["outcome"] != "not_sent"]  # streams the run stopped at its end were sent too
    first = float(sent["start_time"].min())
    split, end = first + slowdown_after, first + duration
    waiting = _waiting(result)
    made = []
    for low, high in ((first, split), (split, end)):
        rows = sent[(sent["start_time"] >= low) & (sent["start_time"] < high)]
        from_schedule = rows["start_lateness_s"] + rows["ttft_s"]  # null in the closed loop: no schedule
        queue = waiting[(waiting["time"] >= low) & (waiting["time"] < high)]["value"]
        made.append(
            Phase(
                sent=len(rows),
                seconds=high - low,
                ttft_p99=quantiles(rows["ttft_s"], (99,))[0],
                ttft_from_schedule_p99=quantiles(from_schedule, (99,))[0],
                waiting_mean=float(queue.mean()) if len(queue) else None,
                waiting_max=float(queue.max()) if len(queue) else None,
            )
        )
    return made[0], made[1]


def _waiting(result: ScenarioRun) -> pd.DataFrame:
    metrics = result.run_dir.read_server_metrics()
    return metrics[metrics["name"] == WAITING]


def _figure(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(rows: list[tuple[str, str, Phase]]) -> None:
    columns = ("sent", "sent/s", "TTFT p99 s", "from sched s", "queue mean", "queue max")
    widths = (5, 7, 11, 13, 11, 10)
    print(
        f"{'run':<7} {'phase':<7} " + " ".join(f"{name:>{width}}" for name, width in zip(columns, widths, strict=True))
    )
    for name, label, phase in rows:
        print(
            f"{name:<7} {label:<7} {phase.sent:>5} {phase.rate:>7.2f} {_figure(phase.ttft_p99):>11} "
            f"{_figure(phase.ttft_from_schedule_p99):>13} {_figure(phase.waiting_mean, 2):>11} "
            f"{_figure(phase.waiting_max, 0):>10}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs that only prove the script works")
    parser.add_argument("--duration", type=int, default=None, help="seconds per run (default 30; quick 12)")
    parser.add_argument("--slowdown-after", type=float, default=None, help="seconds (default 12; quick 5)")
    parser.add_argument("--slowdown-factor", type=float, default=4.0, help="how much slower (default 4)")
    parser.add_argument("--users", type=int, default=8, help="closed loop's users (default 8)")
    parser.add_argument("--max-in-flight", type=int, default=256, help="open loop's limit and users (default 256)")
    parser.add_argument("--report-dir", type=Path, default=Path("reports") / "bench-open-loop")
    options = parser.parse_args(argv)
    duration = options.duration or (12 if options.quick else 30)
    after = options.slowdown_after or (5.0 if options.quick else 12.0)
    server = f"--slowdown-after {after:g} --slowdown-factor {options.slowdown_factor:g}"
    report_dir: Path = options.report_dir

    closed = run(
        Launch(
            "mixed_truncate",
            users=options.users,
            duration_s=duration,
            report_dir=report_dir,
            options={"server_args": server},
        )
    )
    if closed.summary is None:
        print(closed.explain(), file=sys.stderr)
        return 1
    closed_before, closed_after = phases(closed, after, duration)
    rate = round(closed_before.rate, 2)
    print(f"closed loop: {options.users} users; its rate before the slowdown: {rate:g}/s -> the open loop's --rate")
    open_options = {"server_args": server, "rate": rate, "max_in_flight": options.max_in_flight}
    opened = run(
        Launch(
            "mixed_truncate",
            users=options.max_in_flight,
            duration_s=duration,
            report_dir=report_dir,
            options=open_options,
        )
    )
    if opened.summary is None:
        print(opened.explain(), file=sys.stderr)
        return 1
    open_before, open_after = phases(opened, after, duration)
    print(f"server slows down x{options.slowdown_factor:g} {after:g} s after its first request; runs of {duration} s")
    print_table(
        [
            ("closed", "before", closed_before),
            ("closed", "after", closed_after),
            ("open", "before", open_before),
            ("open", "after", open_after),
        ]
    )
    arrival = opened.summary.arrival
    print(
        f"open loop: asked {rate:g}/s, achieved {arrival and arrival.rate_achieved}/s, "
        f"{arrival and arrival.not_sent} not sent, {arrival and arrival.late} started late"
    )
    closed_ratio, open_ratio = closed_after.rate / closed_before.rate, open_after.rate / open_before.rate
    print(f"sent/s after/before: closed {closed_ratio:.2f}, open {open_ratio:.2f}")
    print(f"run directories: {closed.run_dir} {opened.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
