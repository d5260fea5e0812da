"""A response ends where its framing says, whatever a server sends after it on a closing connection.

A server that announces ``Content-Length: N`` and ``Connection: close`` and then sends more than N
bytes has sent a complete response followed by excess. RFC 9112 (section 6.3) lets a client
discard what follows a complete response, and httpx (the openai client) does: it reads N bytes
and closes. geventhttpclient (the raw user) instead raises "Data after `Connection: close`" when
the excess arrives in the same read as the end, and throws the whole response away; when the
excess comes in a later read, nothing reads it. The verdict then hung on read timing: the same
bytes were a cut stream or a malformed response, depending on how late the loop read them.

``FramedResponse`` drops bytes that follow a complete final response and closes the connection,
so both clients, and every timing, judge the body the framing delimits. Bytes that arrive before a
response is complete still raise.

An interim response (``100 Continue``, ``103 Early Hints``) is skipped, as httpx skips it: the
final response follows on the same connection. geventhttpclient reads on to the final response's
headers, but its end of the interim one released the connection to the pool, so the body was
never read (the stream recorded as ``cut``) and the next request on that connection read the rest
of it as its answer ("Expected HTTP/": a request the server never received). ``FramedResponse``
keeps the connection until the final response ends.
"""

from __future__ import annotations

import geventhttpclient.client
from geventhttpclient.response import HTTPParseError, HTTPResponse, HTTPSocketPoolResponse


class FramedResponse(HTTPSocketPoolResponse):
    """geventhttpclient's pooled response, but excess after the final response's end is dropped and
    an interim response keeps the connection."""

    def _on_message_complete(self) -> None:
        code = self.get_code()
        if 100 <= code < 200 and code != 101:
            HTTPResponse._on_message_complete(self)  # complete, not released: the final response follows
            return
        super()._on_message_complete()

    def feed(self, data: str | bytes) -> None:
        try:
            super().feed(data)
        except HTTPParseError:
            if not (self.message_complete and self.get_code() >= 200):
                raise
            self._trailing_data_dropped = True  # should_close() is now True: the connection is never reused


def install() -> None:
    """Make every geventhttpclient request in this process answer with a ``FramedResponse``."""
    # Rebinding the class is the point: request() looks the name up each time it builds a response.
    geventhttpclient.client.HTTPSocketPoolResponse = FramedResponse  # type: ignore[misc]
