"""``--proxy nginx``: Debian's nginx, its ``proxy_read_timeout`` the read timeout (in milliseconds)."""

from __future__ import annotations

from pathlib import Path

from loadtests.services.child import ChildService
from loadtests.services.proxies.real import RealProxy, Setup

NGINX_CONFIG = """\
# Written by sse-soak for one run; nginx in the foreground, on loopback, SSE-ready.
daemon off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {directory}/client_body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 64m;
        location / {{
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_read_timeout {read_timeout_ms}ms;
            proxy_send_timeout {read_timeout_ms}ms;
        }}
    }}
}}
"""


def nginx_config(directory: Path, port: int, upstream: str, read_timeout: float) -> str:
    """The config text: no buffering, HTTP/1.1 upstream, ``proxy_read_timeout`` in milliseconds."""
    return NGINX_CONFIG.format(
        directory=directory, port=port, upstream=upstream.rstrip("/"), read_timeout_ms=round(read_timeout * 1000)
    )


def _nginx_render(setup: Setup) -> str:
    return nginx_config(setup.directory, setup.port, f"http://{setup.upstream.address}", setup.read_timeout)


KIND = RealProxy(
    name="nginx",
    described="Debian's package",
    read_timeout_setting="nginx's proxy_read_timeout",
    order=2,
    display_name="nginx",
    recognised_by=r"nginx",
    recognition_rank=40,
    binary="nginx",
    package="nginx",
    config_file="nginx.conf",
    render=_nginx_render,
    command=lambda binary, d: [binary, "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(d / "error.log")],
)


def start_nginx(upstream: str, read_timeout: float, timeout: float = 30.0) -> ChildService:
    """Real nginx (see ``RealProxy.launch``)."""
    return KIND.launch(upstream, read_timeout, timeout)
