"""One trust per process: the context every client shares follows --ca-cert and --insecure, and a
refused certificate is worded as its problem."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtests.client import tls

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def default_trust() -> Iterator[None]:
    yield
    tls.configure()  # later tests in this process verify as by default


def test_by_default_every_certificate_and_hostname_is_verified() -> None:
    context = tls.client_context()
    assert tls.client_context() is context and tls.raw_client_context(cafile="ignored") is context
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_insecure_verifies_nothing() -> None:
    tls.configure(insecure=True)
    context = tls.client_context()
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname
    assert tls.trust() == tls.Trust(None, True)


def test_a_ca_cert_that_holds_no_certificate_is_refused_when_configured(tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ssl.SSLError):
        tls.configure(ca_cert=str(not_pem))


def test_a_refused_certificate_is_named_through_the_exceptions_that_wrap_it() -> None:
    refused = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    refused.verify_message = "self-signed certificate"
    try:
        try:
            raise refused
        except ssl.SSLError as exc:
            raise httpx.ConnectError(str(exc)) from exc
    except httpx.ConnectError as wrapped:
        assert tls.certificate_problem(wrapped) == "certificate verify failed: self-signed certificate"
    assert tls.certificate_problem(httpx.ConnectError("[Errno 111] Connection refused")) is None
