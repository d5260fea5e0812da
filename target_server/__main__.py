"""``python -m target_server`` / ``target-server``: serve on loopback and print one ready line.

The ready line, ``target_server ready: http://HOST:PORT (model MODEL)``, is printed only once the
socket accepts connections, so a parent process can wait on it instead of sleeping. ``--port 0``
binds a free port first and the line tells which. Started by the harness, the server also stops
when the harness dies, and a refusal to start (a bad option, a port taken) is also printed on
stdout as ``target_server failed: REASON`` for the harness to quote (``lifeline``). With
``--api-server-count N`` above 1 this process binds the socket and runs N server processes on it
(``api_servers``), and prints the same ready line once all N accept connections.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence

import uvicorn

from sse_soak_lifeline import READY_PREFIX, announce_refusal, exit_when_stdin_closes
from target_server import api_servers
from target_server.app import create_app
from target_server.config import ServerConfig
from target_server.faults import InjectedDisconnect
from target_server.share import SOLE, ProcessShare

__all__ = ["READY_PREFIX", "listening_socket", "main", "serve"]
SWITCH_INTERVAL_S = 0.001
"""The longest the event loop waits for the GIL while an intake thread (``intake.prepare``: JSON,
validation, tokenization) runs Python. CPython's 5 ms default let one long prompt's tokenization
hold every other stream's next frame up to 5 ms at a time, and made the frame trace's stamps early
by as much."""


class _HideInjectedDisconnects(logging.Filter):
    """An injected disconnect is the server doing its job; don't log it as a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, InjectedDisconnect)


def socket_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"


def ready_line(url: str, model: str) -> str:
    return f"{READY_PREFIX}{url} (model {model})"


class _AnnouncingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, url: str, model: str) -> None:
        super().__init__(config)
        self._ready_line = ready_line(url, model)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self._ready_line, flush=True)


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket whose accepted connections asyncio will set to TCP_NODELAY.

    proto must be IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and
    without it every small frame after the first waits ~40 ms for the client's delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(config: ServerConfig, argv: Sequence[str] = ()) -> None:
    """Run until SIGINT/SIGTERM (or EOF on stdin, when the harness asked for that). With
    ``--api-server-count`` above 1, as the parent of that many processes started with ``argv``; in
    such a child (``api_servers.inherited``), as its share on the socket it inherited."""
    child = api_servers.inherited()
    exit_when_stdin_closes()
    if child is not None:
        share, sock = child
        _run(config, sock, share)
        return
    try:
        sock = listening_socket(config.host, config.port)
    except OSError as exc:
        reason = f"cannot listen on {config.host}:{config.port}: {exc.strerror}"
        announce_refusal(reason)
        sys.exit(f"target-server: {reason}")
    if config.api_server_count > 1:
        line = ready_line(socket_url(sock), config.model)
        api_servers.supervise(config.api_server_count, sock, argv, line)
    else:
        _run(config, sock, SOLE)


def _run(config: ServerConfig, sock: socket.socket, share: ProcessShare) -> None:
    """Serve ``sock`` in this process, as server process ``share``."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    uv_config = uvicorn.Config(
        create_app(config, share), log_level=config.log_level, access_log=False, timeout_graceful_shutdown=2
    )
    logging.getLogger("uvicorn.error").addFilter(_HideInjectedDisconnects())
    # uvloop and httptools, as vLLM runs
    _AnnouncingServer(uv_config, socket_url(sock), config.model).run(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    serve(ServerConfig.from_args(args), args)


if __name__ == "__main__":
    main()
