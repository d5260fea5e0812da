"""Reading every raw stream of a process in gevent's hub, each receive handed to its stream there.

A raw stream used to be read by its user's greenlet: every frame of a slow stream woke that
greenlet (the hub switched to it and back) only to read a few hundred bytes. Here the hub reads
each socket as it turns readable and hands the bytes (with their kernel arrival stamp,
``loadtests.client.kernel_stamps``) to that stream's ``on_read`` right there; the user's greenlet
sleeps until its body ends and wakes once. Against the greenlet reading its own body, this cut
the load generator's CPU per frame by 12-19% at 32 streams of a token every 10 ms (three
interleaved pairs) and by 20-31% at 1,000 to 15,000 slow streams, where the loop's lag p99 at
15,000 went from 22.6 to 8.5 ms (``bench/scale.py``).

How sockets are watched, by the timing resolution R (``BodyMux.set_resolution``,
``--timing-resolution-ms``):

- R = 0, the default: each body has its own libev io watcher (``loop.io(fd, READ)``), started
  by ``MuxedBody.read`` and closed when the body is unregistered, whose callback is
  ``MuxedBody.readable``: one receive per callback, every arrival read as it comes. libev keeps
  the sockets in its own epoll, so a wake is one ``epoll_wait`` and one ``recvmsg`` per ready
  socket. It replaced one nested epoll of every body, watched by one io watcher, which cost a
  second ``epoll_wait`` per wake (``poll(0)``) and its list of tuples. libev drops a stopped fd
  from its epoll lazily (from its code): a body's start costs one ``epoll_ctl`` (per request,
  never per frame), and bytes that come to a connection no one reads (the last chunk after
  ``[DONE]``) cost one wake and one ``epoll_ctl``. Measured 2026-12-07 on the shared 2-core box
  (load average 5-9: noisy), A/B alternating, medians: with the real harness (Locust,
  ``SSEUser``, the bundled server, 32 streams of a token every 10 ms, 8 s windows, 5 pairs) 39.8
  -> 34.7 us of CPU a frame (each side swung 24-42 us); the mux alone (32 loopback streams, a
  frame each every 10 ms spread over the tick, 8 pairs) 26.6 -> 24.8 us; at 1,000 streams of a
  frame every 0.5 s (4 pairs) 24.4 and 24.4 us, a tie within the noise. Under strace (the process
  slowed, so counts, not times): the mux alone, 2.0 ``epoll_wait`` a loop iteration with the
  nested epoll, 0.94 with the watchers, and no ``epoll_ctl`` per frame; a whole harness run (32
  streams of 200 tokens for 8 s, about 150 requests), 1.92 against 0.97 ``epoll_wait`` a loop
  iteration and 820 against 275 ``epoll_ctl`` (202 of them libev's ``EEXIST`` on a watcher started
  again on a socket it had not dropped: about one a request).
- R > 0: the bodies are registered in one epoll, watched by one io watcher, and read in passes.
  A pass (``BodyMux._pass``) reads every ready body through the same ``readable``, each until its
  socket is drained (a receive that fills the 4096-byte buffer is followed by another, up to
  ``_DRAIN_READS`` a pass, each handed to ``on_read`` in order, so bytes beyond 4 KiB never wait
  for the next pass and keep their own segments' stamps). After a pass that read anything, the
  watcher stops and one hub timer runs the next pass R later (every R while passes read): bytes
  arriving meanwhile wait in the kernel, stamped, and arrivals of one stream closer than R share
  one receive and the last segment's stamp. A pass that reads nothing stops the timer and starts
  the watcher again, so a quiet mux reads the first arrival at once, and an idle process does not
  wake every R. The epoll is what finds the ready sockets in one call at a timer's pass (per-body
  watchers would have to be stopped and started for every pass: an ``epoll_ctl`` per socket and a
  wake per lazily-dropped fd that receives). Stopping the one watcher costs one spurious wake and
  two ``epoll_ctl`` per busy spell. Every byte, stamp, frame and classification goes through the
  same code at every R; only the reads are fewer and larger, and a frame's ``wait`` (kernel to
  read) includes up to R (libev's timers round up to the millisecond: R + 1 ms at most, plus the
  loop's lag). Measured the same day, the mux alone (32 streams, a frame each every 10 ms, 3
  rounds alternating R, medians): R = 0 24.8 us a frame (3,200 wakes/s), 1 ms 22.2 us (926
  wakes/s), 2 ms 15.9 us (496), 5 ms 12.7 us (200); a stream's frames, 10 ms apart, never shared a
  read. With the real harness (3 rounds, frames per wake 1.1, 12, 16, 21; voluntary switches 155,
  103, 78, 64 per 1k frames) the CPU medians were 31.8, 32.6, 33.0 and 24.7 us: the busy box's
  noise hides all but 5 ms; gap error p50 0.003 ms at every R (p99 11-23 ms at every R, R = 0
  included: the box's load, not the resolution).

``BodyMux.reads`` counts receives and ``BodyMux.wakes`` the callbacks that made them (at R = 0
one a receive; at R > 0 one a pass that read anything): the bench's frames per read and per wake.

A TLS body is read the same way (``TLSReads``): the hub decrypts what arrived as the socket turns
readable, timed as it is read (OpenSSL reads the socket itself, so there is no kernel stamp), where
it used to be read by the user's greenlet, timed whenever the hub got round to switching to it.

Invariants:

- ``on_read`` runs in the hub, once per receive, in arrival order; whatever it raises ends that
  body and is raised in the reader's greenlet (never in the hub). It returns True when the body
  needs no more bytes.
- The idle rule is the client's (``--client-idle-timeout``), at every R: a body with no byte for
  the timeout ends with ``TimeoutError`` in the reader. Before saying so, the socket is read once
  more, so a stall of the load generator's own loop (or a pass not due yet) is never taken for
  the server's silence.
- A body is unregistered (its watcher closed or its fd out of the epoll, its timer stopped)
  before ``read()`` returns or raises, however it ends: the caller may then close or reuse the
  socket. What watches keeps the loop alive only while some body is registered.
- R = 0 arms no timer and reads once per callback; a change of R moves the bodies being read.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import time
import weakref
from collections.abc import Callable
from typing import Any

from gevent.hub import Waiter, get_hub
from gevent.monkey import get_original

from loadtests.client import kernel_stamps as arrival_clock
from loadtests.errors import InvalidValue, OutOfOrder

_Epoll: Any = get_original("select", "epoll")  # gevent's patched select has no epoll
_EPOLLIN: int = get_original("select", "EPOLLIN")
_READ = 1  # libev's EV_READ

OnRead = Callable[[bytes, float | None, float], bool]
"""``on_read(data, arrived, read_at)``: the bytes of one receive (``b""``: the peer closed), the
``time.monotonic()`` the kernel says they arrived at (None: no stamp) and the time they were read;
returns True when the body needs no more bytes."""

_muxes: weakref.WeakKeyDictionary[Any, BodyMux] = weakref.WeakKeyDictionary()

_DRAIN_READS = 16
"""Receives of one body per coalesced pass at most while each fills the buffer (64 KiB at 4 KiB):
what is left is read at the next pass, so one flooding body never holds the hub."""


def body_mux() -> BodyMux:
    """The mux of this process's hub, made on first use (after a fork, a new one that keeps the
    resolution the parent asked for)."""
    hub = get_hub()
    mux = _muxes.get(hub)
    if mux is None or mux.pid != os.getpid():
        resolution_s = 0.0 if mux is None else mux.resolution_s
        mux = _muxes[hub] = BodyMux(hub)
        mux.set_resolution(resolution_s)
    return mux


class BodyMux:
    """The OS sockets whose bodies are being read, each watched by libev (one io watcher a body), or,
    with a timing resolution R > 0, through one epoll read in passes at most every R."""

    def __init__(self, hub: Any) -> None:
        self.pid = os.getpid()
        self._loop = hub.loop
        self._bodies: dict[int, MuxedBody] = {}
        self.resolution_s = 0.0
        """The timing resolution asked for (``--timing-resolution-ms``, in seconds): 0 reads every
        arrival as it comes (one kernel stamp per receive); R > 0 reads in passes at most every R,
        so arrivals of one stream closer than R share one receive and its stamp, for fewer wakes."""
        self.reads = 0
        """Receives handed to an ``on_read`` (each with its stamp), the peer's close included."""
        self._passes = 0
        self._reads_in_passes = 0
        self._epoll: Any = None  # R > 0 only: the readiness of every body, polled by a pass
        self._epoll_watcher: Any = None  # R > 0: wakes the hub for the first arrival after a quiet spell
        self._pass_timer: Any = None  # R > 0: the next pass, every R while passes read something

    @property
    def wakes(self) -> int:
        """Callbacks that read: at R = 0 one per receive (each body's watcher reads once), at R > 0
        one per pass that read anything, however many receives it made; ``reads / wakes`` is the
        receives per wake, frames per wake the frames over it."""
        return self.reads - self._reads_in_passes + self._passes

    def set_resolution(self, seconds: float) -> None:
        """Read in passes at most every ``seconds`` (0: every arrival as it comes, the default).
        Bodies being read move to the new way at once."""
        if seconds < 0:
            raise InvalidValue(f"timing resolution must be >= 0 s, got {seconds}")
        if seconds == self.resolution_s:
            return
        for fd, body in self._bodies.items():
            self._unwatch(fd, body)
        if self._epoll is not None:
            self._epoll_watcher.close()
            self._pass_timer.close()
            self._epoll.close()
            self._epoll = self._epoll_watcher = self._pass_timer = None
        self.resolution_s = seconds
        if seconds:
            self._epoll = _Epoll()
            self._epoll_watcher = self._loop.io(self._epoll.fileno(), _READ)
            self._pass_timer = self._loop.timer(seconds, seconds)
            self._epoll_watcher.start(self._pass)
            self._hold_loop(False)
        for fd, body in self._bodies.items():
            self._watch(fd, body)

    @property
    def registered(self) -> int:
        """Bodies being read now."""
        return len(self._bodies)

    def add(self, fd: int, body: MuxedBody) -> None:
        if fd in self._bodies:
            raise OutOfOrder(f"descriptor {fd} is already being read")
        self._bodies[fd] = body
        self._watch(fd, body)

    def remove(self, fd: int) -> None:
        body = self._bodies.pop(fd, None)
        if body is not None:
            self._unwatch(fd, body)

    def _watch(self, fd: int, body: MuxedBody) -> None:
        if self._epoll is None:  # R = 0: libev watches the socket in its own epoll and calls its reader
            body.watcher = self._loop.io(fd, _READ)
            body.watcher.start(body.reader or body.readable)
        else:
            self._epoll.register(fd, _EPOLLIN)
            if len(self._bodies) == 1:
                self._hold_loop(True)

    def _unwatch(self, fd: int, body: MuxedBody) -> None:
        if self._epoll is None:
            if body.watcher is not None:
                body.watcher.close()
                body.watcher = None
        else:
            with contextlib.suppress(OSError):  # closed already: the epoll dropped it with its last reference
                self._epoll.unregister(fd)
            if not self._bodies:
                self._hold_loop(False)

    def _hold_loop(self, hold: bool) -> None:
        """R > 0: the watcher and the timer keep the loop alive only while some body is registered."""
        self._epoll_watcher.ref = hold
        self._pass_timer.ref = hold

    def _pass(self) -> None:
        """In the hub, R > 0 (the first arrival after a quiet spell, or the timer R after the last
        pass): read every ready body until drained, each receive through ``readable``; then, if
        anything was read, the next pass is the timer's (the watcher stopped: arrivals meanwhile
        wait in the kernel, stamped), else the watcher's again (the timer stopped)."""
        reads = self.reads
        bodies = self._bodies
        for fd, _events in self._epoll.poll(0, len(bodies) or 1):  # every ready one (the default stops at 1,023)
            body = bodies.get(fd)
            if body is not None:
                readable = body.reader or body.readable
                for _ in range(_DRAIN_READS):
                    if not readable():
                        break
        read = self.reads - reads
        if read:
            self._passes += 1
            self._reads_in_passes += read
            if self._epoll_watcher.active:
                self._epoll_watcher.stop()
                self._pass_timer.start(self._pass)  # every R from now, until a pass reads nothing
        elif self._pass_timer.active:
            self._pass_timer.stop()
            self._epoll_watcher.start(self._pass)


class TLSReads:
    """A gevent TLS socket's decrypted bytes, read in the hub: ``recv`` never waits (a record not
    whole yet is ``BlockingIOError``, as a plain socket's nothing-to-read), and takes with them what
    TLS had decrypted beyond them, which no epoll announces; the peer closing, with or without TLS's
    close_notify, is an empty read. Use it as a context manager: inside, the socket's gevent timeout
    is 0 (so gevent raises instead of waiting); ``idle_timeout`` is the one it had, restored on exit
    (the connection may go back to the pool)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.idle_timeout: float | None = sock.timeout

    def __enter__(self) -> TLSReads:
        self._sock.settimeout(0.0)
        return self

    def __exit__(self, *_: object) -> None:
        self._sock.settimeout(self.idle_timeout)

    def fileno(self) -> int:
        return int(self._sock.fileno())

    def recv(self, size: int) -> bytes:
        sock = self._sock
        try:
            data: bytes = sock.read(size)
            while data and sock.pending():
                data += sock.read(sock.pending())
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        return data


class MuxedBody:
    """One response body read in the hub: ``read()`` blocks its caller until ``on_read`` is done."""

    def __init__(self, os_socket: Any, stamped: bool, size: int, idle_timeout: float | None, on_read: OnRead) -> None:
        self._socket = os_socket
        self._fd = os_socket.fileno()
        self._stamped = stamped
        self._size = size
        self._idle_timeout = idle_timeout or None  # 0 or None: no idle limit
        self._on_read = on_read
        self._mux = body_mux()
        self._hub = get_hub()
        self._waiter: Waiter[None] = Waiter()
        self._timer: Any = None
        self._last_read = 0.0
        self._ended = False
        self.watcher: Any = None
        """R = 0: the libev io watcher that calls ``readable`` while the body is registered."""
        self.reader: Callable[[], bool] | None = None
        """What reads in place of ``readable`` when set (the compiled reader, ``_fastread.Reader``, same
        contract): the watcher's callback, a pass's and the idle check's read. Set before ``read()``;
        dropped when the body is unregistered (the reader refers back to this body)."""

    def read(self, read_first: bool = False) -> None:
        """Read until ``on_read`` returns True; raises what it raised, ``TimeoutError`` after the idle
        timeout, or what the run throws into the caller (the body is unregistered either way).
        ``read_first``: read once before waiting, for bytes the socket holds that no epoll announces
        (what TLS decrypted already)."""
        self._last_read = time.monotonic()
        self._mux.add(self._fd, self)
        try:
            if self._idle_timeout is not None:
                self._arm(self._idle_timeout)
            if read_first:
                (self.reader or self.readable)()
            self._waiter.get()
        finally:
            self._unregister()

    def readable(self) -> bool:
        """In the hub: one receive, handed to ``on_read``; the body ends when it says so or raises.
        True when the receive filled the buffer and the body goes on (more may be waiting)."""
        if self._ended:
            return False
        try:
            if self._stamped:
                data, arrived, read_at = arrival_clock.recv_stamped(self._socket, self._size)
            else:
                data, arrived, read_at = self._socket.recv(self._size), None, time.monotonic()
        except BlockingIOError:
            return False
        except Exception as exc:  # the connection's failure: raised in the reader, never in the hub
            self._end(exc)
            return False
        return self._took(data, arrived, read_at, self._on_read)

    def _took(self, data: bytes, arrived: float | None, read_at: float, on_read: Callable[..., bool]) -> bool:
        """``readable`` after its receive: counted, handed to ``on_read`` (``_on_read``, or the compiled
        reader's continuation of a read it did not finish); ends the body when it says so or raises."""
        try:
            self._mux.reads += 1
            self._last_read = read_at
            if on_read(data, arrived, read_at) or not data:
                self._end(None)
                return False
            return len(data) >= self._size
        except Exception as exc:  # ours or the stream's: raised in the reader, never in the hub
            self._end(exc)
            return False

    def _end(self, failure: BaseException | None) -> None:
        self._ended = True
        self._unregister()
        if failure is None:
            self._hub.loop.run_callback(self._waiter.switch, None)
        else:
            self._hub.loop.run_callback(self._waiter.throw, failure)

    def _unregister(self) -> None:
        self.reader = None  # it refers back to this body
        self._mux.remove(self._fd)
        if self._timer is not None:
            self._timer.close()
            self._timer = None

    def _arm(self, seconds: float) -> None:
        self._timer = self._hub.loop.timer(seconds)
        self._timer.start(self._idle_check)

    def _idle_check(self) -> None:
        """In the hub: the timer is due. Reads first (bytes waiting mean the loop, not the server, was
        late), then ends the body if no byte came for the timeout, or re-arms for what is left."""
        assert self._idle_timeout is not None
        self._timer.close()
        self._timer = None
        (self.reader or self.readable)()
        if self._ended:
            return
        left = self._last_read + self._idle_timeout - time.monotonic()
        if left <= 0:
            self._end(TimeoutError("timed out"))
        else:
            self._arm(left)
