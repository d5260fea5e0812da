"""Several hosts on one machine: Linux network namespaces, each with an address of its own on one
private link, for tests of a Locust cluster whose master, workers and server are on different hosts.

``Hosts(["master", "worker-a", ...])`` makes a hub namespace holding a bridge and, per host, a
namespace whose ``eth0`` (a veth whose peer sits on the bridge) has ``10.231.0.N/24`` (N from 1, in
the order given) and whose loopback is up. Nothing touches the machine's own namespace: its
interfaces, routes and firewall stay as they were. ``run(host, argv)`` starts a process inside a
host (``ip netns exec`` execs it: the process id is the command's own); ``delay(host, ms)`` adds
``tc netem`` latency to what a host sends. ``close()`` kills what ``run`` started, by its process
id, and deletes every namespace (their veths go with them). Needs root, ``ip`` and ``tc``;
``available()`` says whether this machine allows them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any

SUBNET = "10.231.0"


def available() -> tuple[bool, str]:
    """Whether network namespaces can be made here, and why not."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which("ip") is None:
        return False, "no 'ip' command (iproute2)"
    probe = f"sse-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return False, f"'ip netns add' failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, "ip netns works"


class Hosts:
    """Hosts in namespaces of their own on one bridged link (module docstring)."""

    def __init__(self, names: Sequence[str]) -> None:
        self._tag = uuid.uuid4().hex[:6]
        self.names = list(names)
        self.namespaces = {name: f"sse-{self._tag}-{name}" for name in names}
        self.addresses = {name: f"{SUBNET}.{index}" for index, name in enumerate(names, start=1)}
        self._hub = f"sse-{self._tag}-hub"
        self._processes: list[subprocess.Popen[Any]] = []
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def _build(self) -> None:
        self._add_namespace(self._hub)
        self._ip("-n", self._hub, "link", "add", "br0", "type", "bridge")
        self._ip("-n", self._hub, "link", "set", "br0", "up")
        for index, name in enumerate(self.names, start=1):
            namespace = self.namespaces[name]
            self._add_namespace(namespace)
            port = f"h{index}"
            self._ip("-n", self._hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            self._ip("-n", self._hub, "link", "set", port, "master", "br0", "up")
            self._ip("-n", namespace, "addr", "add", f"{self.addresses[name]}/24", "dev", "eth0")
            self._ip("-n", namespace, "link", "set", "eth0", "up")

    def _add_namespace(self, namespace: str) -> None:
        self._ip("netns", "add", namespace)
        self._made.append(namespace)
        self._ip("-n", namespace, "link", "set", "lo", "up")

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as run inside ``host``."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def run(self, host: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``host``; ``close()`` stops it if it is still running."""
        process = subprocess.Popen(self.command(host, argv), **popen)
        self._processes.append(process)
        return process

    def delay(self, host: str, milliseconds: int) -> None:
        """Delay every packet ``host`` sends by ``milliseconds`` (``tc netem``)."""
        delay = f"{milliseconds}ms"
        self._ip(
            "netns", "exec", self.namespaces[host], "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", delay
        )

    def close(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        self._processes.clear()
        while self._made:
            subprocess.run(["ip", "netns", "del", self._made.pop()], capture_output=True)

    def __enter__(self) -> Hosts:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
