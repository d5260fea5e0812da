"""What the run shows a person: ``loadtests.base.safe_text``, pure functions."""

from __future__ import annotations

import pytest

from loadtests.base.safe_text import (
    plain_name,
    printable,
    redacted_url,
    url_has_credentials,
    url_origin,
    without_credentials,
    without_header_values,
)

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("http://user:PASS@127.0.0.1:8000/?token=SECRET", "http://user:***@127.0.0.1:8000/?token=***"),
        ("https://TOKEN@gateway/prefix?a=1&b#k=v", "https://***@gateway/prefix?a=***&***#k=***"),
        ("user:PASS@host:8000", "user:***@host:8000"),  # no scheme: refused, shown redacted
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_redacted_url_masks_the_password_and_every_query_value_and_keeps_the_rest(given: str, shown: str) -> None:
    assert redacted_url(given) == shown


def test_url_has_credentials_sees_a_userinfo_only() -> None:
    assert url_has_credentials("http://u:p@h") and url_has_credentials("http://token@h")
    assert not url_has_credentials("http://h/path@x") and not url_has_credentials("http://h:1/?q=a@b")


def test_printable_escapes_c0_c1_and_bidi_controls_and_leaves_text_alone() -> None:
    assert printable("boom\x1b]0;pwned\x07\x1b[2J\r\n\t\x9b2J\u202e") == (
        "boom\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0a\\x09\\x9b2J\\u202e"
    )
    assert printable("plain, ünïcode and C:\\path") == "plain, ünïcode and C:\\path"


def test_an_error_line_never_quotes_a_header_value() -> None:
    said = without_header_values("LocalProtocolError: Illegal header value b'Bearer abc\\r\\nX: KEY'")
    assert said == "LocalProtocolError: Illegal header value (not shown)"


@pytest.mark.parametrize("name", ["../../x", "..", ".", "a/b", "a\\b", "", ".hidden", "-x", "x y", "x\x1b"])
def test_a_name_that_is_not_a_plain_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not a plain name"):
        plain_name(name, "run name")


def test_a_plain_name_is_kept() -> None:
    assert plain_name("mixed_truncate-2.v1", "run name") == "mixed_truncate-2.v1"


def test_credentials_leave_the_url_as_the_basic_auth_httpx_would_send() -> None:
    bare, authorization = without_credentials("http://us%40er:P%21ss@127.0.0.1:8000/p?token=SECRET#f")
    assert bare == "http://127.0.0.1:8000/p" and authorization == "Basic dXNAZXI6UCFzcw=="  # us@er:P!ss
    assert without_credentials("https://TOKEN@gw") == ("https://gw", "Basic VE9LRU46")  # TOKEN:
    assert without_credentials("http://h:1/v1?q=1") == ("http://h:1/v1", None)


def test_the_origin_leaves_out_the_userinfo_and_fills_in_the_port() -> None:
    assert url_origin("HTTP://u:p@Host:80/x") == url_origin("http://host/") == "http://host:80"
    assert url_origin("https://h") == "https://h:443" != url_origin("http://h:443")
