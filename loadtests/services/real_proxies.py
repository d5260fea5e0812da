"""Real reverse proxies in front of the server: nginx, HAProxy, Caddy, Apache httpd and Squid.

Each is the Debian package's own binary, started by the run with a config of ours written to a
fresh temporary directory (with its pid file, logs and temp files), listening on a free loopback
port, in the foreground, under our watchdog (``python -m loadtests.services.parent_watch``) so that it
stops when the run's process is gone, even by SIGKILL. Readiness is an accepted TCP connection:
none of them prints a ready line. Invariant: a proxy that ``start_real_proxy`` returned accepts
connections; after ``stop()`` its processes have exited and its directory is gone.

Every config is SSE-ready where the proxy lets it be (no response buffering, no compression, no
cache, HTTP/1.1 upstream, every request header forwarded) and sets the one timeout the run tests
from ``--proxy-read-timeout``: the longest silence from upstream the proxy tolerates, before and
after the response headers. The client side's own timeouts are set far above it, so the proxy's
read timeout is what cuts a silent stream, never its client timeout. Where a proxy adds something
of its own by default (HAProxy's write delay), the config keeps that default, as users run it, and
says so: the run measures the proxy people deploy, not a tuned one.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from loadtests.base.ports import free_loopback_port
from loadtests.errors import InvalidValue, ServerStartError
from loadtests.services.stack import ChildService

APACHE_MODULES = Path("/usr/lib/apache2/modules")
"""Where Debian's apache2 keeps its loadable modules (the mpm and the proxy)."""
CLIENT_SIDE_TIMEOUT_S = 3600
"""Timeouts on the client's side of each proxy: far above any read timeout a run tests."""


@dataclass(frozen=True)
class Upstream:
    """The server behind the proxy: plain HTTP, a host and a port."""

    host: str
    port: int

    @classmethod
    def of(cls, url: str, kind: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ServerStartError(f"--proxy {kind} fronts an http:// server only, not {url.split('://')[0]}://")
        return cls(parts.hostname, parts.port or 80)

    @property
    def address(self) -> str:
        """``host:port``, an IPv6 literal in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Setup:
    """What a config is made of: where its files go, where it listens, what it fronts, its timeout."""

    directory: Path
    port: int
    upstream: Upstream
    read_timeout: float
    no_delay: bool = False
    """HAProxy only: ``option http-no-delay`` (off by default, as users run it)."""

    @property
    def read_timeout_ms(self) -> int:
        return round(self.read_timeout * 1000)

    @property
    def whole_seconds(self) -> int:
        """The read timeout for proxies that take whole seconds, rounded up (never shorter)."""
        return whole_seconds(self.read_timeout)


def whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds))


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


HAPROXY_CONFIG = """\
# Written by sse-soak for one run; HAProxy in the foreground (-db), on loopback.
# timeout server is the longest silence from upstream, before and after the response headers.
# Without "option http-no-delay" (HAProxy's default, as users run it) HAProxy may hold a write
# for up to ~200 ms to merge it with the next: frames arrive late and batched.
global
    maxconn 8192
defaults
    mode http
    timeout connect 10s
    timeout client {client_timeout}s
    timeout server {read_timeout_ms}ms
{no_delay}frontend sse
    bind 127.0.0.1:{port}
    default_backend upstream
backend upstream
    server upstream {upstream}
"""


def haproxy_config(setup: Setup) -> str:
    return HAPROXY_CONFIG.format(
        client_timeout=CLIENT_SIDE_TIMEOUT_S,
        read_timeout_ms=setup.read_timeout_ms,
        no_delay="    option http-no-delay\n" if setup.no_delay else "",
        port=setup.port,
        upstream=setup.upstream.address,
    )


def caddy_config(setup: Setup) -> str:
    """Caddy's JSON config: one server on loopback, ``reverse_proxy`` flushing every write at once
    (``flush_interval`` -1), its transport's ``read_timeout`` (between two reads) and
    ``response_header_timeout`` (until the headers) both the read timeout; no admin endpoint, no
    automatic HTTPS, logs in the directory, a short grace period so a stop does not wait on streams."""
    timeout = f"{setup.read_timeout_ms}ms"
    proxy = {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": setup.upstream.address}],
        "flush_interval": -1,
        "transport": {"protocol": "http", "read_timeout": timeout, "response_header_timeout": timeout},
    }
    server = {
        "listen": [f"127.0.0.1:{setup.port}"],
        "automatic_https": {"disable": True},
        "routes": [{"handle": [proxy]}],
    }
    config = {
        "admin": {"disabled": True, "config": {"persist": False}},
        "logging": {
            "logs": {
                "default": {
                    "level": "WARN",
                    "writer": {"output": "file", "filename": str(setup.directory / "error.log")},
                }
            }
        },
        "apps": {"http": {"grace_period": "1s", "servers": {"sse": server}}},
    }
    return json.dumps(config, indent=2) + "\n"


APACHE_CONFIG = """\
# Written by sse-soak for one run; Apache httpd in the foreground (-DFOREGROUND), on loopback.
# mod_proxy_http: ProxyTimeout and timeout= (whole seconds) are the longest silence from upstream;
# flushpackets=on sends each read from upstream on at once.
ServerRoot "{directory}"
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile "{directory}/apache2.pid"
ErrorLog "{directory}/error.log"
LogLevel warn
DefaultRuntimeDir "{directory}"
LoadModule mpm_event_module {modules}/mod_mpm_event.so
LoadModule authz_core_module {modules}/mod_authz_core.so
LoadModule proxy_module {modules}/mod_proxy.so
LoadModule proxy_http_module {modules}/mod_proxy_http.so
{user}StartServers 1
ServerLimit 4
ThreadsPerChild 64
MaxRequestWorkers 256
MinSpareThreads 16
MaxSpareThreads 256
Timeout {client_timeout}
KeepAlive On
ProxyRequests Off
ProxyTimeout {seconds}
ProxyPass "/" "http://{upstream}/" timeout={seconds} flushpackets=on
"""


def apache_config(setup: Setup) -> str:
    user = ""
    if os.geteuid() == 0:  # as root, Apache serves as an unprivileged user (Debian's www-data)
        user = "User www-data\nGroup www-data\n"
    return APACHE_CONFIG.format(
        directory=setup.directory,
        port=setup.port,
        modules=APACHE_MODULES,
        user=user,
        client_timeout=CLIENT_SIDE_TIMEOUT_S,
        seconds=setup.whole_seconds,
        upstream=setup.upstream.address,
    )


SQUID_CONFIG = """\
# Written by sse-soak for one run; Squid as a reverse proxy (accelerator) in the foreground (-N),
# on loopback, caching nothing. read_timeout (whole seconds) is the longest silence from upstream.
http_port 127.0.0.1:{port} accel defaultsite={upstream} no-vhost
cache_peer {host} parent {upstream_port} 0 no-query no-digest originserver name=upstream
cache_peer_access upstream allow all
never_direct allow all
http_access allow all
cache deny all
read_timeout {seconds} seconds
request_timeout {client_timeout} seconds
client_lifetime {client_timeout} seconds
shutdown_lifetime 0 seconds
visible_hostname sse-soak
{user}pid_filename {directory}/squid.pid
cache_log {directory}/error.log
access_log none
coredump_dir {directory}
netdb_filename none
pinger_enable off
"""

SQUID_USER = "proxy"
"""Debian's user for Squid, which refuses to serve as root."""


def squid_config(setup: Setup) -> str:
    return SQUID_CONFIG.format(
        port=setup.port,
        upstream=setup.upstream.address,
        host=setup.upstream.host,
        upstream_port=setup.upstream.port,
        seconds=setup.whole_seconds,
        client_timeout=CLIENT_SIDE_TIMEOUT_S,
        user=f"cache_effective_user {SQUID_USER}\n" if os.geteuid() == 0 else "",
        directory=setup.directory,
    )


@dataclass(frozen=True)
class RealProxy:
    """One kind of real proxy: its binary and Debian package, its config, how it runs in the foreground."""

    kind: str
    binary: str
    package: str
    config_file: str
    render: Callable[[Setup], str]
    command: Callable[[str, Path], list[str]]
    """The argv that runs it in the foreground, given its binary and its directory."""
    whole_seconds: bool = False
    """It takes its read timeout in whole seconds only (a fraction is rounded up)."""
    run_as: str | None = None
    """The user it serves as when started as root: its directory must be that user's."""


def _nginx_render(setup: Setup) -> str:
    return nginx_config(setup.directory, setup.port, f"http://{setup.upstream.address}", setup.read_timeout)


REAL_PROXIES: dict[str, RealProxy] = {
    proxy.kind: proxy
    for proxy in (
        RealProxy(
            "nginx",
            "nginx",
            "nginx",
            "nginx.conf",
            _nginx_render,
            lambda binary, d: [binary, "-p", str(d), "-c", str(d / "nginx.conf"), "-e", str(d / "error.log")],
        ),
        RealProxy(
            "haproxy",
            "haproxy",
            "haproxy",
            "haproxy.cfg",
            haproxy_config,
            lambda b, d: [b, "-db", "-f", str(d / "haproxy.cfg")],
        ),
        RealProxy(
            "caddy",
            "caddy",
            "caddy",
            "caddy.json",
            caddy_config,
            lambda binary, d: [binary, "run", "--config", str(d / "caddy.json")],
        ),
        RealProxy(
            "apache",
            "apache2",
            "apache2",
            "apache2.conf",
            apache_config,
            lambda binary, d: [binary, "-d", str(d), "-f", str(d / "apache2.conf"), "-DFOREGROUND"],
            whole_seconds=True,
        ),
        RealProxy(
            "squid",
            "squid",
            "squid",
            "squid.conf",
            squid_config,
            lambda binary, d: [binary, "-N", "-f", str(d / "squid.conf")],
            whole_seconds=True,
            run_as=SQUID_USER,
        ),
    )
}
"""Every real proxy ``--proxy`` can start, by the name the option takes."""


def timeout_notes(kind: str, read_timeout: float) -> list[str]:
    """What the run should say about how ``kind`` takes the read timeout (nothing when exactly)."""
    proxy = REAL_PROXIES[kind]
    if proxy.whole_seconds and read_timeout != int(read_timeout):
        seconds = whole_seconds(read_timeout)
        return [f"{kind}: --proxy-read-timeout {read_timeout:g} runs as {seconds} s ({kind} takes whole seconds)"]
    return []


def start_real_proxy(
    kind: str, upstream: str, read_timeout: float, timeout: float = 30.0, no_delay: bool = False
) -> ChildService:
    """Real ``kind`` in front of ``upstream`` (an ``http://`` URL), under our watchdog: the service's
    process is the watchdog, which stops the proxy when this process dies, passes a stop on to it,
    and exits as the proxy did. Its config, pid file and logs live in a fresh temporary directory,
    removed when it stops."""
    proxy = REAL_PROXIES[kind]
    if no_delay and kind != "haproxy":
        raise InvalidValue("no_delay is HAProxy's option http-no-delay")
    binary = shutil.which(proxy.binary)
    if binary is None:
        raise ServerStartError(
            f"--proxy {kind} needs {proxy.binary} installed (Debian: apt-get install {proxy.package})"
        )
    setup = Setup(
        Path(tempfile.mkdtemp(prefix=f"sse-soak-{kind}-")),
        free_loopback_port(),
        Upstream.of(upstream, kind),
        read_timeout,
        no_delay,
    )
    directory = setup.directory
    (directory / proxy.config_file).write_text(proxy.render(setup))
    if proxy.run_as is not None and os.geteuid() == 0:
        _give_to(directory, proxy.run_as)
    env = {"XDG_CONFIG_HOME": str(directory), "XDG_DATA_HOME": str(directory)}  # Caddy's state
    logs = [directory / "error.log", directory / "output.log"]
    return start_watched(kind, proxy.command(binary, directory), directory, setup.port, timeout, env, logs)


def start_watched(
    name: str,
    command: list[str],
    directory: Path,
    port: int,
    timeout: float,
    env: dict[str, str] | None = None,
    logs: list[Path] | None = None,
) -> ChildService:
    """Run ``command`` (which listens on 127.0.0.1:``port``) under our watchdog, in ``directory``,
    its output in ``directory/output.log``, with ``env`` on top of this process's environment; return
    once it accepts connections. The service's process is the watchdog, which stops the command when
    this process dies, passes a stop on to it, exits as it did, and removes ``directory``. If it
    exits or ``timeout`` passes first, it is stopped and a ``ServerStartError`` quotes the last line
    of the first of ``logs`` (default: its output) that has one."""
    argv = [sys.executable, "-m", "loadtests.services.parent_watch", "--remove", str(directory), "--", *command]
    with open(directory / "output.log", "w") as output:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=directory,
        )

    def cleanup() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    service = ChildService(process, f"http://127.0.0.1:{port}", name, None, cleanup)
    try:
        wait_for_port(process, port, timeout, name, logs or [directory / "output.log"])
    except BaseException:
        service.stop()
        raise
    return service


def start_nginx(upstream: str, read_timeout: float, timeout: float = 30.0) -> ChildService:
    """Real nginx (see ``start_real_proxy``)."""
    return start_real_proxy("nginx", upstream, read_timeout, timeout)


def _give_to(directory: Path, user: str) -> None:
    """Make ``directory`` writable by ``user``, whom the proxy becomes when started as root."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ServerStartError(f"the user {user!r} the proxy serves as does not exist") from None
    os.chown(directory, entry.pw_uid, entry.pw_gid)


def wait_for_port(process: subprocess.Popen[str], port: int, timeout: float, name: str, logs: list[Path]) -> None:
    """Return once something accepts a TCP connection on 127.0.0.1:``port``; a ``ServerStartError``
    quoting the last line of the first log that has one if ``process`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"{name} exited with {process.returncode}: {_last_line(logs)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)  # polling a port: these proxies print no ready line
    raise ServerStartError(f"{name} did not accept connections on 127.0.0.1:{port} within {timeout:.0f} s")


def _last_line(logs: list[Path]) -> str:
    for log in logs:
        try:
            lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
        if lines:
            return lines[-1]
    return "(it wrote nothing)"
