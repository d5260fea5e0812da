"""Keep the load generator's event loop free of stalls that are paid once or grow with the heap.

Header times, the openai SDK's chunks and frames read together after a stall are timed when their
greenlet runs, so whatever holds the one gevent loop is recorded as server latency (and it delays
every request the users send). The costs below are paid here instead, by ``settle_after_setup()``
at each test start, before any user is spawned, when no stream is open:

- Full (generation 2) garbage collections traverse every tracked object. A Locust process holds
  about 170,000 after its imports (Locust, pandas, pyarrow, openai, pydantic): one full
  collection held the loop 110-150 ms of CPU (130-370 ms wall on a busy machine), and one comes
  every 15-30 s under load. ``gc.freeze()`` moves everything alive at setup to the permanent
  generation, which no collection traverses: full collections then see only what the run has
  allocated since (15-25 ms at 200 users). Frozen objects are still freed by reference counting;
  a reference cycle among them is never collected, so setup's garbage is collected first.
- The first ``openai`` request of a process reads platform facts for its headers, and Python's
  ``platform.platform()`` then forks ``uname -p`` and reads the interpreter's binary: 10-25 ms
  on the loop, in the middle of the first streams. Warming Python's own caches makes it free.
- Work moved off the loop to a native thread (``RunWriter``'s parquet writes) still takes the
  GIL, and the loop waits for it up to Python's switch interval, 5 ms by default: writing one
  200-user batch then still held the loop up to 7-13 ms. ``SWITCH_INTERVAL_S`` (1 ms) caps that
  at about 2 ms; with a single runnable thread the interval changes nothing.
- Locust's ``Runner.stop()`` calls ``inspect.stack()`` for a debug message before it stops the
  users, and the first such call resolves the file of every loaded module (2,000 of them): 75 ms
  of CPU (140 ms wall measured) on the loop while the last streams still run. Resolving them
  here leaves 0.3 ms to that call.
- Each ``httpx`` client builds its own TLS context and loads the CA bundle into it (about 30 ms
  of CPU), even for plain-http targets: an ``OpenAISDKUser`` does so in ``on_start``, so spawning
  50 of them held the loop 1-2 s. ``loadtests.client.tls.client_context()`` is one context for every
  client of the process (the run's trust: ``--ca-cert``, ``--insecure``), built here at the latest.

- With setup frozen, a run's cyclic garbage is small (``loadtests.load.users`` breaks the cycles Locust
  and the SDK make for each failed request: mixed_truncate at 200 users went from 110,000 cyclic
  objects in 20 s to 11,000, and full collections found 265), yet CPython still ran a full
  collection every ten middle-generation ones: six in 20 s, 44-53 ms each, every stream stalled. With
  ``FULL_COLLECTION_EVERY`` middle-generation collections between full ones, none ran during a 20 s run at
  200 users (errors over 10 ms against the server's trace: 1,357-1,815 before, 674 after).
- The users' own objects (each user's greenlet, HTTP client and pool, its stream's parser and
  tracker) are alive for the whole test: at 20,000 streams in one process, over a million of them.
  They are allocated while users start, so they reach the oldest generation together, and the
  full collections that follow traverse every one: at 19,936 streams two of them held the loop
  3.3 s (the longest 2.2 s, ``bench/scale.py``). ``freeze_users_as_they_start()`` freezes what is
  alive each time more users run than at its last look (every ``FREEZE_CHECK_S``, a list splice, no
  traversal), so what the users hold never reaches a collection; what a test froze is unfrozen at
  the next test's start, before its collection, so a cycle a stopped user left is collected then.
- ``httpx`` (and the ``httpx2`` the openai SDK may bring) log one INFO line per request, and
  Locust sets the root logger to INFO: every SDK request formatted and wrote a stderr line on the
  loop (4% of a 200-user process's profile, 40 lines in a 5 s main job). ``quiet_per_request_logging()``
  sets those loggers to WARNING unless something already gave them a level.

Invariant: nothing here changes what a run sends or records; it only moves work to setup.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import platform
import sys
from collections.abc import Callable

import gevent

from loadtests.client.tls import client_context

PER_REQUEST_LOGGERS = ("httpx", "httpx2")
"""Loggers that write a line for every HTTP request at INFO."""
FREEZE_CHECK_S = 0.5
"""How often ``freeze_users_as_they_start`` looks whether more users run."""
FULL_COLLECTION_EVERY = 100
"""Middle-generation collections between two full ones (CPython's default: 10)."""
SWITCH_INTERVAL_S = 0.001
"""The longest the loop waits for the GIL while another thread runs Python code (CPython's default
is 5 ms); a C call that holds the GIL throughout (one Arrow conversion) can still take longer."""


def quiet_per_request_logging() -> None:
    """``PER_REQUEST_LOGGERS`` at WARNING, unless a level was set on them already (a user who asks
    for httpx's DEBUG lines keeps them)."""
    for name in PER_REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


def settle_after_setup() -> None:
    """Collect what setup (and an earlier test) left behind, freeze the survivors out of every later
    collection, make full collections ten times rarer, shorten the GIL switch interval, and pay the
    one-time costs a first request would pay on the loop. Takes one full collection of everything
    (100-200 ms at a Locust process's size): call it when no stream is open. Safe to call again (at
    each test start): what was frozen is unfrozen first, so that a cycle an earlier test's users
    left is collected, and the survivors are frozen again."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
    warm_platform_caches()
    warm_inspect_module_cache()
    client_context()
    # libev times what is armed next from its cached clock, stale by the time all this took: without
    # this, the first sleeps and timeouts of the test would end that much early.
    gevent.get_hub().loop.update_now()


def freeze_users_as_they_start(user_count: Callable[[], int]) -> None:
    """Run in a greenlet from a test's start, before its users (kill it at the test's stop): every
    ``FREEZE_CHECK_S``, when ``user_count()`` is above what it was at the last look (0 before the
    first: users started before this greenlet first ran count as started since), freeze what is
    alive, so the objects of the users started since never reach a collection. A cycle among them
    that dies during the test is collected only at the next ``settle_after_setup``."""
    seen = 0
    while True:
        gevent.sleep(FREEZE_CHECK_S)
        now = user_count()
        if now > seen:
            gc.freeze()
        seen = now


def warm_platform_caches() -> None:
    """Fill the caches of Python's ``platform`` module that ``openai`` reads for its request
    headers (the first ``platform.platform()`` runs ``uname -p`` in a subprocess)."""
    platform.platform()
    platform.processor()
    with contextlib.suppress(OSError):  # no os-release file: nothing to cache, openai copes
        platform.freedesktop_os_release()


def warm_inspect_module_cache() -> None:
    """Let ``inspect`` map every module loaded so far to its file, as the first ``inspect.stack()``
    otherwise does (later calls only look at modules loaded since)."""
    inspect.getmodule(inspect.currentframe())
