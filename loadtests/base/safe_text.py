"""Text the run shows a person: secrets kept out, the server's bytes made inert, names kept plain.

Three rules, each owned here so that no writer or printer carries its own copy:

- ``redacted_url``: ``--host`` may carry credentials (``http://user:PASS@host``, sent by every
  client as HTTP Basic auth) and query values (``?token=SECRET``, which the harness drops: it sends
  none). Wherever the run writes or prints the host (summary.json, manifest.json, report.html, the
  console, an error line), it is this form: the password and each query or fragment value replaced
  by ``***``. ``without_credentials`` takes the userinfo out of the URL Locust holds (its report and
  web UI show that URL), as the ``Authorization: Basic`` value the run's clients send to its origin
  (``url_origin``) instead.
- ``printable``: text a server controls (an error message, a Content-Type, a model id) goes to a
  terminal, a log or pytest's output with its control characters escaped (``\\x1b``, ``\\r``,
  ``\\n``, ``\\u202e``...), so a hostile server cannot retitle, clear or rewrite the terminal of
  whoever runs the test. The record keeps the bytes the server sent; only what is shown is escaped.
- ``without_header_values``: an HTTP client refusing a header quotes its value (h11's ``Illegal
  header value b'Bearer ...'``); an error line keeps the complaint and drops the value, which may
  be the key.
- ``plain_name``: a name that becomes a path (a scenario's, a run directory's) is one plain file
  name, never a path that would write outside ``--report-dir``.
"""

from __future__ import annotations

import base64
import re
from urllib.parse import unquote, urlsplit

from loadtests.errors import InvalidValue

__all__ = [
    "MASK",
    "PLAIN_NAME",
    "plain_name",
    "printable",
    "redacted_url",
    "url_has_credentials",
    "url_origin",
    "without_credentials",
    "without_header_values",
]

MASK = "***"

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 control characters (ESC, CR, LF, TAB, BEL, CSI...), the Unicode line and paragraph
separators and the bidirectional overrides: what can move a cursor, end a line or reorder text."""

_URL = re.compile(r"(?s)^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?P<userinfo>[^/?#]*@)?(?P<rest>[^?#]*)(?P<tail>.*)$")
"""A URL's parts as written, scheme optional (``--host user:pw@host:8000`` is refused with itself
in the message): the userinfo is everything before the authority's last ``@``."""

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A plain name: a letter or digit, then letters, digits, ``.``, ``_`` or ``-`` (so never ``.``,
``..``, a separator or a hidden file)."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` as a string whose control characters are escaped as visible ``\\xNN``/``\\uNNNN``."""
    shown = str(text)
    return _CONTROL.sub(_escape, shown) if _CONTROL.search(shown) else shown


_HEADER_VALUE = re.compile(r"(?is)(header value)\b.*")


def without_header_values(text: str) -> str:
    """``text`` cut after any ``header value`` it mentions: what follows is the value itself."""
    return _HEADER_VALUE.sub(r"\1 (not shown)", text)


def _masked_pairs(part: str) -> str:
    """``a=1&b`` -> ``a=***&***``: each key kept, each value (or bare item) masked."""
    pairs = []
    for pair in re.split("([&;])", part):
        if pair in ("&", ";", ""):
            pairs.append(pair)
        else:
            key, equals, _ = pair.partition("=")
            pairs.append(f"{key}={MASK}" if equals else MASK)
    return "".join(pairs)


def redacted_url(url: str) -> str:
    """``url`` with its password (or a lone user, often a token) and each query and fragment value
    replaced by ``***``; the scheme, user name, host, port and path kept. Any string is accepted."""
    parts = _URL.match(url)
    if parts is None:  # unreachable: every group is optional
        return MASK
    userinfo = parts["userinfo"] or ""
    if userinfo:
        user, colon, _ = userinfo[:-1].partition(":")
        userinfo = f"{user}:{MASK}@" if colon else f"{MASK}@"
    tail = parts["tail"]
    if tail:
        query, hash_sign, fragment = tail.partition("#")
        query = "?" + _masked_pairs(query[1:]) if query else ""
        tail = query + (hash_sign + _masked_pairs(fragment) if hash_sign else "")
    return f"{parts['scheme'] or ''}{userinfo}{parts['rest']}{tail}"


def url_has_credentials(url: str) -> bool:
    """``url`` carries a userinfo part (``user:password@`` or ``token@``)."""
    parts = _URL.match(url)
    return bool(parts and parts["userinfo"])


def without_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its userinfo, query and fragment (the harness sends no query; either may
    hold a token), and the ``Authorization`` value HTTP Basic auth sends for the userinfo (``Basic
    base64(user:password)``, each percent-decoded as httpx does), None when it has none: a URL
    Locust holds (and shows in its report and web UI) never carries a secret."""
    parts = _URL.match(url)
    if parts is None:  # unreachable: every group is optional
        return url, None
    bare = f"{parts['scheme'] or ''}{parts['rest']}"
    if not parts["userinfo"]:
        return bare, None
    user, _, password = parts["userinfo"][:-1].partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return bare, f"Basic {token}"


def url_origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` in lower case, its userinfo left out: credentials are sent
    to the origin they were given for, never to another."""
    bare, _ = without_credentials(url)
    try:
        parts = urlsplit(bare)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return bare.lower()
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}"


def plain_name(name: object, what: str) -> str:
    """``name`` if it is a plain name (``PLAIN_NAME``), else ``ValueError`` naming ``what`` it is for."""
    if isinstance(name, str) and PLAIN_NAME.fullmatch(name):
        return name
    raise InvalidValue(
        f"{what} {name!r} is not a plain name: use letters, digits, '.', '_' and '-', starting "
        "with a letter or digit (it names a directory)"
    )
