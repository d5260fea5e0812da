"""Which TLS certificates a run trusts: one client context for every HTTP client of the process.

An https target is verified by every client of a run alike: the raw user (geventhttpclient), the
openai SDK's httpx client, the preflight and the prompt-sizing probe. They trust the system's CA
bundle (or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), plus ``--ca-cert FILE`` when given (the CA that
signed a private server's certificate), with hostnames checked; ``--insecure`` verifies nothing,
and the run says so loudly and records it in its settings. ``configure()`` sets this once per
process, from the parsed options, before any client is made; ``client_context()`` is then the one
context (building one costs about 30 ms of CPU, paid at setup: ``loadtests.load.loop_hygiene``). An
``ssl.SSLContext`` may be shared by any number of clients and connections.

``certificate_problem()`` words a refused certificate as one line naming the problem and the two
options, for the preflight's refusal (a refused certificate is no "is the server running?").
Invariant: without ``configure()``, a process verifies as ``httpx`` does by default.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass

from loadtests.errors import exception_chain

INSECURE_WARNING = (
    "sse-soak: WARNING: --insecure: TLS certificates are NOT verified; any server, or anyone between, "
    "can answer for the target (recorded in the run's settings)"
)
"""Printed at the start of every ``--insecure`` run."""
TLS_FIX = "pass --ca-cert FILE (the CA that signed it) or --insecure (no verification)"


@dataclass(frozen=True)
class Trust:
    """What this process's clients trust."""

    ca_cert: str | None = None
    """A PEM file of CA certificates trusted besides the system's."""
    insecure: bool = False
    """Verify no certificate and no hostname."""


_trust = Trust()


def configure(ca_cert: str | None = None, insecure: bool = False) -> None:
    """Trust ``ca_cert`` besides the system's CAs, or nothing at all (``insecure``), from now on in
    this process. ``OSError``/``ssl.SSLError`` when the file cannot be read as certificates."""
    global _trust
    _trust = Trust(ca_cert, insecure)
    client_context.cache_clear()
    client_context()  # a file that is no certificate fails here, before any request


def trust() -> Trust:
    return _trust


@functools.cache
def client_context() -> ssl.SSLContext:
    """The TLS client context of every HTTP client of this process (module docstring)."""
    context = ssl.create_default_context()
    if _trust.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif _trust.ca_cert is not None:
        context.load_verify_locations(cafile=_trust.ca_cert)
    return context


def raw_client_context(cafile: str | None = None) -> ssl.SSLContext:
    """``client_context()`` as geventhttpclient's ``ssl_context_factory``: it passes its own CA
    bundle (certifi's), which the run's trust replaces rather than joins."""
    return client_context()


def certificate_problem(exc: BaseException) -> str | None:
    """The certificate problem behind ``exc`` (it or what it was raised from), e.g. ``certificate
    verify failed: self-signed certificate``, or None when no certificate was refused."""
    for link in exception_chain(exc):
        if isinstance(link, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {link.verify_message}" if link.verify_message else str(link)
    return None
