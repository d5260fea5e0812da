"""Before any user starts: is the target an OpenAI-compatible server we can use?

A run against a wrong ``--host`` used to start its users anyway and fill the console with a
traceback per task. ``preflight()`` asks once, with a bounded timeout, and either returns the base
URL to use (a trailing ``/v1`` stripped, with a notice: the harness adds it itself) and the model,
or raises ``PreflightError`` whose text is one line naming the cause and the fix. It checks, in
order: the URL has an http(s) scheme and a host; the server answers ``GET /v1/models`` within the
timeout (an https one with a certificate the run trusts: ``loadtests.client.tls``; a refused one names
the problem and ``--ca-cert``/``--insecure``), without a redirect (a 3xx is refused naming its
``Location``: no request of a run follows one); the key is accepted (401/403 name ``--api-key``);
the answer is the OpenAI list of models (``{"data": [{"id": ...}]}``), with at least one model
unless ``--model`` names one.
Invariant: it sends at most one request, and never raises anything but ``PreflightError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from loadtests.base.safe_text import redacted_url, url_has_credentials, without_header_values
from loadtests.client.outcome import decode_json, redirect_message
from loadtests.client.tls import TLS_FIX, certificate_problem, client_context
from loadtests.errors import PreflightError, UndecodableJson

DEFAULT_PREFLIGHT_TIMEOUT = 10.0
API_KEY_HINT = "pass --api-key or set SSE_SOAK_API_KEY"


@dataclass(frozen=True)
class Target:
    base_url: str
    """The server's base URL, without ``/v1``."""
    model: str
    notices: tuple[str, ...] = ()
    """One-line notices to print (a stripped ``/v1``, a model the server does not list)."""


def base_url(host: str) -> tuple[str, tuple[str, ...]]:
    """``host`` checked and normalised: a scheme and a host are required, a trailing ``/v1`` (the
    usual base-URL mistake) is stripped with a notice; a query is dropped (the harness sends none).
    Raises ``PreflightError``. Its messages show the host redacted (``redacted_url``)."""
    shown = redacted_url(host)
    if "://" not in host:
        raise PreflightError(f"--host {shown} has no scheme: use --host http://{shown}")
    try:
        parts = urlsplit(host)
    except ValueError as exc:  # an unclosed [ of an IPv6 address, and the like
        raise PreflightError(f"--host {shown} is not a URL ({exc}): e.g. http://127.0.0.1:8000") from None
    if parts.scheme not in ("http", "https"):
        raise PreflightError(f"--host {shown}: the scheme must be http or https, not {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError:
        raise PreflightError(f"--host {shown}: the port is not a number from 1 to 65535") from None
    if not parts.hostname or port == 0:
        raise PreflightError(
            f"--host {shown} names no host{' or port' if port == 0 else ''}: e.g. http://127.0.0.1:8000"
        )
    path = parts.path.rstrip("/")
    notices: tuple[str, ...] = ()
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
        notices = (
            f"sse-soak: --host {shown} ends in /v1; using {redacted_url(f'{parts.scheme}://{parts.netloc}{path}')} "
            "(the harness adds /v1 itself)",
        )
    return f"{parts.scheme}://{parts.netloc}{path}", notices


def preflight(
    host: str,
    api_key: str | None,
    model: str | None,
    timeout: float = DEFAULT_PREFLIGHT_TIMEOUT,
    basic_auth: str | None = None,
) -> Target:
    """Check ``host`` as described in the module docstring; ``timeout`` bounds the one request.
    ``basic_auth``: the ``Authorization`` value of credentials taken out of ``host`` (sent instead
    of a bearer key, as in the URL)."""
    if not 0 < timeout < math.inf:
        raise PreflightError(f"the preflight timeout must be a positive number of seconds, got {timeout}")
    url, notices = base_url(host)
    if api_key and (basic_auth or url_has_credentials(url)):
        raise PreflightError(
            f"--host {redacted_url(url)} carries credentials, which every client sends as HTTP Basic auth, and "
            "--api-key a bearer token: a request has one Authorization header, so give one of them"
        )
    models_url = f"{url}/v1/models"
    shown_url, shown_models_url = redacted_url(url), redacted_url(models_url)
    authorization = basic_auth or (f"Bearer {api_key}" if api_key else None)
    headers = {"Authorization": authorization} if authorization else {}
    try:
        response = httpx.get(
            models_url, headers=headers, timeout=timeout, follow_redirects=False, verify=client_context()
        )
    except httpx.TimeoutException:
        raise PreflightError(
            f"no answer from {shown_models_url} within {timeout:g} s: is the server up and "
            "serving? (--preflight-timeout sets the wait)"
        ) from None
    except httpx.HTTPError as exc:
        problem = certificate_problem(exc)
        if problem is not None:
            refused = f"the TLS certificate of {shown_models_url} was refused ({problem})"
            raise PreflightError(f"{refused}: {TLS_FIX}") from None
        reason = _reason(exc)
        raise PreflightError(
            f"cannot reach {shown_models_url} ({reason}): is the server running? check --host"
        ) from None
    if 300 <= response.status_code < 400:
        location = response.headers.get("location")
        shown_location = redacted_url(location) if location else None
        raise PreflightError(f"{shown_models_url}: {redirect_message(response.status_code, shown_location)}")
    if response.status_code in (401, 403):
        fix = "the key given was refused: check --api-key" if api_key else API_KEY_HINT
        raise PreflightError(f"HTTP {response.status_code} from {shown_models_url}: {fix}")
    if response.status_code == 404:
        raise PreflightError(
            f"HTTP 404 from {shown_models_url}: no OpenAI-compatible API at --host {shown_url} (a server "
            "behind a path prefix needs the prefix in --host)"
        )
    if response.status_code != 200:
        raise PreflightError(
            f"HTTP {response.status_code} from {shown_models_url}: the server cannot list its models; "
            f"{_excerpt(response)}"
        )
    served = _model_ids(response)
    if served is None:
        content_type = response.headers.get("content-type", "no content type")
        raise PreflightError(
            f"{shown_models_url} answered {content_type!r}, not the OpenAI list of models "
            f"({_excerpt(response)}): is --host an OpenAI-compatible server?"
        )
    if model is None:
        if not served:
            raise PreflightError(f"{shown_models_url} lists no model: pass --model")
        return Target(url, served[0], notices)
    if served and model not in served:
        notices += (
            f"sse-soak: --model {model} is not among the models {shown_models_url} lists "
            f"({', '.join(served[:5])}); requesting it anyway",
        )
    return Target(url, model, notices)


def _model_ids(response: httpx.Response) -> list[str] | None:
    """The ids of an OpenAI models list, or None when the body is not one."""
    try:
        body = decode_json(response.content)
    except UndecodableJson:
        return None
    cards = body.get("data") if isinstance(body, dict) else None
    if not isinstance(cards, list) or not all(isinstance(card, dict) and "id" in card for card in cards):
        return None
    return [str(card["id"]) for card in cards]


def _reason(exc: httpx.HTTPError) -> str:
    text = without_header_values(str(exc) or type(exc).__name__)
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0][:120]


def _excerpt(response: httpx.Response) -> str:
    text = " ".join(response.text[:80].split())
    return f"body starts {text!r}" if text else "empty body"
