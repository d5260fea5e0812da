"""The arrival clock: a read that comes late is still stamped with the time its bytes arrived.

The sender is another process on the same machine (``time.monotonic()`` is one clock machine-wide),
so the reader being late is real: the bytes wait in the kernel while the reader sleeps."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.client.kernel_stamps import SO_TIMESTAMPNS, keep_kernel_stamping_on, recv_stamped, stamp_arrivals

pytestmark = pytest.mark.skipif(SO_TIMESTAMPNS is None, reason="no SO_TIMESTAMPNS on this platform")

READ_LATE_S = 0.1
SENDER = """
import json, socket, sys, time
connection = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sent = []
while connection.recv(1) == b"g":  # one frame per "go", with the time just before it was sent
    sent.append(time.monotonic())
    connection.sendall(b"data: %d\\n\\n" % len(sent))
print(json.dumps(sent))
"""


@pytest.fixture
def sender() -> Iterator[tuple[socket.socket, subprocess.Popen[str]]]:
    """A connection to a sender process that answers each ``b"g"`` with one frame."""
    keep_kernel_stamping_on()  # as the harness does at setup: its first frame may come any moment
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)
        process = subprocess.Popen(
            [sys.executable, "-c", SENDER, str(listener.getsockname()[1])], stdout=subprocess.PIPE, text=True
        )
        try:
            connection, _ = listener.accept()
            with connection:
                yield connection, process
        finally:
            process.kill()
            process.wait(10)


def late_reads(connection: socket.socket, count: int, stamped: bool) -> tuple[list[Any], list[float]]:
    """Ask for ``count`` frames, reading each ``READ_LATE_S`` after asking; (stamps, read times)."""
    stamps, reads = [], []
    for _ in range(count):
        connection.sendall(b"g")
        time.sleep(READ_LATE_S)  # the frame arrives meanwhile and waits in the kernel
        data, arrived = recv_stamped(connection, 4096)[:2] if stamped else (connection.recv(4096), time.monotonic())
        assert data.startswith(b"data: ")
        stamps.append(arrived)
        reads.append(time.monotonic())
    return stamps, reads


def sent_times(connection: socket.socket, process: subprocess.Popen[str]) -> list[float]:
    connection.shutdown(socket.SHUT_WR)
    output, _ = process.communicate(timeout=30)
    return json.loads(output)


def test_a_late_read_is_stamped_when_its_bytes_arrived(sender: tuple[socket.socket, subprocess.Popen[str]]) -> None:
    connection, process = sender
    assert stamp_arrivals(connection)
    stamps, reads = late_reads(connection, 3, stamped=True)
    sent = sent_times(connection, process)
    assert min(read - at for read, at in zip(reads, sent, strict=True)) >= READ_LATE_S * 0.9, "the reads were not late"
    for stamp, at, read in zip(stamps, sent, reads, strict=True):
        assert -0.001 <= stamp - at < 0.03, (stamp - at, read - at)  # arrival, not the read
        assert stamp <= read


def test_without_stamps_a_read_is_timed_when_it_is_read(sender: tuple[socket.socket, subprocess.Popen[str]]) -> None:
    """The control: the same late reads, timed the old way, are off by the lateness."""
    connection, process = sender
    stamps, _ = late_reads(connection, 2, stamped=False)
    sent = sent_times(connection, process)
    assert min(stamp - at for stamp, at in zip(stamps, sent, strict=True)) >= READ_LATE_S * 0.9


def test_a_socket_never_asked_to_stamp_gives_no_stamp(sender: tuple[socket.socket, subprocess.Popen[str]]) -> None:
    """No stamp is not a stamp: the caller times such a read itself, and its wait stays unknown."""
    connection, process = sender
    stamps, _ = late_reads(connection, 1, stamped=True)  # recvmsg, but stamp_arrivals never called
    sent_times(connection, process)
    assert stamps == [None]


FIRST_SEGMENTS = """
import socket, sys, time
from loadtests.client.kernel_stamps import keep_kernel_stamping_on, recv_stamped, stamp_arrivals
if sys.argv[1] == "held":
    keep_kernel_stamping_on()
    time.sleep(0.05)  # the kernel turns stamping on in deferred work
unstamped = 0
for _ in range(int(sys.argv[2])):  # one connection at a time: nothing else holds stamping on between them
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()) as sender, listener.accept()[0] as receiver:
            stamp_arrivals(receiver)
            sender.sendall(b"data: 1\\n\\n")
            unstamped += recv_stamped(receiver, 64)[1] is None
    time.sleep(0.01)  # long enough for the kernel to turn stamping off again
print(unstamped)
"""


def test_held_stamping_stamps_the_first_segment_of_every_connection() -> None:
    """Linux turns stamping on lazily and off when no socket wants it: without the holder, the
    first segment a fresh connection receives usually comes unstamped (287 of 300 measured)."""
    assert first_segments_unstamped("held", 30) == 0


def first_segments_unstamped(holder: str, connections: int) -> int:
    argv = [sys.executable, "-c", FIRST_SEGMENTS, holder, str(connections)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[3], check=True)
    return int(result.stdout)


@pytest.mark.fast
def test_tls_sockets_are_not_stamped() -> None:
    """TLS records are decrypted above the kernel: a stamp would not say when a frame's bytes came."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with (
        socket.socket() as plain,
        context.wrap_socket(plain, server_hostname="localhost", do_handshake_on_connect=False) as tls,
    ):
        assert not stamp_arrivals(tls)
