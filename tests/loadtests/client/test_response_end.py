"""A response ends where its framing says: excess after it is dropped, anything earlier still fails."""

from __future__ import annotations

import socket

import pytest
from geventhttpclient.response import HTTPParseError, HTTPSocketPoolResponse

from loadtests.client.response_end import FramedResponse

pytestmark = pytest.mark.fast

BODY = b"data: 1\n\ndata: [DONE]\n\n"


def answer(wire: bytes, response_type: type[HTTPSocketPoolResponse]) -> HTTPSocketPoolResponse:
    """Parse ``wire`` (everything in one read) as the answer to a GET, with ``response_type``."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(wire)
        theirs.shutdown(socket.SHUT_WR)
        return response_type(ours, None, block_size=65536)  # type: ignore[arg-type]  # no pool: geventhttpclient allows it, its stubs do not


def head(length: int, connection: str = "close") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n" % (length, connection.encode())


def test_geventhttpclient_alone_throws_the_response_away() -> None:
    """The control: what the raw user met before (a whole response judged malformed)."""
    with pytest.raises(HTTPParseError, match="Data after"):
        answer(head(len(BODY)) + BODY + b"data: excess\n\n", HTTPSocketPoolResponse)


@pytest.mark.parametrize("excess", [b"data: excess\n\n", b"HTTP/1.1 200 OK\r\n\r\n", b"\x00" * 100])
def test_excess_after_the_end_is_dropped(excess: bytes) -> None:
    response = answer(head(len(BODY)) + BODY + excess, FramedResponse)
    assert response.message_complete and response.status_code == 200
    assert bytes(response._body_buffer) == BODY
    assert response.should_close()  # the connection that carried the excess is never reused


def test_a_short_body_keeps_what_was_announced() -> None:
    response = answer(head(12) + BODY, FramedResponse)
    assert bytes(response._body_buffer) == BODY[:12]


def test_bytes_before_the_end_still_fail() -> None:
    with pytest.raises(HTTPParseError):
        answer(b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n" + BODY, FramedResponse)


def test_excess_after_an_interim_response_still_fails() -> None:
    """After ``100 Continue`` the final response is still to come: what follows must be one."""
    with pytest.raises(HTTPParseError):
        answer(b"HTTP/1.1 100 Continue\r\n\r\nnot a response at all\r\n\r\n", FramedResponse)
