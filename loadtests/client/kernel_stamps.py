"""When a read's bytes reached this machine: the kernel's receive time, not the time we read them.

One Locust process serves hundreds of streams on one event loop. While the loop is busy with
other streams, a frame waits in its socket's buffer, and a timestamp taken when the harness gets
round to reading it moves the frame later: a gap the server never made, written down as server
latency. Linux stamps every TCP segment as it arrives (``SO_TIMESTAMPNS``, software receive
timestamps, on any NIC and on loopback) and ``recvmsg`` hands back the stamp of the last segment
a read consumed. Frames timed that way keep their true gaps however late the loop reads them.

Invariants: a stamp is never later than the read that returned it (a stepped wall clock cannot
put a frame in the future); where no stamp comes (TLS sockets, whose records are decrypted above
the kernel; platforms without ``SO_TIMESTAMPNS``) there is none, and the caller uses the read's
own time. Frames that share
one read share its stamp, the last segment's: a loop late by more than the interval between two
frames still merges them, and the lag monitor (``loadtests.record.lag``) is what flags that.

Linux turns receive stamping on for the whole machine lazily: deferred work that runs soon after
the first socket asks, and off again once the last such socket closes. Segments that arrive in
between come unstamped (measured here: 287 of 300 first segments on sockets opened one at a time),
so ``keep_kernel_stamping_on`` holds one stamping socket for the life of the process.
"""

from __future__ import annotations

import atexit
import platform
import socket
import ssl
import struct
import sys
import time
from typing import Any

import gevent.ssl

_LINUX_SO_TIMESTAMPNS = 35
"""``SO_TIMESTAMPNS`` in Linux's asm-generic ``socket.h`` (the ``socket`` module does not export it);
alpha, mips, parisc and sparc number it otherwise, so only the machines below use it."""
_GENERIC_SOCKET_NUMBERS = {"x86_64", "amd64", "i686", "aarch64", "arm64", "armv7l", "riscv64", "s390x", "ppc64le"}
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", None) or (
    _LINUX_SO_TIMESTAMPNS if sys.platform == "linux" and platform.machine() in _GENERIC_SOCKET_NUMBERS else None
)
"""Also the ancillary message type the stamp comes back as (``SCM_TIMESTAMPNS`` equals it)."""
_TIMESPEC = struct.Struct("@ll")  # struct timespec: tv_sec, tv_nsec (both C longs on Linux)
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if SO_TIMESTAMPNS is not None else 0
TLS_SOCKETS = (ssl.SSLSocket, gevent.ssl.SSLSocket)
_stamping_holder: socket.socket | None = None


def stamp_arrivals(sock: Any) -> bool:
    """Ask the kernel to stamp what arrives on ``sock`` from now on; False where it cannot."""
    if SO_TIMESTAMPNS is None or isinstance(sock, TLS_SOCKETS):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def keep_kernel_stamping_on() -> bool:
    """Keep the kernel stamping arrivals from now until the process exits, so the first segments
    of a stream are stamped too; call early (the harness does when a run is set up). Idempotent;
    False where there are no stamps."""
    global _stamping_holder
    if _stamping_holder is None and SO_TIMESTAMPNS is not None:
        holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # never bound: it only holds the switch
        if stamp_arrivals(holder):
            _stamping_holder = holder
            atexit.register(holder.close)
        else:
            holder.close()
    return _stamping_holder is not None


def recv_stamped(sock: Any, size: int) -> tuple[bytes, float | None, float]:
    """Receive up to ``size`` bytes from a socket prepared by ``stamp_arrivals`` (waiting as
    ``recv`` does); returns them with the ``time.monotonic()`` at which the last segment read
    arrived (None when the kernel gave no stamp) and the one at which they were read."""
    data, ancillary, _flags, _address = sock.recvmsg(size, _ANCILLARY_BYTES)
    read_at = time.monotonic()
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
            return data, min(read_at, seconds + nanoseconds * 1e-9 - (time.time() - read_at)), read_at
    return data, None, read_at
