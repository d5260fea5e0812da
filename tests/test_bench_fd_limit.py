"""The benches' open-files limit (``bench/sse_user_throughput.raise_fd_limit``): the hard limit goes up
only where the kernel lets the process raise it, never past ``fs.nr_open``; the soft limit stops at the
hard one otherwise; neither is ever lowered. Each case runs in its own Python process, whose limits
(and, for the unprivileged case, user) it may change freely."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench_script

REPO_ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
CHILD = """
import json, os, resource, sys
from tests.bench_scripts import load_bench_script

soft, hard, needed, drop_to = (int(arg) for arg in sys.argv[1:])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
bench = load_bench_script("sse_user_throughput")
if drop_to >= 0:  # root without its privileges: a plain user's process
    os.setgid(drop_to)
    os.setuid(drop_to)
returned = bench.raise_fd_limit(needed)
print(json.dumps({"returned": returned, "limits": resource.getrlimit(resource.RLIMIT_NOFILE)}))
"""


def raise_in_child(soft: int, hard: int, needed: int, unprivileged: bool = False) -> tuple[int, list[int]]:
    """(what ``raise_fd_limit(needed)`` returned, the limits after it) in a process that began at
    (``soft``, ``hard``), as a plain user when ``unprivileged``."""
    drop_to = NOBODY if unprivileged and os.geteuid() == 0 else -1
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-c", CHILD, str(soft), str(hard), str(needed), str(drop_to)]
    done = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(done.stdout)
    return result["returned"], result["limits"]


PRIVILEGED = pytest.mark.skipif(
    not load_bench_script("sse_user_throughput").may_raise_hard_limits(),
    reason="raising a hard limit needs CAP_SYS_RESOURCE (this machine's root runs without it)",
)


@PRIVILEGED
def test_a_privileged_process_raises_the_hard_limit_to_what_it_needs() -> None:
    assert raise_in_child(100, 200, 500) == (500, [500, 500])


@PRIVILEGED
def test_the_hard_limit_stops_at_the_kernels_ceiling() -> None:
    ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    assert raise_in_child(100, 200, ceiling + 1000) == (ceiling, [ceiling, ceiling])


def test_without_the_privilege_the_soft_limit_stops_at_the_hard_one() -> None:
    assert raise_in_child(100, 200, 500, unprivileged=True) == (200, [200, 200])


def test_the_privilege_check_says_what_the_kernel_allows() -> None:
    """``may_raise_hard_limits`` is True exactly when raising the hard limit by one succeeds."""
    probe = (
        "import resource; from tests.bench_scripts import load_bench_script; "
        "said = load_bench_script('sse_user_throughput').may_raise_hard_limits(); "
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "try:\n    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard + 1)); done = True\n"
        "except (OSError, ValueError):\n    done = False\n"
        "print(said, done)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    said, allowed = done.stdout.split()
    assert said == allowed
