"""``--proxy haproxy``: Debian's HAProxy, its ``timeout server`` the read timeout, its write delay kept."""

from __future__ import annotations

from loadtests.services.proxies.real import CLIENT_SIDE_TIMEOUT_S, RealProxy, Setup

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


KIND = RealProxy(
    name="haproxy",
    described="Debian's package",
    read_timeout_setting="HAProxy's timeout server",
    order=3,
    display_name="HAProxy",
    recognised_by=r"haproxy",
    recognition_rank=20,
    binary="haproxy",
    package="haproxy",
    config_file="haproxy.cfg",
    render=haproxy_config,
    command=lambda b, d: [b, "-db", "-f", str(d / "haproxy.cfg")],
    takes_no_delay=True,
    merges_writes=True,
)
