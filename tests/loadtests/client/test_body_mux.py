"""Bodies read in the hub: the client's idle rule (a loop stall never counts as the server's
silence), kernel arrival stamps, every way a body ends leaving nothing registered (each at the
default resolution and coalesced), and reads coalesced to a timing resolution."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import socket
import struct
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.socket
import pytest
from gevent.monkey import get_original
from geventhttpclient.response import HTTPParseError

from loadtests.client import raw_body
from loadtests.client.body_mux import BodyMux, MuxedBody, TLSReads, body_mux
from loadtests.client.kernel_stamps import SO_TIMESTAMPNS, keep_kernel_stamping_on, stamp_arrivals
from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.client.raw_body import RawBody
from loadtests.client.sse import SSEParser
from tests.conftest import compiled_reads
from tests.loadtests.client.certificates import self_signed
from tests.loadtests.client.loopback import Pair, connection_pair
from tests.loadtests.load.golden_reads import response_for

pytestmark = pytest.mark.fast

IDLE_S = 0.3
Read = tuple[bytes, float | None, float]
blocking_sleep = get_original("time", "sleep")
OsThread = get_original("threading", "Thread")
OsSocket = get_original("socket", "socket")


@contextlib.contextmanager
def process_mux(resolution_s: float = 0.0) -> Iterator[BodyMux]:
    """The process's mux at ``resolution_s``, set back to 0 after; the test leaves no body registered."""
    mux = body_mux()
    mux.set_resolution(resolution_s)
    try:
        yield mux
        assert mux.registered == 0
    finally:
        mux.set_resolution(0.0)


@pytest.fixture(params=[0.0, 0.05], ids=["per-arrival", "coalesced"])
def resolution(request: pytest.FixtureRequest) -> Iterator[BodyMux]:
    """The process's mux at each timing resolution (0: every arrival read as it comes; 50 ms: coalesced)."""
    with process_mux(request.param) as mux:
        yield mux


@pytest.fixture
def coalesced() -> Iterator[BodyMux]:
    """The process's mux, for a test to set a resolution on."""
    with process_mux() as mux:
        yield mux


@pytest.fixture
def connection() -> Iterator[Pair]:
    """(ours, theirs): a loopback TCP pair of gevent sockets."""
    with connection_pair() as pair:
        yield pair


class Collector:
    """An ``on_read`` that keeps every read and says the body ended once ``until`` bytes came."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.reads: list[Read] = []
        self.read = gevent.event.Event()
        """Set at each read (the test clears it to wait for the next)."""

    def __call__(self, data: bytes, arrived: float | None, read_at: float) -> bool:
        self.reads.append((data, arrived, read_at))
        self.read.set()
        return len(self.data) >= self.until

    @property
    def data(self) -> bytes:
        return b"".join(read[0] for read in self.reads)


def body(
    ours: gevent.socket.socket, on_read: Collector, idle_s: float | None = IDLE_S, stamped: bool = False
) -> MuxedBody:
    return MuxedBody(ours._sock, stamped, 4096, idle_s, on_read)  # type: ignore[attr-defined]  # gevent's stubs omit _sock


def send_every(sock: gevent.socket.socket, pieces: list[bytes], interval: float) -> gevent.Greenlet:
    def send() -> None:
        for piece in pieces:
            gevent.sleep(interval)
            sock.sendall(piece)

    return gevent.spawn(send)


@pytest.mark.usefixtures("resolution")
def test_pieces_closer_than_the_idle_timeout_never_time_out_however_long_the_body(connection: Pair) -> None:
    """Six pieces 0.2 s apart: 1.2 s in all, four times the idle timeout; the timer re-arms."""
    ours, theirs = connection
    pieces = [b"data: %d\n\n" % i for i in range(6)]
    sender = send_every(theirs, pieces, 0.2)
    collected = Collector(len(b"".join(pieces)))
    body(ours, collected).read()
    assert collected.data == b"".join(pieces)
    sender.get(timeout=5)


@pytest.mark.usefixtures("resolution")
def test_no_byte_for_the_idle_timeout_ends_the_read_with_timeout_error(connection: Pair) -> None:
    ours, theirs = connection
    theirs.sendall(b"data: 1\n\n")
    collected = Collector(1 << 20)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        body(ours, collected).read()
    assert IDLE_S <= time.monotonic() - began + 0.02 < IDLE_S + 0.25
    assert collected.data == b"data: 1\n\n"


@pytest.mark.usefixtures("resolution")
def test_a_stall_of_the_loop_is_never_taken_for_the_servers_silence(connection: Pair) -> None:
    """The loop is blocked for three idle timeouts while the next bytes wait in the kernel: the body
    reads them when the loop runs again, and ends by its own rule, not by a timeout."""
    ours, theirs = connection
    collected = Collector(2)

    def stall_after_the_first_byte() -> None:
        theirs.sendall(b"a")
        gevent.sleep(0.05)
        theirs.sendall(b"b")
        blocking_sleep(3 * IDLE_S)  # holds the whole loop: no greenlet, no watcher runs meanwhile

    staller = gevent.spawn(stall_after_the_first_byte)
    body(ours, collected).read()
    assert collected.data == b"ab"
    staller.get(timeout=5)


@pytest.mark.usefixtures("resolution")
def test_the_peer_closing_hands_over_an_empty_read_and_ends_the_body(connection: Pair) -> None:
    ours, theirs = connection
    theirs.sendall(b"x")
    theirs.shutdown(2)
    collected = Collector(1 << 20)
    body(ours, collected).read()
    assert collected.data == b"x"
    assert collected.reads[-1][0] == b""


@pytest.mark.usefixtures("resolution")
def test_what_on_read_raises_is_raised_in_the_reader_and_the_hub_goes_on(connection: Pair) -> None:
    ours, theirs = connection

    def refuse(data: bytes, arrived: float | None, read_at: float) -> bool:
        raise ValueError(f"refused {data!r}")

    theirs.sendall(b"bad")
    with pytest.raises(ValueError, match="refused b'bad'"):
        MuxedBody(ours._sock, False, 4096, IDLE_S, refuse).read()  # type: ignore[attr-defined]  # gevent's stubs omit _sock
    theirs.sendall(b"ok")  # the same socket reads again: nothing of the failed body is left registered
    collected = Collector(2)
    body(ours, collected).read()
    assert collected.data == b"ok"


@pytest.mark.usefixtures("resolution")
def test_a_reader_killed_mid_body_leaves_nothing_registered_nor_running(connection: Pair) -> None:
    ours, theirs = connection
    collected = Collector(1 << 20)
    reader = gevent.spawn(body(ours, collected).read)
    gevent.sleep(0)  # the reader runs until it waits for bytes, registered
    reader.kill(block=True)  # as Locust stops a user
    theirs.sendall(b"after")
    gevent.sleep(2 * IDLE_S)  # a body left registered would read, a timer left running would fire
    assert collected.reads == []
    later = Collector(5)
    body(ours, later).read()  # registering the same socket again is allowed
    assert later.data == b"after"


@pytest.mark.usefixtures("resolution")
def test_a_reader_waiting_on_bytes_from_outside_gevent_keeps_the_loop_alive(connection: Pair) -> None:
    """Nothing but the mux can wake the reader (the sender is an OS thread): the loop must not
    decide it would block forever."""
    ours, theirs = connection
    raw_theirs = OsSocket(fileno=os.dup(theirs.fileno()))  # the same connection, outside gevent
    raw_theirs.setblocking(True)

    def send_later() -> None:
        blocking_sleep(0.1)
        raw_theirs.sendall(b"late")

    sender = OsThread(target=send_later)
    sender.start()
    collected = Collector(4)
    try:
        body(ours, collected, idle_s=None).read()
    finally:
        sender.join()
        raw_theirs.close()
    assert collected.data == b"late"


@pytest.mark.skipif(SO_TIMESTAMPNS is None, reason="no SO_TIMESTAMPNS on this platform")
def test_stamped_reads_come_with_the_kernels_arrival_time(connection: Pair) -> None:
    ours, theirs = connection
    assert keep_kernel_stamping_on()  # as the harness does at setup
    assert stamp_arrivals(ours)
    deadline = time.monotonic() + 5
    while True:  # Linux turns stamping on lazily, soon after it is first asked: wait until it is on
        probe = Collector(3)
        theirs.sendall(b":\n\n")
        body(ours, probe, stamped=True).read()
        if probe.reads[-1][1] is not None:
            break
        assert time.monotonic() < deadline, "the kernel never stamped an arrival"

    def send_then_stall() -> None:
        theirs.sendall(b"data: 1\n\n")
        blocking_sleep(0.1)  # the bytes lie in the kernel while the loop is held

    collected = Collector(len(b"data: 1\n\n"))
    sent = time.monotonic()
    staller = gevent.spawn(send_then_stall)
    body(ours, collected, stamped=True).read()
    staller.get(timeout=5)
    data, arrived, read_at = collected.reads[0]
    assert data == b"data: 1\n\n"
    assert arrived is not None and abs(arrived - sent) < 0.05  # not the read's time, 0.1 s later
    assert read_at - arrived >= 0.09


@pytest.fixture
def tls_connection(connection: Pair, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """(ours, theirs) over TLS, as geventhttpclient's https connections are: gevent's TLS sockets,
    ours at timeout 0 as ``RawBody`` holds it while the hub reads (``TLSReads``)."""
    import gevent.ssl

    cert, key = self_signed(tmp_path)
    server = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cert)
    ours, theirs = connection
    accepting = gevent.spawn(server.wrap_socket, theirs, server_side=True)
    tls_ours = client.wrap_socket(ours, server_hostname="127.0.0.1")
    tls_theirs = accepting.get(timeout=10)
    with tls_ours, tls_theirs, TLSReads(tls_ours):
        yield tls_ours, tls_theirs


def tls_body(ours: Any, on_read: Collector) -> MuxedBody:
    return MuxedBody(TLSReads(ours), False, 4096, IDLE_S, on_read)


def test_a_tls_body_is_decrypted_in_the_hub_as_its_records_arrive(tls_connection: tuple[Any, Any]) -> None:
    ours, theirs = tls_connection
    pieces = [b"data: one\n\n", b"data: two\n\n", b"data: three\n\n"]
    sender = send_every(theirs, pieces, 0.05)
    collected = Collector(sum(map(len, pieces)))
    tls_body(ours, collected).read(read_first=True)
    sender.get(timeout=5)
    assert collected.data == b"".join(pieces)
    assert [read[0] for read in collected.reads] == pieces  # one read per record, each timed as it came
    assert all(arrived is None for _, arrived, _ in collected.reads)  # OpenSSL read the socket: no stamp
    reads_at = [read_at for _, _, read_at in collected.reads]
    assert reads_at == sorted(reads_at) and reads_at[-1] - reads_at[0] >= 0.09


def test_what_tls_decrypted_before_the_body_was_registered_is_read_without_waiting(
    tls_connection: tuple[Any, Any],
) -> None:
    """The headers' read can leave the rest of a record decrypted inside TLS, with nothing left in
    the kernel for an epoll to announce: it is read first, never waited for until the idle timeout."""
    ours, theirs = tls_connection
    theirs.sendall(b"H" * 10 + b"B" * 990)
    ours.settimeout(5.0)
    assert ours.read(10) == b"H" * 10
    ours.settimeout(0.0)
    assert ours.pending() == 990
    collected = Collector(990)
    with gevent.Timeout(5):  # the idle check would find them too, but only after the idle timeout (60 s)
        MuxedBody(TLSReads(ours), False, 4096, 60.0, collected).read(read_first=True)
    assert collected.data == b"B" * 990


@pytest.mark.usefixtures("resolution")
def test_a_tls_peer_gone_without_close_notify_is_an_empty_read(tls_connection: tuple[Any, Any]) -> None:
    ours, theirs = tls_connection
    theirs.sendall(b"x")
    theirs.shutdown(2)  # the TCP connection ends under TLS, as a killed server's does
    collected = Collector(1 << 20)
    tls_body(ours, collected).read(read_first=True)
    assert collected.data == b"x" and collected.reads[-1][0] == b""


def send_each_after_a_read(sock: gevent.socket.socket, pieces: list[bytes], collected: Collector) -> gevent.Greenlet:
    """Sends each piece once the reader has read what came before: arrivals never overlap a read."""

    def send() -> None:
        for piece in pieces:
            collected.read.clear()
            sock.sendall(piece)
            collected.read.wait(timeout=10)

    return gevent.spawn(send)


def test_at_the_default_resolution_each_arrival_is_its_own_read(connection: Pair) -> None:
    ours, theirs = connection
    assert body_mux().resolution_s == 0
    pieces = [b"data: %d\n\n" % i for i in range(5)]
    collected = Collector(len(b"".join(pieces)))
    reads, wakes = body_mux().reads, body_mux().wakes
    sender = send_each_after_a_read(theirs, pieces, collected)
    body(ours, collected).read()
    sender.get(timeout=5)
    assert [read[0] for read in collected.reads] == pieces
    assert (body_mux().reads - reads, body_mux().wakes - wakes) == (5, 5)


def test_coalesced_arrivals_within_the_resolution_share_one_read_of_every_body(coalesced: BodyMux) -> None:
    """R = 1 s: the first arrival on a quiet mux is read at once; what two bodies receive after it,
    within R, is read by the next pass, one receive each, in one wake (no idle timeout: its check
    would read before the pass)."""
    coalesced.set_resolution(1.0)
    with connection_pair() as (ours, theirs), connection_pair() as (ours2, theirs2):
        first, second = Collector(len(b"a:1 a:2 a:3")), Collector(len(b"b:1 b:2"))
        reads, wakes = coalesced.reads, coalesced.wakes

        def send() -> None:
            theirs.sendall(b"a:1")
            first.read.wait(timeout=10)  # the quiet mux's first read: the next pass is R after it
            for piece, sock in [(b" a:2", theirs), (b"b:1", theirs2), (b" a:3", theirs), (b" b:2", theirs2)]:
                sock.sendall(piece)

        sender = gevent.spawn(send)
        readers = [gevent.spawn(body(mine, seen, idle_s=None).read) for mine, seen in [(ours, first), (ours2, second)]]
        sender.get(timeout=10)
        for reader in readers:
            reader.get(timeout=10)
        assert [read[0] for read in first.reads] == [b"a:1", b" a:2 a:3"]
        assert [read[0] for read in second.reads] == [b"b:1 b:2"]
        assert first.reads[1][2] == pytest.approx(second.reads[0][2], abs=0.5)  # one pass read both
        assert (coalesced.reads - reads, coalesced.wakes - wakes) == (3, 2)


def test_a_quiet_coalescing_mux_reads_the_first_arrival_without_waiting_the_resolution(coalesced: BodyMux) -> None:
    coalesced.set_resolution(5.0)
    with connection_pair() as (ours, theirs):
        collected = Collector(3)
        reader = gevent.spawn(body(ours, collected, idle_s=None).read)
        gevent.sleep(0)  # registered, waiting
        sent = time.monotonic()
        theirs.sendall(b"one")
        reader.get(timeout=10)
        assert collected.data == b"one"
        assert collected.reads[0][2] - sent < 2.5  # read as it came, not at a pass 5 s later


def test_a_coalesced_pass_reads_a_body_until_its_socket_is_drained(coalesced: BodyMux) -> None:
    """More than a receive's 4096 bytes wait at the pass: every one is read in that pass, in order,
    one receive each handed over (nothing is left for a pass R later)."""
    coalesced.set_resolution(1.0)
    with connection_pair() as (ours, theirs):
        payload = bytes(range(256)) * 40  # 10,240 bytes
        collected = Collector(1 + len(payload))
        reads, wakes = coalesced.reads, coalesced.wakes

        def send() -> None:
            theirs.sendall(b"<")
            collected.read.wait(timeout=10)
            theirs.sendall(payload)

        sender = gevent.spawn(send)
        body(ours, collected, idle_s=None).read()
        sender.get(timeout=5)
        assert collected.data == b"<" + payload
        assert [len(read[0]) for read in collected.reads] == [1, 4096, 4096, 2048]
        assert coalesced.wakes - wakes == 2 and coalesced.reads - reads == 4


def test_changing_the_resolution_while_a_body_is_read_keeps_reading_it(connection: Pair, coalesced: BodyMux) -> None:
    ours, theirs = connection
    collected = Collector(len(b"abc"))

    def send() -> None:
        for piece, resolution_s in [(b"a", 0.05), (b"b", 0.0), (b"c", None)]:
            collected.read.clear()
            theirs.sendall(piece)
            collected.read.wait(timeout=10)
            if resolution_s is not None:
                coalesced.set_resolution(resolution_s)

    sender = gevent.spawn(send)
    body(ours, collected).read()
    sender.get(timeout=5)
    assert collected.data == b"abc"


@pytest.mark.parametrize("resolution_s", [0.0, 0.01])
def test_many_bodies_leave_no_descriptor_nor_watcher_behind(resolution_s: float, coalesced: BodyMux) -> None:
    coalesced.set_resolution(resolution_s)
    loop = gevent.get_hub().loop

    def read_bodies(count: int) -> None:
        for _ in range(count):
            with connection_pair() as (ours, theirs):
                theirs.sendall(b"x")
                body(ours, Collector(1)).read()
            with connection_pair() as (ours, theirs):  # and one that ends by its reader killed
                reader = gevent.spawn(body(ours, Collector(1)).read)
                gevent.sleep(0)
                reader.kill(block=True)

    read_bodies(5)  # what the first bodies make once (the mux's own) is made before counting
    descriptors, active = len(os.listdir("/proc/self/fd")), loop.activecnt
    read_bodies(200)
    assert coalesced.registered == 0
    assert len(os.listdir("/proc/self/fd")) == descriptors
    assert loop.activecnt == active


def test_a_coalesced_pass_reads_every_ready_body_beyond_a_thousand(coalesced: BodyMux) -> None:
    """1,100 bodies with bytes waiting at one pass (Python's epoll hands 1,023 by default): one
    wake reads them all."""
    coalesced.set_resolution(1.0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * 1100 + 100  # both ends of each connection, and what the process holds already
    with contextlib.ExitStack() as stack:
        if soft != resource.RLIM_INFINITY and soft < needed:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))  # a lower hard limit fails here, saying so
            stack.callback(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        pairs = [stack.enter_context(connection_pair()) for _ in range(1100)]
        collected = [Collector(2) for _ in pairs]
        pairs[0][1].sendall(b"<")  # the quiet mux's first read: the next pass is R after it
        bodies = [body(ours, seen, idle_s=None) for (ours, _), seen in zip(pairs, collected, strict=True)]
        readers = [gevent.spawn(each.read) for each in bodies]
        collected[0].read.wait(timeout=10)
        wakes = coalesced.wakes
        for (_, theirs), seen in zip(pairs, collected, strict=True):
            theirs.sendall(b">" if seen is collected[0] else b"<>")
        for reader in readers:
            reader.get(timeout=10)
        assert coalesced.wakes - wakes == 1
        assert all(seen.data.endswith(b">") for seen in collected)


# --- a raw body read to its end on each read path (MuxedBody.readable, or the compiled Reader) ----

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


TOKENS = [chunk(b'data: {"choices":[{"delta":{"content":"t%d"}}]}\n\n' % i) for i in range(4)]


class RawMuxed:
    """A chunked event stream's ``RawBody`` over a real ``FramedResponse`` (head read), read in the hub
    from ``ours`` as ``RawBody.read_to_end`` reads it: stamped, through ``read_path``'s reader."""

    def __init__(self, ours: gevent.socket.socket, read_path: str, idle_s: float | None = IDLE_S) -> None:
        assert keep_kernel_stamping_on() or SO_TIMESTAMPNS is None
        raw = response_for(CHUNKED_HEAD)
        self.tracker = StreamTracker(RequestPlan("end-path", "chat:end-path", "chat"), time.time())
        self.body = RawBody(raw, SSEParser(1 << 20), self.tracker, time.monotonic())
        sock = ours._sock  # type: ignore[attr-defined]  # gevent's stubs omit _sock
        self.muxed = MuxedBody(sock, stamp_arrivals(sock), 4096, idle_s, self.body.take_read)
        self.reader: Any = None
        if read_path == "compiled":
            self.reader = self.muxed.reader = compiled_reads().Reader(self.body, self.muxed)

    def kinds(self) -> list[str]:
        return [record[1] for record in self.tracker.frames]


def send_each_after_a_frame(sock: gevent.socket.socket, pieces: list[bytes], tracker: StreamTracker) -> gevent.Greenlet:
    """Sends each piece once the tracker has taken a frame from the one before (so each arrives in a
    read of its own)."""

    def send() -> None:
        for index, piece in enumerate(pieces):
            frames = len(tracker.frames)
            sock.sendall(piece)
            if index == len(pieces) - 1:
                return
            deadline = time.monotonic() + 10
            while len(tracker.frames) == frames and time.monotonic() < deadline:
                gevent.sleep(0.001)

    return gevent.spawn(send)


@pytest.mark.usefixtures("resolution")
def test_a_raw_body_read_to_done_records_each_frame_and_unregisters(connection: Pair, read_path: str) -> None:
    ours, theirs = connection
    read = RawMuxed(ours, read_path)
    reads = body_mux().reads
    sender = send_each_after_a_frame(theirs, [*TOKENS, chunk(b"data: [DONE]\n\n")], read.tracker)
    read.muxed.read()
    sender.get(timeout=10)
    assert read.kinds() == ["data"] * 4 + ["done"]
    assert [record[4] for record in read.tracker.frames] == [len(piece) - 6 for piece in TOKENS] + [14]
    assert all(record[5] is not None and record[5] >= 0 for record in read.tracker.frames)  # stamped: a wait
    assert read.tracker._ttft == read.tracker.frames[0][2]
    assert body_mux().reads - reads == 5 and read.muxed.reader is None and body_mux().registered == 0


@pytest.mark.usefixtures("resolution")
def test_a_raw_body_without_a_byte_for_the_idle_timeout_ends_with_timeout_error(
    connection: Pair, read_path: str
) -> None:
    ours, theirs = connection
    read = RawMuxed(ours, read_path)
    theirs.sendall(TOKENS[0])
    with pytest.raises(TimeoutError):
        read.muxed.read()
    assert read.kinds() == ["data"]


@pytest.mark.usefixtures("resolution")
def test_a_raw_body_closed_mid_body_ends_with_the_parsers_error(connection: Pair, read_path: str) -> None:
    ours, theirs = connection
    read = RawMuxed(ours, read_path)
    theirs.sendall(TOKENS[0] + TOKENS[1][:9])
    theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(HTTPParseError, match="Incomplete response"):  # llhttp's word for the body's end cut
        read.muxed.read()
    assert read.kinds() == ["data"]


@pytest.mark.usefixtures("resolution")
def test_a_raw_body_reset_by_the_peer_ends_with_the_kernels_error(connection: Pair, read_path: str) -> None:
    ours, theirs = connection
    read = RawMuxed(ours, read_path)
    sender = send_each_after_a_frame(theirs, TOKENS[:2], read.tracker)

    def reset_after_the_tokens() -> None:
        sender.get(timeout=10)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        theirs.close()  # RST

    resetter = gevent.spawn(reset_after_the_tokens)
    with pytest.raises(ConnectionResetError) as raised:
        read.muxed.read()
    resetter.get(timeout=10)
    assert raised.value.errno == errno.ECONNRESET
    assert read.kinds() == ["data", "data"]


@pytest.mark.usefixtures("resolution")
def test_a_raw_body_with_bad_framing_raises_it_in_the_reader_after_the_frames_before(
    connection: Pair, read_path: str
) -> None:
    ours, theirs = connection
    read = RawMuxed(ours, read_path)
    sender = send_each_after_a_frame(theirs, [TOKENS[0], b"zz\r\n"], read.tracker)
    with pytest.raises(HTTPParseError):
        read.muxed.read()
    sender.get(timeout=10)
    assert read.kinds() == ["data"]


@pytest.mark.usefixtures("resolution")
def test_a_raw_body_killed_mid_body_leaves_nothing_registered(connection: Pair, read_path: str) -> None:
    ours, theirs = connection
    read = RawMuxed(ours, read_path)
    reader = gevent.spawn(read.muxed.read)
    gevent.sleep(0)
    reader.kill(block=True)
    assert read.muxed.reader is None and body_mux().registered == 0
    theirs.sendall(TOKENS[0])
    gevent.sleep(2 * IDLE_S)  # a body left registered would read it
    assert read.kinds() == []


def test_a_read_with_nothing_waiting_is_no_read(connection: Pair, read_path: str) -> None:
    ours, _theirs = connection
    read = RawMuxed(ours, read_path)
    reads = body_mux().reads
    assert (read.muxed.reader or read.muxed.readable)() is False
    assert body_mux().reads == reads and not read.muxed._ended and read.kinds() == []


@pytest.mark.skipif(SO_TIMESTAMPNS is None, reason="no SO_TIMESTAMPNS on this platform: no compiled reader")
def test_read_to_end_reads_a_stamped_body_through_the_compiled_reader(
    connection: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RawBody.read_to_end`` gives a stamped, directly fed body the compiled reader, which takes
    its one-token reads in C (the reader is recorded as it is made; the real one reads)."""
    fastread = compiled_reads()
    made: list[Any] = []

    def reader(body: RawBody, muxed: MuxedBody) -> Any:
        made.append(fastread.Reader(body, muxed))
        return made[-1]

    monkeypatch.setattr(raw_body, "_fastread", types.SimpleNamespace(Reader=reader, MAX_READ=fastread.MAX_READ))
    ours, theirs = connection
    assert keep_kernel_stamping_on()
    raw = response_for(CHUNKED_HEAD)
    raw._sock = ours
    tracker = StreamTracker(RequestPlan("end-path", "chat:end-path", "chat"), time.time())
    body = RawBody(raw, SSEParser(1 << 20), tracker, time.monotonic())
    sender = send_each_after_a_frame(theirs, [*TOKENS, chunk(b"data: [DONE]\n\n")], tracker)
    assert body.read_to_end() is True  # ended at [DONE]
    sender.get(timeout=10)
    assert [record[1] for record in tracker.frames] == ["data"] * 4 + ["done"]
    (compiled,) = made
    assert (compiled.fast, compiled.to_a, compiled.to_b) == (4, 1, 0)  # [DONE]: the Python path's
