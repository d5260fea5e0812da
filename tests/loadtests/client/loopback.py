"""Loopback TCP pairs for the client's tests: real kernel sockets, as the harness reads them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import gevent.socket

Pair = tuple[gevent.socket.socket, gevent.socket.socket]


@contextlib.contextmanager
def connection_pair() -> Iterator[Pair]:
    """(ours, theirs): a loopback TCP pair of gevent sockets, closed on exit."""
    with gevent.socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        theirs = gevent.socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    with ours, theirs:
        yield ours, theirs
