"""Silence made against any server: the harness holds the server's slots so the run's streams queue.

A scenario whose point is silence (slow_prefill, proxy_timeout, the soak: a mix with ``hold_s``
specs) makes it by queueing when the server's own prefill is fast (real vLLM on a CPU prefills
thousands of tokens in milliseconds). Queueing needs more streams than the server runs at once,
and a server's concurrency is its own (vLLM's ``--max-num-seqs``, 128 on a CPU by default), so the
run's users alone cannot be trusted to queue. Against a server whose prefill is not the profile's
(``--host``, ``--server vllm``), one process of the run (the single one, or worker 0) therefore:

1. **finds the concurrency** ``C``, unless it is ``known`` (real vLLM that the run started runs the
   ``--max-num-seqs`` it was given: no search spends the run's first seconds). It sends slot holders
   (non-streaming completions that ask for as many tokens as the context leaves, ``ignore_eos``) in
   growing steps. Where the server exposes vLLM's gauges at ``/metrics`` (real vLLM, the bundled
   server), ``C`` is ``vllm:num_requests_running`` once ``vllm:num_requests_waiting`` stays above 0
   (steps of ``GAUGE_STEP`` times more; the extra holders are closed, the newest first). Else a ramp
   (steps of twice more) watches first-token waits: a one-token probe stream that gets no first
   token within ``PROBE_WAIT_S`` found the server full, and a bisection finds the fewest holders
   that fill it.
2. **holds** ``C`` streams, so every stream of the run waits in the queue, and once the oldest
   stream queued since the last release has waited ``release_every_s`` (the scenario's ``hold_s``,
   at least 1.5 times the read timeout a gate judges and 3 keep-alive intervals) **releases** the
   oldest holders, one per stream queued (their connections closed: the server frees their slots),
   and sends as many again at the queue's tail: the queued streams take those slots, the holders
   take them back as they finish, and the streams sent after them wait for the next release. A
   waiting stream is silent about ``release_every_s``, whatever the server's pace, and only the
   streams sent in a run's last ``release_every_s`` are still queued at its end (stopped, left out
   of the gates): the work is sized so that silent streams finish before the end. After each
   release the holders adjust by one: one more when streams finished without waiting, one fewer
   when none finished while some are open.

Bounded: at most ``max_holders`` holders (``--max-slot-holders``), at most ``FIND_BOUND_S`` to
find ``C``; each holder is one connection and one greenlet. Each outcome is one line: what was
found, how, and what is held (``found concurrency 16 from the server's gauges ...``); the bound
that was reached, by name; at the test's end, how long the waiting streams were silent. A
scenario whose silence was not made is then INCONCLUSIVE by its own gates (no stream was silent
long enough), the line naming why.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

import gevent
import httpx

from loadtests.base.lines import say
from loadtests.base.safe_text import printable
from loadtests.client.tls import client_context
from loadtests.declare.workload import DEFAULT_MAX_SLOT_HOLDERS
from loadtests.errors import ScrapeError
from loadtests.record.server_metrics import fetch_samples

FIND_BOUND_S = 60.0
"""The longest the search for the server's concurrency may take."""
FULL_STABLE_S = 1.0
"""How long the gauges must show requests waiting and no more running for the server to be full."""
SCRAPE_EVERY_S = 0.2
RELEASE_CHECK_S = 0.1
"""How often the holders look whether the oldest stream queued since the last release waited its period."""
GAUGE_STEP = 2
"""How many times more holders each step sends while the gauges watch: overshooting costs nothing
(the gauges say the concurrency exactly, the extra holders are closed), each step costs a settle."""
PROBE_WAIT_S = 1.0
"""A one-token probe stream with no first token after this long waited in the server's queue."""
RAMP_SETTLE_S = 0.3
"""Between sending holders (or closing some) and probing: the server schedules in milliseconds."""
HOLDER_PROMPT = "w w w w"
HOLDER_MAX_TOKENS = 16384
"""The most tokens a holder asks for, whatever the context leaves."""
HOLDER_MIN_S = 1.0
"""A holder whose request ended sooner waits out the rest before it sends again: an error answer
or a server that streams a whole context this fast must not make a tight loop."""
HOLDER_FAILURES = 20
"""Holder requests answered with an error (or no answer) before the holders give up, saying why."""
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


@dataclass(frozen=True)
class Found:
    """The server's concurrency and how it was found."""

    concurrency: int
    how: str


class SlotHolders:
    """The slot holders of one process for one test: ``start()`` finds and holds, ``stop()`` ends
    every holder (their connections closed) and returns the test's closing line. Invariant: never
    more than ``max_holders`` holder greenlets exist; every one is killed by ``stop()``."""

    def __init__(
        self,
        host: str,
        headers: Mapping[str, str],
        model: str,
        max_model_len: int | None,
        release_every_s: float,
        open_since: Callable[[], list[float]],
        max_holders: int = DEFAULT_MAX_SLOT_HOLDERS,
        read_gauges: bool = True,
        known: Found | None = None,
    ) -> None:
        self.host = host.rstrip("/")
        self.headers = dict(headers)
        self.model = model
        room = (max_model_len or HOLDER_MAX_TOKENS) - len(HOLDER_PROMPT.split()) - 16
        self.max_tokens = max(16, min(HOLDER_MAX_TOKENS, room))
        self.release_every_s = release_every_s
        self.open_since = open_since
        """When each stream of the run open now was sent (``time.monotonic()``)."""
        self.max_holders = max_holders
        self.read_gauges = read_gauges
        self.known = known
        """The concurrency known without a search (the run started the server with it), or None."""
        self.found: Found | None = None
        self.gave_up: str | None = None
        """Why no silence is made (a bound reached, holders refused); None while finding or holding."""
        self.longest_wait_s = 0.0
        """The longest silence before a first token of the run's streams sent while holding."""
        self.waited = 0
        """The run's streams that finished after waiting while holding (silent over a release period's half)."""
        self.not_needed = False
        """The server's own first token comes after a release period: it is silent enough unheld."""
        self.requests_sent = 0
        """Holder requests sent: the server counts them among its own (its metrics), the run does not."""
        self._holders: list[gevent.Greenlet] = []
        self._main: gevent.Greenlet | None = None
        self._ignore_eos = True
        self._failures = 0
        self._last_failure = ""
        self._holding_since: float | None = None
        self._stopped = False
        self._period_finished = 0
        self._period_waited = 0
        self._held_at_end = 0
        self._started = 0.0
        self._found_after_s = 0.0

    @property
    def making_silence(self) -> bool:
        """Started and not given up (finding, holding, or ended with the test): the run's own streams
        need not be lengthened to queue."""
        return self._main is not None and self.gave_up is None and not self.not_needed

    def start(self) -> None:
        if self._main is None:
            self._started = time.monotonic()
            self._main = gevent.spawn(self._run)

    def stop(self) -> str | None:
        """End every holder and the search; the closing line (said too), None when nothing was held."""
        if self._stopped:
            return None
        self._stopped = True
        if self._main is not None:
            self._main.kill(block=True)
        self._held_at_end = len(self._holders)
        self._shrink_to(0)
        if self.found is None or self.gave_up is not None or self._holding_since is None:
            return None
        held = self._held_at_end
        adjusted = "" if held == self.found.concurrency else f", adjusted to {held} by the waits seen"
        line = (
            f"sse-soak: silence by queueing: held {held} streams (concurrency {self.found.concurrency} found from "
            f"{self.found.how}{adjusted}, {self.requests_sent} holder requests sent, not recorded); {self.waited} "
            f"streams waited, silent up to {self.longest_wait_s:.2f} s before their first token"
        )
        if not self.waited:
            shortest = math.ceil(self._found_after_s + 3 * self.release_every_s)
            line += (
                f"; finding the concurrency took {self._found_after_s:.1f} s and no queued stream finished "
                f"before the end: run at least {shortest} s"
            )
        say(line)
        return line

    def note(self, silence_s: float | None, start_time: float) -> None:
        """A stream of the run finished: counted for the holders' adjustment, and its wait when it
        was sent while holding."""
        if self._holding_since is None:
            return
        self._period_finished += 1
        waited = silence_s is not None and silence_s >= self.release_every_s / 2
        self._period_waited += waited
        if silence_s is None or start_time < self._holding_since:
            return
        self.waited += waited
        self.longest_wait_s = max(self.longest_wait_s, silence_s)

    # -- the search, then the holding --------------------------------------------------------------
    def _run(self) -> None:
        if self._probe_waits(self.release_every_s):  # before any holder: the server's own first token
            self.not_needed = True
            say(
                f"sse-soak: silence by queueing not needed: the server's first token took over "
                f"{self.release_every_s:g} s on its own; no slot is held"
            )
            return
        try:
            found = self.known if self.known is not None else self._find()
        except Exception as exc:  # a bug of ours: the run goes on, without made silence, saying so
            self._give_up(f"finding the server's concurrency failed: {type(exc).__name__}: {exc}")
            return
        if found is None:
            return
        self.found = found
        self._set_to(found.concurrency)
        self._holding_since = time.time()
        self._found_after_s = time.monotonic() - self._started
        say(
            f"sse-soak: silence by queueing: found concurrency {found.concurrency} from {found.how}; holding "
            f"{len(self._holders)} streams and releasing slots to the run's streams once they waited "
            f"{self.release_every_s:g} s in the queue, silent"
        )
        last_release: float | None = None
        while self.gave_up is None:
            gevent.sleep(RELEASE_CHECK_S)
            now = time.monotonic()
            waiting = [sent for sent in self.open_since() if last_release is None or sent > last_release]
            if not waiting or now - min(waiting) < self.release_every_s:
                continue  # no stream queued since the last release has waited its period yet
            if last_release is not None:
                self._adjust()
            self._release_oldest(len(waiting))
            last_release = time.monotonic()

    def _adjust(self) -> None:
        """After a release, the run's queued streams took the freed slots: one holder more
        when streams finished without waiting (a slot was left to them), one fewer when none finished
        while some are open (a holder queued ahead of them). Bounded by ``max_holders`` and 1."""
        finished, waited = self._period_finished, self._period_waited
        self._period_finished = self._period_waited = 0
        if finished and not waited and len(self._holders) < self.max_holders:
            self._grow_to(len(self._holders) + 1)
        elif not finished and self.open_since() and len(self._holders) > 1:
            self._shrink_to(len(self._holders) - 1)

    def _find(self) -> Found | None:
        deadline = time.monotonic() + FIND_BOUND_S
        gauges = self._gauges() if self.read_gauges else None
        target = 1
        lower = 0  # holders known not to fill the server, all running
        while True:
            self._grow_to(target)
            if self.gave_up is not None:
                return None
            if gauges is not None:
                full = self._full_by_gauges(target, deadline)
                if full is not None:
                    # releases close the oldest holders, sent in earlier steps and running; the last
                    # step's (some queued among the run's streams) are the newest, trimmed first
                    return Found(full, f"the server's gauges ({RUNNING} while {WAITING} > 0)")
                lower = target
            elif self._probe_waits():
                return self._bisect(lower, target)
            else:
                lower = target
            if time.monotonic() > deadline:
                self._give_up(
                    f"the server did not fill with {target} slot holders within {FIND_BOUND_S:g} s, the bound "
                    "on finding its concurrency"
                )
                return None
            if target >= self.max_holders:
                self._give_up(
                    f"the server ran {target} slot holders and the run's streams without queueing any: "
                    f"{self.max_holders} is the bound on slot holders (--max-slot-holders)"
                )
                return None
            target = min(self.max_holders, target * (GAUGE_STEP if gauges is not None else 2))

    def _full_by_gauges(self, holders: int, deadline: float) -> int | None:
        """The concurrency once the gauges show a queue that stays: requests waiting and as many
        running for ``FULL_STABLE_S`` (a busy server updates them once per step, and takes its time
        to read many requests: no need to count every holder). None once every holder runs and none
        waits (not full yet), or at ``deadline``."""
        stable_since: float | None = None
        running_then = -1.0
        while time.monotonic() < deadline:
            reading = self._gauges()
            if reading is None:
                return None
            running, waiting = reading
            now = time.monotonic()
            if waiting == 0 and running >= holders:
                return None
            if waiting > 0 and running == running_then and stable_since is not None:
                if now - stable_since >= FULL_STABLE_S:
                    return int(running)
            else:
                stable_since, running_then = (now, running) if waiting > 0 else (None, -1.0)
            gevent.sleep(SCRAPE_EVERY_S)
        return None

    def _bisect(self, lower: int, upper: int) -> Found:
        """The fewest holders that fill the server lie in (lower, upper]: bisect by closing holders."""
        while upper - lower > 1:
            middle = (lower + upper) // 2
            self._set_to(middle)
            if self._probe_waits():
                upper = middle
            else:
                lower = middle
        concurrency = upper  # the run's streams are short while holders hold: a probe waits little behind them
        why = "no vLLM gauges at /metrics" if self.read_gauges else "--no-server-metrics"
        return Found(concurrency, f"a ramp that watched first-token waits ({why})")

    def _give_up(self, why: str) -> None:
        if self._stopped or self.gave_up is not None:
            return
        self.gave_up = why
        self._shrink_to(0)
        say(printable(f"sse-soak: silence by queueing not made: {why}; streams that needed it are unjudged"))

    # -- the server's view ----------------------------------------------------------------------
    def _gauges(self) -> tuple[float, float] | None:
        """vLLM's running and waiting gauges, summed over engines; None without them."""
        try:
            rows = gevent.get_hub().threadpool.apply(fetch_samples, (self.host + "/metrics", self.headers))
        except ScrapeError:
            return None
        values: dict[str, float] = {}
        for name, value in zip(rows["name"], rows["value"], strict=True):
            if name in (RUNNING, WAITING):
                values[name] = values.get(name, 0.0) + value
        if RUNNING not in values or WAITING not in values:
            return None
        return values[RUNNING], values[WAITING]

    def _client(self, read_timeout: float | None) -> httpx.Client:
        timeout = httpx.Timeout(10.0, read=read_timeout)
        return httpx.Client(base_url=self.host, headers=self.headers, timeout=timeout, verify=client_context())

    def _probe_waits(self, wait_s: float = PROBE_WAIT_S) -> bool:
        """A one-token stream got no first token within ``wait_s`` (its connection then closed)."""
        gevent.sleep(RAMP_SETTLE_S)
        body = {"model": self.model, "prompt": HOLDER_PROMPT, "max_tokens": 1, "stream": True}
        timer = gevent.Timeout(wait_s)
        try:
            with self._client(None) as client, timer, client.stream("POST", "/v1/completions", json=body) as response:
                if response.status_code == 200:
                    next((line for line in response.iter_lines() if line.startswith("data:")), None)
                return False  # a first token, or an answer without one: not a wait
        except gevent.Timeout as fired:
            if fired is not timer:
                raise
            return True
        except httpx.HTTPError:
            return False

    # -- the holders ----------------------------------------------------------------------------
    def _set_to(self, count: int) -> None:
        self._grow_to(count)
        self._shrink_to(count)

    def _grow_to(self, count: int) -> None:
        while len(self._holders) < min(count, self.max_holders):
            self._holders.append(gevent.spawn(self._hold))

    def _shrink_to(self, count: int) -> None:
        """Close the newest holders (those the server queued last) down to ``count``."""
        while len(self._holders) > count:
            self._holders.pop().kill(block=True)

    def _release_oldest(self, waiting: int) -> None:
        """Close the oldest holders, one per stream of the run ``waiting``, and send as many anew at
        the queue's tail: their slots pass to the streams waiting before them, at once (one slot
        would pass them on one after the other, each waiting for the ones before it)."""
        count = min(len(self._holders), max(1, waiting))
        released, self._holders = self._holders[:count], self._holders[count:]
        gevent.killall(released, block=True)
        self._grow_to(len(self._holders) + count)

    def _hold(self) -> None:
        """Hold one slot for as long as the server generates, again and again until killed."""
        with self._client(None) as client:
            while True:
                sent = time.monotonic()
                body = {"model": self.model, "prompt": HOLDER_PROMPT, "max_tokens": self.max_tokens, "stream": False}
                if self._ignore_eos:
                    body["ignore_eos"] = True
                self.requests_sent += 1
                try:
                    status = client.post("/v1/completions", json=body).status_code
                except httpx.HTTPError as exc:
                    status, why = None, f"{type(exc).__name__}"
                else:
                    why = f"HTTP {status}"
                if status != 200:
                    self._failed(status, why)
                took = time.monotonic() - sent
                gevent.sleep(max(0.0, HOLDER_MIN_S - took))
                self._to_the_tail(cast(gevent.Greenlet, gevent.getcurrent()))

    def _to_the_tail(self, holder: gevent.Greenlet) -> None:
        """A holder sends again at the queue's tail: the newest, last to be released."""
        if holder in self._holders:
            self._holders.remove(holder)
            self._holders.append(holder)

    def _failed(self, status: int | None, why: str) -> None:
        if status is not None and 400 <= status < 500 and status != 429:
            if self._ignore_eos:
                self._ignore_eos = False  # a server that refuses vLLM's ignore_eos: holders ask without it
                return
            if self.max_tokens > 16:
                self.max_tokens = max(16, self.max_tokens // 2)  # a context shorter than /v1/models said
                return
        self._failures += 1
        self._last_failure = why
        if self._failures >= HOLDER_FAILURES and self.gave_up is None:
            gevent.spawn(self._give_up, f"the server answered {self._failures} slot holders with errors ({why})")


def release_period(hold_s: float, proxy_read_timeout: float | None, keep_alive_interval: float | None) -> float:
    """How long a stream is to wait: the scenario's ``hold_s``, at least 1.5 times the proxy's read
    timeout (when a proxy stands in front) and 3 keep-alive intervals (when known), in whole tenths."""
    wanted = max(hold_s, 1.5 * (proxy_read_timeout or 0.0), 3.0 * (keep_alive_interval or 0.0))
    return math.ceil(wanted * 10) / 10
