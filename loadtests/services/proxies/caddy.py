"""``--proxy caddy``: Debian's Caddy, its transport's ``read_timeout`` and ``response_header_timeout``
the read timeout."""

from __future__ import annotations

import json

from loadtests.services.proxies.real import RealProxy, Setup


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


KIND = RealProxy(
    name="caddy",
    described="Debian's package",
    read_timeout_setting="Caddy's read_timeout and response_header_timeout",
    order=4,
    display_name="Caddy",
    recognised_by=r"caddy",
    recognition_rank=50,
    binary="caddy",
    package="caddy",
    config_file="caddy.json",
    render=caddy_config,
    command=lambda binary, d: [binary, "run", "--config", str(d / "caddy.json")],
)
