"""``--proxy apache``: Debian's Apache httpd with mod_proxy_http, its ``ProxyTimeout`` (whole seconds)
the read timeout."""

from __future__ import annotations

import os
from pathlib import Path

from loadtests.services.proxies.real import CLIENT_SIDE_TIMEOUT_S, RealProxy, Setup

APACHE_MODULES = Path("/usr/lib/apache2/modules")
"""Where Debian's apache2 keeps its loadable modules (the mpm and the proxy)."""

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


KIND = RealProxy(
    name="apache",
    described="Debian's package",
    read_timeout_setting="Apache's ProxyTimeout (in whole seconds, rounded up)",
    order=5,
    display_name="Apache",
    recognised_by=r"apache",
    recognition_rank=30,
    binary="apache2",
    package="apache2",
    config_file="apache2.conf",
    render=apache_config,
    command=lambda binary, d: [binary, "-d", str(d), "-f", str(d / "apache2.conf"), "-DFOREGROUND"],
    whole_seconds=True,
)
