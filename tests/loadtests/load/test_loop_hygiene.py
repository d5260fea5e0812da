"""Loop hygiene: after setup, full collections no longer traverse what setup built, and the first
``openai`` request and Locust's stop find their caches warm. Each test that settles runs in its
own interpreter: freezing or warming the pytest process would change it for every later test."""

from __future__ import annotations

import json
import logging
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtests.client.tls import client_context
from loadtests.load.loop_hygiene import FULL_COLLECTION_EVERY, SWITCH_INTERVAL_S

ROOT = Path(__file__).resolve().parents[3]


def run(script: str) -> dict[str, Any]:
    return run_with(script)


def run_with(script: str, *args: str) -> dict[str, Any]:
    """The JSON object ``script`` prints last, run in a fresh interpreter with ``args``."""
    command = [sys.executable, "-c", script, *args]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


FREEZE = """
import gc, json, sys, weakref
import pandas, pyarrow  # the bulk of a Locust process's objects, as far as the collector is concerned
from loadtests.load.loop_hygiene import settle_after_setup

class Node:
    pass

garbage = Node()
garbage.self = garbage  # a cycle: only a collection frees it
left_over = weakref.ref(garbage)
del garbage
before = len(gc.get_objects())
settle_after_setup()
after_first = len(gc.get_objects()), gc.get_freeze_count()
settle_after_setup()
print(json.dumps({"before": before, "collected": after_first[0], "frozen": after_first[1],
                  "frozen_again": gc.get_freeze_count(), "enabled": gc.isenabled(),
                  "garbage_freed": left_over() is None, "switch_interval": sys.getswitchinterval(),
                  "thresholds": gc.get_threshold()}))
"""


def test_setup_objects_leave_every_later_collection_and_garbage_is_not_frozen() -> None:
    seen = run(FREEZE)
    assert seen["before"] > 50_000
    assert seen["collected"] < 1000  # what a full collection still traverses
    assert seen["frozen"] >= seen["before"] - 1000
    assert seen["frozen_again"] >= seen["frozen"]
    assert seen["enabled"] is True  # collections still run, for what the run allocates
    assert seen["garbage_freed"] is True  # collected first: no garbage cycle is frozen for good
    assert seen["switch_interval"] == pytest.approx(SWITCH_INTERVAL_S)
    assert seen["thresholds"] == [700, 10, FULL_COLLECTION_EVERY]  # CPython's young ones; full ones rarer


WARM = """
import json, platform
from loadtests.load.loop_hygiene import settle_after_setup

settle_after_setup()

def forbidden(*args, **kwargs):
    raise AssertionError("platform would run a subprocess or read a file on the loop")

platform._Processor.get = classmethod(forbidden)  # uname -p in a subprocess
platform.libc_ver = forbidden  # reads the interpreter's binary
platform._syscmd_ver = forbidden
# what openai's platform headers read on the first request of a process
seen = {"system": platform.system(), "platform": platform.platform(), "machine": platform.machine(),
        "processor": platform.processor(), "python": platform.python_version()}
print(json.dumps(seen))
"""


def test_the_platform_facts_a_first_openai_request_reads_are_cached_by_setup() -> None:
    seen = run(WARM)
    assert seen["system"] and seen["platform"] and seen["machine"] and seen["python"]


@pytest.mark.fast
def test_one_verifying_tls_context_serves_every_client() -> None:
    context = client_context()
    assert client_context() is context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


STOP = """
import inspect, json, os, sys
import pandas, pyarrow  # many modules, as in a Locust process
from loadtests.load.loop_hygiene import settle_after_setup

if sys.argv[1] == "settled":
    settle_after_setup()
resolved = []
realpath = os.path.realpath
os.path.realpath = lambda path, **kwargs: resolved.append(path) or realpath(path, **kwargs)

def stop():  # as Locust's Runner.stop(), while users still stream
    return inspect.getframeinfo(inspect.stack()[1][0])

stop()
print(json.dumps({"resolved": len(resolved)}))
"""


def test_the_module_files_locust_looks_up_when_it_stops_are_resolved_at_setup() -> None:
    cold = run_with(STOP, "cold")
    settled = run_with(STOP, "settled")
    assert cold["resolved"] > 500
    assert settled["resolved"] < 50


CLOCK = """
import json, time
import gevent
from loadtests.load.loop_hygiene import settle_after_setup

loop = gevent.get_hub().loop
loop.update_now()
time.sleep(0.2)  # setup blocks the loop, as imports and discovery do
stale = loop.now()
settle_after_setup()
print(json.dumps({"caught_up": loop.now() - stale}))
"""


def test_timers_armed_after_settling_are_not_early() -> None:
    assert run(CLOCK)["caught_up"] >= 0.2


def test_per_request_loggers_are_quieted_unless_given_a_level() -> None:
    """httpx logs a line per request at INFO, which Locust's root logger prints: WARNING instead,
    but a level someone set on purpose stays."""
    result = run(
        "import json, logging\n"
        "from loadtests.load.loop_hygiene import quiet_per_request_logging\n"
        "logging.getLogger('httpx2').setLevel(logging.DEBUG)\n"
        "quiet_per_request_logging()\n"
        "print(json.dumps({n: logging.getLogger(n).level for n in ('httpx', 'httpx2')}))"
    )
    assert result == {"httpx": logging.WARNING, "httpx2": logging.DEBUG}
