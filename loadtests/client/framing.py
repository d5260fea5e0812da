"""HTTP/1.1 framing quirks a server may send, and what both clients conclude from each: the one table.

The raw client (``loadtests.load.users.SSEUser``: geventhttpclient's llhttp for the body, h11 for
the head, ``loadtests.client.response_end``) and the openai SDK client (httpx over h11) must give
the same row for the same bytes. Each ``FramingRule`` names a byte pattern (``pattern``, matched
in the part of the response it names), where RFC 9112 or 9110 speaks of it, and the conclusion
both clients must reach: the outcome, which frames are kept, and where the row's duration ends.
``tests/loadtests/load/test_framing_parity.py`` generates responses from these rows (hypothesis),
sends each to both clients from a real server and fails on any difference between them or
with the row. The SDK's reading (h11) is the reference wherever the RFC leaves the choice; where
h11 parts from the RFC, ``install`` makes it read as the raw client does: chunk size lines
(``CHUNK_HEADER``) and excess after a response that came in the read that ended it (h11 kept it
for the next response; RFC 9112 6.3 forbids that).

Conclusions (``Conclusion``):

- ``AS_IF_ABSENT``: the quirk changes nothing: the data frames decide (``ok`` with ``[DONE]``,
  ``cut`` without), every frame up to the stream's terminal one is kept;
- ``REFUSED``: the head is not HTTP as h11 reads it: ``protocol_error``, no frame;
- ``ENDS_THERE``: the body ends at the quirk: the frames before it are kept, and decide (``ok`` if
  ``[DONE]`` was among them, else ``cut``);
- ``EXCESS_DROPPED``: bytes after a complete response are never read as anything (RFC 9112 6.3:
  "MUST NOT process ... such extra data as a separate response"): the response is what its
  framing delimits, and the connection is not reused, so the next request is unharmed;
- ``NO_RESPONSE``: the connection closed before a whole head: ``connect_error``, as httpcore says
  ("without sending a response").

Whatever the conclusion, a stream ends at its first terminal frame (``[DONE]``, an error frame, a
frame that breaks the protocol): neither client reads or waits past it, so ``duration_s`` ends at
that frame's arrival, not at the body's end (``ENDS_AT_TERMINAL_FRAME``). A non-2xx answer (a proxy's
504) is judged by its status whatever quirk its head carries, when the head is readable.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import h11

_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_QUOTED = rb'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t -~\x80-\xff])*"'
CHUNK_HEADER = re.compile(
    rb"(?P<chunk_size>0*[0-9A-Fa-f]{1,16})(?P<chunk_ext>(?:;%s*(?:=(?:%s*|%s))?)*)(?<!;)\r\n"
    % (_TOKEN, _TOKEN, _QUOTED)
)
"""A chunk's size line as both clients take it: hex digits (at most 16 beyond leading zeros: a
64-bit size) and extensions of tokens or quoted strings, no whitespace, ended by CRLF (RFC 9112
7.1), the last not a bare ``;`` (llhttp takes an empty extension name, as in ``;;a`` or ``;=x``,
except just before the CRLF: ``3;`` and ``3;a=b;`` are refused). Any other size line ends the body
there. It is llhttp's rule (the raw client decodes chunks
in C, and nothing may cost it a step per frame); h11, below the SDK, is made to follow it
(``install``), because h11 alone also takes what the RFC's grammar does not: whitespace after the
size, an empty or unquoted-space extension. Both part from the RFC in one place: BWS around ``;``
and ``=`` (RFC 9112 7.1.1 allows it; llhttp refuses it, so both do)."""


class Conclusion(str, Enum):
    """What both clients conclude from a quirk (module docstring)."""

    AS_IF_ABSENT = "as_if_absent"
    REFUSED = "refused"
    ENDS_THERE = "ends_there"
    EXCESS_DROPPED = "excess_dropped"
    NO_RESPONSE = "no_response"


class Part(str, Enum):
    """Where in a response a pattern is matched."""

    HEAD = "head"
    """The status line and header lines, up to the blank line (LF or CRLF)."""
    BODY = "body"
    """The body as sent, its chunk framing included."""
    AFTER = "after"
    """What follows the end the framing delimits, on the same connection."""


ENDS_AT_TERMINAL_FRAME = True
"""Both clients stop reading at a stream's terminal frame: a row's ``duration_s`` ends there."""


@dataclass(frozen=True)
class FramingRule:
    """One quirk: its byte pattern, the RFC's word on it, and what both clients conclude."""

    name: str
    part: Part
    pattern: re.Pattern[bytes]
    rfc: str
    conclusion: Conclusion
    why: str


def _rule(name: str, part: Part, pattern: bytes, rfc: str, conclusion: Conclusion, why: str) -> FramingRule:
    return FramingRule(name, part, re.compile(pattern, re.DOTALL), rfc, conclusion, why)


_HEAD_LINE_END = rb"\r?\n"
RULES: tuple[FramingRule, ...] = (
    _rule(
        "obs_fold",
        Part.HEAD,
        rb"\r?\n[ \t]+[^\r\n]",
        "RFC 9112 5.2",
        Conclusion.AS_IF_ABSENT,
        "a user agent replaces each obs-fold with SP before interpreting the value",
    ),
    _rule(
        "control_in_value",
        Part.HEAD,
        rb":[^\r\n]*[\x01-\x08\x0e-\x1f\x7f]",
        "RFC 9110 5.5",
        Conclusion.AS_IF_ABSENT,
        "a recipient MAY retain CTLs other than NUL, CR and LF; h11 keeps them",
    ),
    _rule(
        "obs_text_in_value",
        Part.HEAD,
        rb":[^\r\n]*[\x80-\xff]",
        "RFC 9110 5.5",
        Conclusion.AS_IF_ABSENT,
        "obs-text is allowed in a field value",
    ),
    _rule(
        "nul_or_bare_cr_in_value",
        Part.HEAD,
        rb":[^\n]*(?:\x00|\r(?!\n)|[\x0b\x0c])",
        "RFC 9110 5.5",
        Conclusion.REFUSED,
        "NUL and a bare CR are dangerous: reject or replace; h11 rejects them (and VT, FF)",
    ),
    _rule(
        "lf_line_ends",
        Part.HEAD,
        rb"(?<!\r)\n",
        "RFC 9112 2.2",
        Conclusion.AS_IF_ABSENT,
        "a recipient MAY recognise a single LF as a line terminator",
    ),
    _rule(
        "whitespace_before_colon",
        Part.HEAD,
        rb"\n[!-9;-~]+[ \t]+:",
        "RFC 9112 5.1",
        Conclusion.REFUSED,
        "a server MUST reject it; a proxy MUST remove it; h11 refuses the response",
    ),
    _rule(
        "duplicate_equal_content_length",
        Part.HEAD,
        rb"(?i)content-length: *(\d+)\r?\n(?:.*\n)?content-length: *\1\r?\n",
        "RFC 9110 8.6",
        Conclusion.AS_IF_ABSENT,
        "a recipient MAY take a list of one repeated valid value as that value",
    ),
    _rule(
        "conflicting_content_length",
        Part.HEAD,
        rb"(?i)content-length: *(\d+)\r?\n(?:.*\n)?content-length: *(?!\1\r?\n)\d+\r?\n",
        "RFC 9112 6.3",
        Conclusion.REFUSED,
        "an invalid Content-Length: unrecoverable framing error",
    ),
    _rule(
        "content_length_and_chunked",
        Part.HEAD,
        rb"(?i)(?=.*content-length:)(?=.*transfer-encoding:)",
        "RFC 9112 6.1",
        Conclusion.REFUSED,
        "such a message ought to be handled as an error (sse-soak's rule for both clients)",
    ),
    _rule(
        "unknown_transfer_coding",
        Part.HEAD,
        rb"(?i)transfer-encoding: *(?!chunked\r?\n)[^\r\n]*\r?\n",
        "RFC 9112 6.1",
        Conclusion.REFUSED,
        "a coding other than chunked alone: h11 decodes only chunked",
    ),
    _rule(
        "interim_response",
        Part.HEAD,
        rb"^HTTP/1\.1 1\d\d",
        "RFC 9110 15.2",
        Conclusion.AS_IF_ABSENT,
        "a client MUST be able to parse and skip interim responses",
    ),
    _rule(
        "closed_within_head",
        Part.HEAD,
        rb"^(?![\s\S]*\n\r?\n)",
        "RFC 9112 6.3",
        Conclusion.NO_RESPONSE,
        "no whole response head: httpcore says the server disconnected without sending a response",
    ),
    FramingRule(
        "chunk_header",
        Part.BODY,
        CHUNK_HEADER,
        "RFC 9112 7.1, 7.1.1",
        Conclusion.AS_IF_ABSENT,
        "a size line of this shape (leading zeros, either case, extensions) is read and its extensions ignored",
    ),
    _rule(
        "bad_chunk_header",
        Part.BODY,
        rb"(?:^|\r\n)[^\r\n]*\r\n",  # a size line that CHUNK_HEADER does not match in full
        "RFC 9112 7.1",
        Conclusion.ENDS_THERE,
        "not a chunk-size line (whitespace, BWS, a bare or control byte in an extension, over 64 bits)",
    ),
    _rule(
        "trailer_fields",
        Part.BODY,
        rb"\r\n0+\r\n[!-9;-~]+:[^\r\n]*\r\n",
        "RFC 9112 7.1.2",
        Conclusion.AS_IF_ABSENT,
        "trailer fields after the last chunk may be discarded",
    ),
    _rule(
        "chunk_data_not_crlf",
        Part.BODY,
        rb"",  # recognised by length, not by shape: the bytes after a chunk's data are not CRLF
        "RFC 9112 7.1",
        Conclusion.ENDS_THERE,
        "chunk-data is followed by CRLF",
    ),
    _rule(
        "no_final_chunk",
        Part.BODY,
        rb"(?<!\r\n0\r\n\r\n)\Z",
        "RFC 9112 6.3, 7.1",
        Conclusion.ENDS_THERE,
        "closed before the last chunk: an incomplete message",
    ),
    _rule(
        "closed_before_content_length",
        Part.BODY,
        rb"",  # recognised by length: fewer bytes than Content-Length announced, then the close
        "RFC 9112 6.3",
        Conclusion.ENDS_THERE,
        "fewer bytes than announced, then the close: an incomplete message",
    ),
    _rule(
        "close_delimited",
        Part.HEAD,
        rb"(?i)^(?!.*(?:content-length|transfer-encoding):)",
        "RFC 9112 6.3 (8)",
        Conclusion.AS_IF_ABSENT,
        "no length: the body is what comes until the server closes",
    ),
    _rule(
        "excess_after_content_length",
        Part.AFTER,
        rb".+",
        "RFC 9112 6.3",
        Conclusion.EXCESS_DROPPED,
        "extra data after a complete response is discarded, never a separate response",
    ),
    _rule(
        "held_after_done",
        Part.AFTER,
        rb"\A\Z",  # nothing: the server keeps the connection silent after [DONE]
        "-",
        Conclusion.AS_IF_ABSENT,
        "the stream ended at [DONE]: neither client waits for the body's end",
    ),
)
"""Every quirk both clients are held to (``tests/loadtests/load/test_framing_parity.py``)."""


def install() -> bool:
    """Make h11 (below the openai SDK, in this process) read as the raw client reads: chunk size
    lines by ``CHUNK_HEADER``, and excess after a complete response dropped (``_drop_excess``);
    False when this h11 has no chunk rule to replace (the parity test then fails)."""
    if not getattr(h11.Connection.start_next_cycle, "drops_excess", False):
        h11.Connection.start_next_cycle = _drop_excess(h11.Connection.start_next_cycle)  # type: ignore[method-assign, assignment]
    readers = importlib.import_module("h11._readers")
    if not isinstance(getattr(readers, "chunk_header_re", None), re.Pattern):
        return False
    vars(readers)["chunk_header_re"] = CHUNK_HEADER  # h11 looks it up at each chunk
    return True


def _drop_excess(start_next_cycle: Callable[[h11.Connection], None]) -> Callable[[h11.Connection], None]:
    """h11's ``start_next_cycle`` that drops what a server sent after the response it ended: bytes
    that came in the read that ended the response stay in h11's buffer, and httpcore reused the
    connection, so the next request read them as its answer ("illegal status line"). RFC 9112 6.3
    forbids processing them as a separate response; the raw client drops them too."""

    def next_cycle(connection: h11.Connection) -> None:
        start_next_cycle(connection)
        if connection.our_role is h11.CLIENT and connection.trailing_data[0]:
            connection._receive_buffer = type(connection._receive_buffer)()

    next_cycle.drops_excess = True  # type: ignore[attr-defined]
    return next_cycle


RULES_BY_NAME = {row.name: row for row in RULES}
