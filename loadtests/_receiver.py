"""Receiving a raw stream's body from its socket: one idle timer per stream, not one per wait.

gevent's socket arms a new ``Timeout`` (a Python object and a libev timer) for every wait when the
socket has a timeout, and the raw client's sockets have one: ``--client-idle-timeout``. At one
receive per frame, as slow streams have, that was 11% of the load generator's CPU (py-spy, 32
streams of a token every 10 ms). ``BodyReceiver`` reads the OS socket (non-blocking under gevent)
itself and waits on the socket's read watcher with no timer; one libev timer per stream does the
timing, lazily: a wait only notes when it began, and the timer, when it fires, ends the wait with
``TimeoutError`` if it has lasted the idle timeout, or re-arms itself for what is left. After a
short read (the kernel had no more) the next receive waits before it reads: gevent reads first, and
that read fails (a syscall and a raised ``BlockingIOError``) once per frame of a slow stream.

Invariants: the idle rule is gevent's own (a single wait for bytes longer than the timeout ends
the read with ``TimeoutError``; time spent outside a wait never counts); the timer never throws
into the reader outside one of this receiver's waits; ``close()`` stops it, and the caller calls
it once the body is read or abandoned. A TLS socket, whose bytes are decrypted above the OS
socket, is read through gevent's own socket methods, as before.
"""

from __future__ import annotations

from typing import Any

import gevent
from gevent.hub import get_hub

from loadtests import _arrival_clock as arrival_clock


class BodyReceiver:
    """Reads one response body from ``sock`` (a gevent socket) for the greenlet that creates it."""

    def __init__(self, sock: Any, stamped: bool) -> None:
        self._gevent_socket = sock
        self._stamped = stamped
        self._direct = not isinstance(sock, arrival_clock.TLS_SOCKETS)
        self._timeout: float | None = sock.timeout or None  # 0 or None: no idle limit
        self._hub = get_hub()
        self._reader = gevent.getcurrent()
        self._timer: Any = None
        self._waiting_since: float | None = None
        self._drained = False
        """The last read returned less than it asked for: the kernel had no more then."""

    def receive(self, size: int) -> tuple[bytes, float | None]:
        """Up to ``size`` bytes, waiting for at least one (``b""``: the peer closed), with their
        kernel arrival stamp (``loadtests._arrival_clock``) or None."""
        if not self._direct:  # TLS: never stamped (``stamp_arrivals`` refuses it)
            return self._gevent_socket.recv(size), None
        os_socket = self._gevent_socket._sock
        if self._drained:  # the last read took all there was: wait first, not after a failed read
            self._wait()
        while True:
            try:
                data, arrived = (
                    arrival_clock.recv_stamped(os_socket, size) if self._stamped else (os_socket.recv(size), None)
                )
            except BlockingIOError:
                self._wait()
                continue
            self._drained = len(data) < size
            return data, arrived

    def close(self) -> None:
        """Stop the idle timer; the receiver is not used again."""
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        self._waiting_since = None

    def _wait(self) -> None:
        loop = self._hub.loop
        if self._timeout is not None and self._timer is None:
            self._arm(self._timeout)
        self._waiting_since = loop.now()
        try:
            self._hub.wait(self._gevent_socket._read_event)
        finally:
            self._waiting_since = None

    def _arm(self, seconds: float) -> None:
        self._timer = self._hub.loop.timer(seconds)
        self._timer.start(self._expired)

    def _expired(self) -> None:
        """In the hub: the timer is due. Throws only into a wait that has lasted the timeout."""
        assert self._timeout is not None
        self._timer.close()
        since = self._waiting_since
        left = self._timeout if since is None else since + self._timeout - self._hub.loop.now()
        if since is not None and left <= 0:
            self._timer = None
            self._reader.throw(TimeoutError("timed out"))
            return
        self._arm(left)
