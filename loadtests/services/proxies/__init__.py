"""The proxy kinds ``--proxy`` can name, one module each, and the registry that finds them.

Each module of this package that defines ``KIND`` (a ``ProxyKind``, ``base``) is one kind: its
``--proxy`` value, place among the choices, display name, how a response names it, what it does to
keep-alive and read timeouts, and its start-up. The registry imports the package's modules once, on
first use, and keeps their kinds in ``order``: from it come ``--proxy``'s choices
(``loadtests.declare.options``), the names and rules of the causes (``loadtests.judge.causes``),
the checks before a run (``loadtests.run.controller``, ``loadtests.declare.scenario``) and the
start-up (``loadtests.services.stack``). Adding a kind is one module here (plus its tests); the real
proxies share ``real`` (a config in a fresh directory, a watched start, a port wait).

Invariant: names and orders are unique; ``none`` is first. Nothing here imports the stack, so the
stack imports the kinds and no kind imports it back. ``register`` adds a kind defined elsewhere (a
test's) until ``unregister``.
"""

from __future__ import annotations

import importlib
import pkgutil

from loadtests.errors import InvalidValue, UnknownName
from loadtests.services.child import ChildService
from loadtests.services.proxies.base import Front, ProxyKind, ReadTimer, plain_timer
from loadtests.services.proxies.real import RealProxy

__all__ = [
    "Front",
    "ProxyKind",
    "ReadTimer",
    "RealProxy",
    "find",
    "kind",
    "kinds",
    "names",
    "read_timer",
    "real_proxies",
    "register",
    "start_real_proxy",
    "timeout_notes",
    "unregister",
]

_registered: dict[str, ProxyKind] = {}
_discovered = False


def _discover() -> None:
    """Import every module of this package once and register the ``KIND`` each defines."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in pkgutil.iter_modules(__path__):
        found = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if isinstance(found, ProxyKind):
            register(found)


def register(new: ProxyKind) -> ProxyKind:
    """Add ``new`` to the kinds; a name or order already taken is an ``InvalidValue``."""
    _discover()
    for known in _registered.values():
        if known.name == new.name or known.order == new.order:
            raise InvalidValue(f"proxy kind {new.name!r} (order {new.order}) clashes with {known.name!r}")
    _registered[new.name] = new
    return new


def unregister(name: str) -> None:
    """Remove the kind named ``name`` (one ``register`` added)."""
    del _registered[name]


def kinds() -> tuple[ProxyKind, ...]:
    """Every registered kind, in ``order``."""
    _discover()
    return tuple(sorted(_registered.values(), key=lambda known: known.order))


def names() -> tuple[str, ...]:
    """``--proxy``'s choices, in order: ``none``, ``embedded``, the real proxies, ``litellm``."""
    return tuple(known.name for known in kinds())


def find(name: str | None) -> ProxyKind | None:
    """The kind ``--proxy name`` starts; None for a name no kind has."""
    _discover()
    return _registered.get(name) if name is not None else None


def kind(name: str) -> ProxyKind:
    """The kind ``--proxy name`` starts; an ``UnknownName`` (a ``KeyError``) for a name no kind has."""
    found = find(name)
    if found is None:
        raise UnknownName(f"no proxy kind {name!r}; known: {', '.join(names())}")
    return found


def real_proxies() -> dict[str, RealProxy]:
    """The real proxies (Debian's binaries) by name, in order."""
    return {known.name: known for known in kinds() if isinstance(known, RealProxy)}


def read_timer(name: str | None, asked: float) -> ReadTimer:
    """The timer kind ``name`` runs when asked for ``asked`` seconds (``ProxyKind.read_timer``); a
    plain one, exactly as asked, for a name no kind has (a proxy the run cannot name)."""
    found = find(name)
    return found.read_timer(asked) if found is not None else plain_timer(asked)


def timeout_notes(name: str, read_timeout: float) -> list[str]:
    """What the run says about how kind ``name`` takes ``read_timeout`` (nothing when exactly)."""
    return kind(name).timeout_notes(read_timeout)


def start_real_proxy(
    name: str, upstream: str, read_timeout: float, timeout: float = 30.0, no_delay: bool = False
) -> ChildService:
    """Real proxy ``name`` in front of ``upstream`` (``RealProxy.launch``)."""
    return real_proxies()[name].launch(upstream, read_timeout, timeout, no_delay)
