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


EARLIER_TEST = """
import gc, json, weakref
from loadtests.load.loop_hygiene import settle_after_setup

class Node:
    pass

settle_after_setup()
user = Node()
user.self = user  # a stopped user's cycle, frozen while its test ran
gc.freeze()
left_over = weakref.ref(user)
del user
gc.collect()
kept_by_the_test = left_over() is not None
settle_after_setup()  # the next test's start
print(json.dumps({"kept_by_the_test": kept_by_the_test, "freed_at_next_start": left_over() is None}))
"""


def test_a_cycle_a_test_froze_is_collected_at_the_next_test_start() -> None:
    seen = run(EARLIER_TEST)
    assert seen["kept_by_the_test"] is True  # frozen: no collection sees it during its test
    assert seen["freed_at_next_start"] is True


AS_USERS_START = """
import gc, json, time
import gevent
from loadtests.load import loop_hygiene

loop_hygiene.FREEZE_CHECK_S = 0.01
loop_hygiene.settle_after_setup()
users = []
freezer = gevent.spawn(loop_hygiene.freeze_users_as_they_start, lambda: len(users))

def frozen_after(grow):
    before = gc.get_freeze_count()
    users.extend(object() for _ in range(grow))
    held = [[index] for index in range(2000)]  # what the new users hold: tracked containers
    deadline = time.monotonic() + 60
    while gc.get_freeze_count() < before + len(held) and time.monotonic() < deadline:
        gevent.sleep(0.01)
    return gc.get_freeze_count() - before, held

def collectable(thing):
    # in a generation a collection traverses: not frozen
    return any(seen is thing for seen in gc.get_objects())

grew, first = frozen_after(10)
idle = [[index] for index in range(2000)]  # allocated while no user starts: left to collections
gevent.sleep(0.2)  # twenty looks, or fewer on a busy machine: none may freeze
freezer.kill()
print(json.dumps({"frozen_as_users_started": grew, "first_collectable": collectable(first[0]),
                  "idle_collectable": collectable(idle[0])}))
"""


def test_what_users_hold_is_frozen_as_they_start_and_nothing_while_none_start() -> None:
    seen = run(AS_USERS_START)
    assert seen["frozen_as_users_started"] >= 2000
    assert seen["first_collectable"] is False  # what the users started held: frozen
    assert seen["idle_collectable"] is True  # allocated while none started: left to collections
