"""``--proxy litellm``: LiteLLM's proxy as a gateway in front of the server: installed in its own virtual environment,
started by the run (``--proxy litellm``) on a free loopback port, under our watchdog.

Users put LiteLLM in front of vLLM; it behaves unlike a reverse proxy, and the run must see it as
users do. Measured here (LiteLLM 1.108.7 in front of the bundled server, read timeout 2 s, 5 s to
first token):

- it strips every SSE comment, and holds the response headers until the first token: no keep-alive
  reaches the client, and a stream is silent from its send to its first token;
- its upstream read timeout is reset by the comments it strips, so with server keep-alive on a
  5 s prefill passes through a 2 s timeout;
- with keep-alive off, the timeout answers 408 (``litellm.Timeout``) on ``/v1/completions`` and 500
  (``litellm.APIConnectionError ... Timeout on reading data from socket``) on
  ``/v1/chat/completions``, before any header; ``loadtests.judge.causes`` names both.

Configuration: one model entry per model the upstream lists (``hosted_vllm/<model>``, LiteLLM's
provider for vLLM), ``timeout`` and ``stream_timeout`` the read timeout, no retries, the upstream's
API key from the environment (never on a command line or in the config file), no master key (it
listens on loopback only, for one run), the cost map read locally (no network).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadtests.base.ports import free_loopback_port
from loadtests.errors import LiteLLMError, ServerStartError
from loadtests.services.child import ChildService
from loadtests.services.proxies.base import Front, ProxyKind
from loadtests.services.proxies.real import Upstream, start_watched
from loadtests.services.tool_venv import ToolVenv, dump, run_step, stamp_matches

LITELLM_VERSION = "1.108.7"
PACKAGE = f"litellm[proxy]=={LITELLM_VERSION}"
HOME_ENV = "SSE_SOAK_LITELLM_HOME"
DEFAULT_HOME = Path("~/.cache/sse-soak") / f"litellm-{LITELLM_VERSION}"
STAMP = "sse-soak-install.json"
UPSTREAM_KEY_ENV = "SSE_SOAK_UPSTREAM_API_KEY"
"""The variable the gateway's config reads the upstream's API key from (``os.environ/...``)."""
NO_KEY = "sse-soak-no-key"
"""The key the gateway sends upstream when the run has none (LiteLLM insists on one)."""
READY_TIMEOUT_S = 90.0
"""LiteLLM's start-up: 7 s on a quiet machine here; several times that on a busy one."""
GATEWAY_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else it fetches its cost map from the network at import
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",  # loopback only, one run
    "LITELLM_LOG": "ERROR",
    "DISABLE_ADMIN_UI": "True",
    "NO_PROXY": "127.0.0.1,localhost,::1",
    "no_proxy": "127.0.0.1,localhost,::1",
}
"""The gateway's environment on top of this process's own."""
MODELS_TIMEOUT_S = 10.0


def litellm_home() -> Path:
    """Where the venv is: ``$SSE_SOAK_LITELLM_HOME``, else ``~/.cache/sse-soak/litellm-<version>``."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser().absolute()


@dataclass(frozen=True)
class Install(ToolVenv):
    """Where an install's parts are; ``home`` is the venv itself."""

    @property
    def litellm(self) -> Path:
        return self.home / "bin" / "litellm"

    @property
    def complete(self) -> bool:
        """The stamp, written last, names this recipe."""
        return stamp_matches(self.home / STAMP, PACKAGE)


def litellm_available(home: Path | None = None) -> tuple[bool, str]:
    """Whether a complete install is at ``home`` (default ``litellm_home()``), and a sentence why
    (when not: how to make one). Starts nothing."""
    install = Install(home or litellm_home())
    if not install.complete:
        return False, f"no complete {PACKAGE} install at {install.home}: run 'python -m loadtests litellm setup'"
    return True, f"{PACKAGE} installed at {install.home}"


def _step(step: str, command: list[str], log: Path) -> str:
    return run_step("litellm", step, command, log, error=LiteLLMError)


def ensure_installed(home: Path | None = None, say: Callable[[str], None] = print) -> Install:
    """A complete install at ``home`` (default ``litellm_home()``): reused when complete, else made
    with this process's Python (about a minute and 0.8 GB), each step said through ``say``."""
    install = Install(home or litellm_home())
    if install.complete:
        say(f"litellm setup: reusing the complete install at {install.home}")
        return install
    install.begin(STAMP, HOME_ENV, LiteLLMError)
    say(f"litellm setup: installing {PACKAGE} into {install.home} (log: {install.log})")
    if not install.python.exists():
        say(f"litellm setup: [1/3] creating a venv ({sys.executable})")
        _step("python -m venv", [sys.executable, "-m", "venv", str(install.home)], install.log)
    pip = [str(install.python), "-m", "pip", "install", "--disable-pip-version-check"]
    say(f"litellm setup: [2/3] pip install {PACKAGE}")
    _step(f"pip install {PACKAGE}", [*pip, PACKAGE], install.log)
    say("litellm setup: [3/3] checking: 'litellm --version'")
    reported = _step("litellm --version", [str(install.litellm), "--version"], install.log)
    (install.home / STAMP).write_text(dump({"recipe": PACKAGE, "litellm": reported}))
    return install


def upstream_models(upstream: str, api_key: str | None, timeout: float = MODELS_TIMEOUT_S) -> list[str]:
    """The model ids ``upstream`` lists at ``/v1/models``: the names the gateway routes."""
    request = urllib.request.Request(f"{upstream.rstrip('/')}/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            listed = json.load(response)
        models = [str(entry["id"]) for entry in listed["data"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ServerStartError(f"--proxy litellm: {upstream}/v1/models did not list models ({exc})") from None
    if not models:
        raise ServerStartError(f"--proxy litellm: {upstream}/v1/models lists no model for the gateway to route")
    return models


def gateway_config(upstream: Upstream, models: list[str], read_timeout: float) -> str:
    """LiteLLM's config (JSON, which its YAML reader takes): each model routed to the upstream as
    ``hosted_vllm/<model>``, ``timeout`` and ``stream_timeout`` the read timeout, no retries."""
    params = {
        "api_base": f"http://{upstream.address}/v1",
        "api_key": f"os.environ/{UPSTREAM_KEY_ENV}",
        "timeout": read_timeout,
        "stream_timeout": read_timeout,
        "max_retries": 0,
    }
    config = {
        "model_list": [
            {"model_name": model, "litellm_params": {"model": f"hosted_vllm/{model}", **params}} for model in models
        ],
        "litellm_settings": {"request_timeout": read_timeout, "num_retries": 0, "telemetry": False},
        "router_settings": {"num_retries": 0, "timeout": read_timeout},
    }
    return dump(config)


def start_litellm(
    upstream: str, read_timeout: float, api_key: str | None = None, timeout: float = READY_TIMEOUT_S
) -> ChildService:
    """LiteLLM's proxy in front of ``upstream`` (an ``http://`` URL), under our watchdog (as
    ``loadtests.services.proxies.real.RealProxy.launch``): ready once it accepts connections, which its
    server does only after its start-up completes. Its config and logs live in a fresh temporary
    directory, removed when it stops."""
    available, reason = litellm_available()
    if not available:
        raise ServerStartError(f"--proxy litellm: {reason}")
    address = Upstream.of(upstream, "litellm")
    models = upstream_models(upstream, api_key)
    directory = Path(tempfile.mkdtemp(prefix="sse-soak-litellm-"))
    port = free_loopback_port()
    (directory / "config.yaml").write_text(gateway_config(address, models, read_timeout))
    command = [str(Install(litellm_home()).litellm), "--config", str(directory / "config.yaml")]
    command += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    env = {**GATEWAY_ENV, UPSTREAM_KEY_ENV: api_key or NO_KEY}
    return start_watched("litellm", command, directory, port, timeout, env)


UPSTREAM_CAUSES: tuple[tuple[str, str], ...] = (
    (r"\btime(?:d)? ?out\b|timeout", "its own read timeout"),
    (r"cannot connect to host|connect call failed|connection refused", "the server refused the connection"),
    (
        r"response payload is not completed|transferencodingerror|server disconnected|remoteprotocolerror|"
        r"peer closed connection|incomplete chunked read|connection reset",
        "the server dropped the connection mid-response",
    ),
    (r"connection error", "the connection to the server failed (refused or dropped)"),
)
"""What LiteLLM's own error messages say happened upstream (measured, 1.108.7, in front of the bundled
server): ``litellm.APIConnectionError: ... Connection error.`` (completions: refused, or dropped
mid-stream), ``... Cannot connect to host ... [Connect call failed ...]`` (chat, refused),
``... Response payload is not completed: <TransferEncodingError ...>`` (chat, dropped mid-stream),
``litellm.Timeout`` / ``... Timeout on reading data from socket`` (its timer). Any other message of
its own (``litellm.InternalServerError: ... - <the server's message>``) relays the server's error."""


@dataclass(frozen=True, kw_only=True)
class LiteLLMGateway(ProxyKind):
    """LiteLLM's gateway: available once installed (``python -m loadtests litellm setup``)."""

    def available(self) -> tuple[bool, str]:
        return litellm_available()

    def start(self, front: Front) -> ChildService:
        return start_litellm(front.upstream, front.read_timeout, front.api_key)


KIND = LiteLLMGateway(
    name="litellm",
    order=7,
    display_name="LiteLLM",
    recognised_by=r"litellm",
    recognition_rank=80,
    withholds_keep_alive=True,
    described="LiteLLM's gateway, in its own venv: 'python -m loadtests litellm setup' first; it strips keep-alive "
    "comments",
    read_timeout_setting="LiteLLM's timeout and stream_timeout",
    own_error=r"^litellm\.\w+:",
    upstream_causes=UPSTREAM_CAUSES,
)

__all__ = [
    "HOME_ENV",
    "KIND",
    "LITELLM_VERSION",
    "PACKAGE",
    "Install",
    "ensure_installed",
    "gateway_config",
    "litellm_available",
    "litellm_home",
    "start_litellm",
    "upstream_models",
]
