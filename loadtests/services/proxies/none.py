"""``--proxy none``: nothing between the harness and the server (the default in front of ``--host``)."""

from __future__ import annotations

from dataclasses import dataclass

from loadtests.services.child import ChildService
from loadtests.services.proxies.base import Front, ProxyKind


@dataclass(frozen=True, kw_only=True)
class NoProxy(ProxyKind):
    """No proxy: it starts nothing, and the server's own address (``--server-bind``) stands."""

    def start(self, front: Front) -> ChildService | None:
        return None


KIND = NoProxy(name="none", order=0, display_name=None, loopback_only=False, described="no proxy")
