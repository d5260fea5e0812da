"""The body receiver: gevent's idle rule (one wait longer than the timeout fails) with one timer per
stream, never a throw outside its own wait, bytes and stamps as the socket gives them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import gevent
import gevent.socket
import pytest

from loadtests._arrival_clock import SO_TIMESTAMPNS, keep_kernel_stamping_on, stamp_arrivals
from loadtests._receiver import BodyReceiver

pytestmark = pytest.mark.fast

IDLE_S = 0.3
Pair = tuple[gevent.socket.socket, gevent.socket.socket]


@pytest.fixture
def connection() -> Iterator[Pair]:
    """(ours, theirs): a loopback TCP pair of gevent sockets, ours with the idle timeout set."""
    with gevent.socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        theirs = gevent.socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    ours.settimeout(IDLE_S)
    with ours, theirs:
        yield ours, theirs


def send_every(sock: gevent.socket.socket, pieces: list[bytes], interval: float) -> gevent.Greenlet:
    def send() -> None:
        for piece in pieces:
            gevent.sleep(interval)
            sock.sendall(piece)

    return gevent.spawn(send)


def receive_all(receiver: BodyReceiver, size: int) -> bytes:
    got = b""
    while len(got) < size:
        data, _stamp = receiver.receive(4096)
        assert data, "the peer closed early"
        got += data
    return got


def test_waits_shorter_than_the_timeout_never_time_out_however_long_the_stream(connection: Pair) -> None:
    """Six pieces 0.2 s apart: 1.2 s in all, four times the idle timeout; the timer re-arms."""
    ours, theirs = connection
    pieces = [b"data: %d\n\n" % i for i in range(6)]
    sender = send_every(theirs, pieces, 0.2)
    receiver = BodyReceiver(ours, stamped=False)
    try:
        assert receive_all(receiver, len(b"".join(pieces))) == b"".join(pieces)
    finally:
        receiver.close()
    sender.get(timeout=5)


def test_one_wait_longer_than_the_timeout_fails_with_timeout_error(connection: Pair) -> None:
    ours, theirs = connection
    theirs.sendall(b"data: 1\n\n")
    receiver = BodyReceiver(ours, stamped=False)
    try:
        assert receiver.receive(4096)[0] == b"data: 1\n\n"
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            receiver.receive(4096)
        assert IDLE_S <= time.monotonic() - began + 0.02 < IDLE_S + 0.25
    finally:
        receiver.close()


def test_time_outside_a_wait_never_counts_and_the_timer_never_throws_there(connection: Pair) -> None:
    """The reader is busy elsewhere (here: asleep) for three idle timeouts while the bytes wait in
    the kernel: its next receive returns them, and the sleep is not interrupted."""
    ours, theirs = connection
    receiver = BodyReceiver(ours, stamped=False)
    try:
        send_every(theirs, [b"a"], 0.05)
        assert receiver.receive(4096)[0] == b"a"  # the timer is armed by this first wait
        theirs.sendall(b"b")
        gevent.sleep(3 * IDLE_S)  # the timer comes due while no receive waits
        assert receiver.receive(4096)[0] == b"b"
    finally:
        receiver.close()


def test_a_closed_receiver_throws_nothing_later(connection: Pair) -> None:
    ours, theirs = connection
    receiver = BodyReceiver(ours, stamped=False)
    send_every(theirs, [b"a"], 0.05)
    assert receiver.receive(4096)[0] == b"a"
    receiver.close()
    gevent.sleep(2 * IDLE_S)  # a timer left running would throw TimeoutError into this greenlet


@pytest.mark.skipif(SO_TIMESTAMPNS is None, reason="no SO_TIMESTAMPNS on this platform")
def test_stamped_reads_come_with_the_kernels_arrival_time(connection: Pair) -> None:
    ours, theirs = connection
    assert keep_kernel_stamping_on()  # as the harness does at setup
    assert stamp_arrivals(ours)
    receiver = BodyReceiver(ours, stamped=True)
    try:
        deadline = time.monotonic() + 5
        while True:  # Linux turns stamping on lazily, soon after it is first asked: wait until it is on
            theirs.sendall(b":\n\n")
            if receiver.receive(4096)[1] is not None:
                break
            assert time.monotonic() < deadline, "the kernel never stamped an arrival"
        theirs.sendall(b"data: 1\n\n")
        sent = time.monotonic()
        gevent.sleep(0.1)  # the bytes lie in the kernel while this greenlet sleeps
        data, arrived = receiver.receive(4096)
        assert data == b"data: 1\n\n"
        assert arrived is not None and abs(arrived - sent) < 0.05  # not the read's time, 0.1 s later
    finally:
        receiver.close()


def test_the_peer_closing_reads_as_empty(connection: Pair) -> None:
    ours, theirs = connection
    receiver = BodyReceiver(ours, stamped=False)
    try:
        theirs.shutdown(2)
        assert receiver.receive(4096)[0] == b""
    finally:
        receiver.close()
