"""``--proxy squid``: Debian's Squid as a reverse proxy (accelerator), its ``read_timeout`` (whole
seconds) the read timeout; measured to tick its timers in whole seconds (``coarse_timer``)."""

from __future__ import annotations

import os

from loadtests.services.proxies.real import CLIENT_SIDE_TIMEOUT_S, RealProxy, Setup

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


KIND = RealProxy(
    name="squid",
    described="Debian's package",
    read_timeout_setting="Squid's read_timeout (in whole seconds, rounded up)",
    order=6,
    display_name="Squid",
    recognised_by=r"squid",
    recognition_rank=10,
    coarse_timer=True,
    binary="squid",
    package="squid",
    config_file="squid.conf",
    render=squid_config,
    command=lambda binary, d: [binary, "-N", "-f", str(d / "squid.conf")],
    whole_seconds=True,
    run_as=SQUID_USER,
)
