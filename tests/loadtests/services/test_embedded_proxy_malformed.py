"""The embedded proxy answers a request it will not forward, plainly, without echoing it.

Each case is sent over a raw socket to a real ``python -m loadtests proxy`` process in front of a
real target server, and the test reads until the proxy closes: there must be a whole plain-text
answer with the expected status, and nothing the client sent may come back in it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from loadtests.services.proxies.embedded import ProxySettings, ReverseProxy, start_embedded_proxy
from loadtests.services.stack import ChildService, TargetServerProcess

MARK = b"<b>sse-soak-marker</b>"  # what a reflected value would look like in an answer


@pytest.fixture(scope="module")
def proxy(default_server: TargetServerProcess) -> Iterator[ChildService]:
    service = start_embedded_proxy(default_server.url, 5.0)
    yield service
    service.stop()


def exchange(url: str, raw: bytes, half_close: bool = False) -> bytes:
    """Send ``raw``, then read everything until the proxy closes (at most 10 s)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(raw)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def refusal(response: bytes, status: bytes, sent: bytes = MARK) -> bytes:
    """Check the answer is a whole plain-text ``status`` that does not echo ``sent``; its body."""
    assert response.startswith(b"HTTP/1.1 " + status + b"\r\n"), response[:200]
    head, _, body = response.partition(b"\r\n\r\n")
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    assert headers[b"Content-Type"] == b"text/plain; charset=utf-8"
    assert headers[b"Connection"] == b"close"
    assert int(headers[b"Content-Length"]) == len(body) and body.startswith(status)
    assert sent not in response
    return body


def post(*headers: bytes, body: bytes = b"", target: bytes = b"/v1/models") -> bytes:
    return b"\r\n".join([b"POST " + target + b" HTTP/1.1", b"Host: 127.0.0.1", *headers, b"", body])


def test_a_well_formed_request_still_reaches_the_server(proxy: ChildService) -> None:
    response = exchange(proxy.url, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 200 OK\r\n") and b"sse-soak/tiny-sim" in response


def test_lines_ending_in_a_bare_lf_are_understood(proxy: ChildService) -> None:
    response = exchange(proxy.url, b"GET /v1/models HTTP/1.1\nHost: 127.0.0.1\n\n")
    assert response.startswith(b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize("value", [MARK, b"-5", b"+5", b"1_0", b"5, 6", b"0x10", b"\xd9\xa3"])
def test_a_content_length_that_is_not_a_number_of_bytes_is_a_400(proxy: ChildService, value: bytes) -> None:
    response = exchange(proxy.url, post(b"Content-Length: " + value, body=b"12345"))
    body = refusal(response, b"400 Bad Request", value)
    assert b"Content-Length" in body


def test_two_different_content_lengths_are_a_400(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Content-Length: 2", b"Content-Length: 5", body=b"12345"))
    refusal(response, b"400 Bad Request")


def test_a_repeated_identical_content_length_is_accepted(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Content-Length: 2", b"Content-Length: 2", body=b"{}"))
    assert response.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")  # the server's answer to a POST here


def test_transfer_encoding_with_content_length_is_a_400(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Transfer-Encoding: chunked", b"Content-Length: 5", body=b"0\r\n\r\n"))
    refusal(response, b"400 Bad Request")


def test_a_chunked_request_body_is_a_411(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Transfer-Encoding: " + MARK, body=b"0\r\n\r\n"))
    refusal(response, b"411 Length Required")


def test_a_header_block_over_the_limit_is_a_431_not_a_silent_close(proxy: ChildService) -> None:
    filler = [b"X-Filler-%d: %s" % (i, b"a" * 1000) for i in range(70)]  # ~70 KB in lines of 1 KB
    response = exchange(proxy.url, post(*filler, b"X-Mark: " + MARK))
    refusal(response, b"431 Request Header Fields Too Large", b"a" * 100)


def test_one_header_line_over_the_limit_is_a_431(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"X-Big: " + b"b" * 70_000))
    refusal(response, b"431 Request Header Fields Too Large", b"b" * 100)


def test_a_request_line_over_the_limit_is_a_414(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(target=b"/" + b"c" * 70_000))
    refusal(response, b"414 URI Too Long", b"c" * 100)


@pytest.mark.parametrize(
    "request_line",
    [
        MARK,
        b"GET /" + MARK,
        b"GET /" + MARK + b" HTTP/1.1 extra",
        b"GET  /x HTTP/1.1",
        b"GET /x http/1.1",
        b"GET /x HTTP/1.1 ",
        b"G(E)T /x HTTP/1.1",
        b"GET /x\x00 HTTP/1.1",
    ],
)
def test_a_malformed_request_line_is_a_400(proxy: ChildService, request_line: bytes) -> None:
    response = exchange(proxy.url, request_line + b"\r\nHost: 127.0.0.1\r\n\r\n")
    refusal(response, b"400 Bad Request", request_line)


def test_http_2_in_the_request_line_is_a_505(proxy: ChildService) -> None:
    response = exchange(proxy.url, b"GET /" + MARK + b" HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n")
    refusal(response, b"505 HTTP Version Not Supported")


@pytest.mark.parametrize(
    "header_line",
    [
        b"X-No-Colon " + MARK,
        b"X-Space-Before-Colon : " + MARK,
        b" folded " + MARK,
        b"\tfolded " + MARK,
        b": no name " + MARK,
        b"X(bad)name: " + MARK,
    ],
)
def test_a_malformed_header_line_is_a_400(proxy: ChildService, header_line: bytes) -> None:
    response = exchange(proxy.url, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header_line + b"\r\n\r\n")
    refusal(response, b"400 Bad Request", header_line)


@pytest.mark.parametrize("value", [MARK + b"\rX-Injected: 1", MARK + b"\x00", MARK + b"\x1b[31m"])
def test_a_control_character_in_a_header_value_is_a_400(proxy: ChildService, value: bytes) -> None:
    response = exchange(proxy.url, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Mark: " + value + b"\r\n\r\n")
    refusal(response, b"400 Bad Request")


@pytest.mark.parametrize("hosts", [[], [b"Host: a.example", b"Host: " + MARK]])
def test_an_http_1_1_request_without_exactly_one_host_is_a_400(proxy: ChildService, hosts: list[bytes]) -> None:
    response = exchange(proxy.url, b"\r\n".join([b"GET /v1/models HTTP/1.1", *hosts, b"", b""]))
    refusal(response, b"400 Bad Request")


def test_a_body_over_the_limit_is_a_413_without_reading_it(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Content-Length: 99999999999999999999", b"X-Mark: " + MARK))
    refusal(response, b"413 Content Too Large")


def test_a_body_shorter_than_its_content_length_is_a_400(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Content-Length: 100", body=MARK), half_close=True)
    refusal(response, b"400 Bad Request")


def test_a_head_cut_short_is_a_400(proxy: ChildService) -> None:
    response = exchange(proxy.url, b"GET /v1/models HTTP/1.1\r\nX-Mark: " + MARK, half_close=True)
    refusal(response, b"400 Bad Request")


def test_an_unknown_expectation_is_a_417(proxy: ChildService) -> None:
    response = exchange(proxy.url, post(b"Content-Length: 2", b"Expect: " + MARK, body=b"{}"))
    refusal(response, b"417 Expectation Failed")


def test_expect_100_continue_is_answered_by_the_proxy(proxy: ChildService) -> None:
    parts = urlsplit(proxy.url)
    assert parts.hostname is not None and parts.port is not None
    body = b'{"prompt": "hi", "max_tokens": 1}'
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"  # the client may now send its body
        sock.sendall(body)
        response = b""
        while chunk := sock.recv(65536):
            response += chunk
    assert response.startswith(b"HTTP/1.1 200 OK\r\n") and b'"text"' in response


@pytest.mark.fast
def test_a_request_that_does_not_arrive_in_time_is_a_408() -> None:
    async def scenario() -> bytes:
        proxy = ReverseProxy(ProxySettings("127.0.0.1", 0, "http://127.0.0.1:9", 5.0, client_timeout=0.3))
        server = await proxy.start()
        async with server:
            reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
            writer.write(b"GET /v1/models HTTP/1.1\r\nX-Mark: " + MARK)  # and then nothing
            response = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            await writer.wait_closed()
        assert proxy.stats.refused == 1 and proxy.stats.requests == 0
        return response

    refusal(asyncio.run(scenario()), b"408 Request Timeout")
