"""What a proxy kind is: the one type every ``--proxy`` value is an instance of.

A kind holds all that the harness knows of one proxy or gateway: the value ``--proxy`` takes, its
place among the choices, the name a line gives it, how a response names it (for
``loadtests.judge.causes``), what it was measured to do to keep-alive comments and read timeouts,
whether it can listen off loopback, and how it starts. Its module in this package (``KIND``) is its
only home.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from loadtests.services.child import ChildService


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

    def timeout_notes(self, read_timeout: float) -> list[str]:
        """What the run should say about how it takes ``read_timeout`` (nothing when exactly)."""
        return []

    @abstractmethod
    def start(self, front: Front) -> ChildService | None:
        """It, started in front of ``front.upstream`` and accepting connections; None if it is no
        proxy. A start that fails is a ``ServerStartError`` naming the cause."""
