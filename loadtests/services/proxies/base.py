"""What a proxy kind is: the one type every ``--proxy`` value is an instance of.

A kind holds all that the harness knows of one proxy or gateway: the value ``--proxy`` takes, its
place among the choices, the name a line gives it, how a response names it (for
``loadtests.judge.causes``), what it was measured to do to keep-alive comments and read timeouts,
whether it can listen off loopback, and how it starts. Its module in this package (``KIND``) is its
only home.

What a kind does with ``--proxy-read-timeout`` is its ``read_timer``: the timeout it really runs
(Apache and Squid take whole seconds: 1.5 s runs as 2 s) and the silences after which its cut may
land (the window). The gates, the causes, every line, summary.json and report.html read that one
``ReadTimer``, never the figure asked.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from loadtests.services.child import ChildService

EARLY_FLOOR_S = 0.25
"""The least a silence may fall short of the read timeout and still count: HAProxy's ~0.2 s hold."""
EARLY_SHARE = 0.15
"""...or this share of the read timeout, when larger (1.70 s for 2 s)."""
COARSE_TICK_S = 1.0
"""A whole-second timer's tick: a proxy that ticks so may cut up to one tick early and two late."""


def whole_seconds(seconds: float) -> int:
    """A timeout as a proxy that takes whole seconds runs it: rounded up, at least 1 (never shorter)."""
    return max(1, math.ceil(seconds))


@dataclass(frozen=True)
class ReadTimer:
    """The read timeout a proxy runs for the one asked of it, and the window of silences after which
    its cut counts as that timer firing: ``runs_s - early_s`` to ``runs_s + late_s``. The harness sees
    a silence late, never early, so the window reaches below the timeout (HAProxy's held writes land
    its cuts there); a whole-second timer (Squid) cuts up to a tick early and two late."""

    asked_s: float
    """``--proxy-read-timeout`` (or the gate's read timeout), as given."""
    runs_s: float
    """The timeout in force: ``asked_s``, or rounded up to whole seconds by a proxy that takes only those."""
    early_s: float
    late_s: float
    proxy: str | None = None
    """The proxy's name as a line gives it; None for a proxy the run cannot name."""
    rounded: bool = False
    """The proxy takes whole seconds only (``runs_s`` is ``asked_s`` rounded up)."""
    coarse: bool = False
    """The proxy ticks its timer in whole seconds (the window is a tick early, two late)."""

    @property
    def window(self) -> tuple[float, float]:
        return self.runs_s - self.early_s, self.runs_s + self.late_s

    def describe(self) -> str:
        """How every line names the timer: ``a 2 s read timeout`` for one run as asked, else whose
        and why: ``Apache's 2 s read timeout (1.5 s asked: Apache takes whole seconds)``, ``Squid's
        2 s read timeout (its timer ticks in whole seconds)``."""
        notes = []
        if self.runs_s != self.asked_s:
            notes.append(f"{self.asked_s:g} s asked: {self.proxy or 'the proxy'} takes whole seconds")
        if self.coarse:
            notes.append("its timer ticks in whole seconds")
        if not notes:
            return f"a {self.runs_s:g} s read timeout"
        whose = f"{self.proxy}'s" if self.proxy else "the proxy's"
        return f"{whose} {self.runs_s:g} s read timeout ({'; '.join(notes)})"

    def as_dict(self) -> dict[str, Any]:
        """The timer as summary.json's ``causes.proxy_timeouts`` holds it."""
        return {
            "read_timeout_s": self.runs_s,
            "read_timeout_asked_s": self.asked_s,
            "window_s": [round(value, 3) for value in self.window],
            "timer_of": self.proxy,
        }


def plain_timer(asked: float, proxy: str | None = None, *, rounded: bool = False, coarse: bool = False) -> ReadTimer:
    """The timer of a proxy asked for ``asked`` seconds: it runs them (rounded up to whole seconds
    when ``rounded``), and its window is that less or more ``max(EARLY_FLOOR_S, EARLY_SHARE *
    timeout)``, or, for a timer that ticks in whole seconds (``coarse``), at least a tick early and
    two late. The one rule of a window; ``ProxyKind.read_timer`` applies it to a kind."""
    runs = float(whole_seconds(asked)) if rounded else asked
    allowance = max(EARLY_FLOOR_S, EARLY_SHARE * runs)
    early, late = allowance, allowance
    if coarse:
        early, late = max(allowance, COARSE_TICK_S), max(allowance, 2 * COARSE_TICK_S)
    return ReadTimer(asked, runs, early, late, proxy, rounded, coarse)


@dataclass(frozen=True)
class Front:
    """What a proxy is started with: the URL it fronts, its read timeout in seconds, the server's
    API key (which a gateway must send on) and the address the server listens on (where a proxy that
    is not ``loopback_only`` listens too)."""

    upstream: str
    read_timeout: float
    api_key: str | None = None
    listen_host: str = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class ProxyKind(ABC):
    """One kind of proxy the run can put in front of the server. Invariant: ``name`` and ``order``
    are unique among the registered kinds (``loadtests.services.proxies``)."""

    name: str
    """The value ``--proxy`` takes."""
    order: int
    """Its place among ``--proxy``'s choices (ascending)."""
    display_name: str | None
    """How a line names it (``the embedded proxy``, ``HAProxy``); None for ``none``, which is no proxy."""
    recognised_by: str | None = None
    """A regular expression (case-insensitive) that finds it in a response's ``Server`` or ``Via``
    header or error body, so that a cause can name it; None when a response never names it."""
    recognition_rank: int = 0
    """When one header or body names several proxies, the one of lowest rank is named."""
    withholds_keep_alive: bool = False
    """Measured to strip SSE comments and hold the headers until the first token."""
    coarse_timer: bool = False
    """Measured to tick its read timeout in whole seconds: it may cut up to a tick early, two late."""
    whole_seconds: bool = False
    """It takes its read timeout in whole seconds only (a fraction is rounded up)."""
    own_error: str | None = None
    """A regular expression (case-insensitive) that finds an error message it wrote itself, by its
    body's shape (LiteLLM's ``litellm.<Exception>: ...``), not one it only passed on; None when it
    writes none a run can tell from the server's."""
    upstream_causes: tuple[tuple[str, str], ...] = ()
    """For its own errors: patterns (case-insensitive) of what its message says happened upstream,
    each with the words a line gives it, the first match winning. An error of its own that matches
    none relays the server's own error (the server's, passed on in its words)."""
    merges_writes: bool = False
    """Measured to hold and merge writes as the run configures it (HAProxy without ``option
    http-no-delay``: 50 ms token gaps arrive merged, the first token ~0.2 s late), so the gaps and
    first-token times a client sees through it are its view, not the server's."""
    loopback_only: bool = True
    """It listens on 127.0.0.1 only, whatever ``--server-bind`` says."""
    described: str = ""
    """What ``--proxy``'s help says of it, after its name (``Debian's package``)."""
    read_timeout_setting: str = ""
    """Which of its own settings ``--proxy-read-timeout`` sets, in its words; empty when it has none."""

    def available(self) -> tuple[bool, str]:
        """Whether the run can start it, and a sentence why not (how to make it so); checked before
        the run starts anything. Starts nothing."""
        return True, ""

    def read_timer(self, asked: float) -> ReadTimer:
        """The timeout it runs when asked for ``asked`` seconds, and its window (``ReadTimer``): the
        one figure the gates, causes and lines use."""
        return plain_timer(asked, self.display_name, rounded=self.whole_seconds, coarse=self.coarse_timer)

    def timeout_notes(self, read_timeout: float) -> list[str]:
        """What the run should say about how it takes ``read_timeout`` (nothing when exactly)."""
        timer = self.read_timer(read_timeout)
        if timer.runs_s == read_timeout:
            return []
        return [
            f"{self.name}: --proxy-read-timeout {read_timeout:g} runs as {timer.runs_s:g} s ({self.name} takes whole "
            "seconds)"
        ]

    @abstractmethod
    def start(self, front: Front) -> ChildService | None:
        """It, started in front of ``front.upstream`` and accepting connections; None if it is no
        proxy. A start that fails is a ``ServerStartError`` naming the cause."""
