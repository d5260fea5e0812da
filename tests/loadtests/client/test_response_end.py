"""A raw response is framed as the openai client frames it: its head read by h11, its end where its
framing says (excess after it dropped), bad framing before it still failing."""

from __future__ import annotations

import socket

import pytest
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse

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


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def test_an_obs_fold_is_read_as_a_space_as_h11_reads_it() -> None:
    """RFC 9112 5.2; llhttp alone refused the response ("Unexpected whitespace after header value")."""
    response = answer(SSE_HEAD + b"X-Folded: first\r\n \tsecond\r\n" + head(len(BODY))[17:] + BODY, FramedResponse)
    assert response["X-Folded"] == "first second" and bytes(response._body_buffer) == BODY


def test_a_control_character_in_a_value_is_kept_as_h11_keeps_it() -> None:
    """RFC 9110 5.5 lets a recipient keep it; llhttp alone refused it ("Invalid header value char")."""
    response = answer(b"HTTP/1.1 504 Gateway Timeout\r\nX-Control: a\x01b\r\nContent-Length: 0\r\n\r\n", FramedResponse)
    assert response.status_code == 504 and response["X-Control"] == "a\x01b"


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (b"X-Nul: a\x00b", "illegal header line"),
        (b"X-Spaced : value", "illegal header line"),
        (b"Content-Length: 1\r\nContent-Length: 2", "conflicting Content-Length"),
        (b"Transfer-Encoding: gzip, chunked", "Only Transfer-Encoding: chunked"),
    ],
)
def test_a_head_h11_refuses_is_refused_in_h11s_words(header: bytes, words: str) -> None:
    """The same words the openai client's error carries, so both rows say the same."""
    with pytest.raises(HTTPParseError, match=words):
        answer(SSE_HEAD + header + b"\r\n\r\n" + BODY, FramedResponse)


def test_a_connection_closed_within_the_head_sent_no_response() -> None:
    """As httpcore says ("Server disconnected without sending a response"): a connect_error."""
    with pytest.raises(HTTPConnectionClosed):
        answer(SSE_HEAD + b"Content-Le", FramedResponse)


def test_excess_after_a_kept_alive_response_is_dropped_and_the_connection_not_reused() -> None:
    """llhttp alone began a new message with it ("Expected HTTP/") and threw the response away."""
    response = answer(head(len(BODY), "keep-alive") + BODY + b"data: excess\n\n", FramedResponse)
    assert response.message_complete and bytes(response._body_buffer) == BODY
    assert response.should_close()


def test_bad_framing_in_the_read_of_the_head_keeps_what_came_before_it() -> None:
    """The frames before a bad chunk size are the body's; the failure waits for the body's reader."""
    chunked = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    response = answer(chunked + b"%x\r\n" % len(BODY) + BODY + b"\r\nzz\r\n", FramedResponse)
    assert isinstance(response, FramedResponse)
    assert response.status_code == 200 and bytes(response._body_buffer) == BODY
    assert response.body_failure is not None and response.should_close()
