"""Kubernetes manifests for a Locust cluster that runs one shipped scenario against a given host.

``Cluster`` is what the user asks for; ``manifests`` turns it into plain data, ``render`` into
multi-document YAML (``python -m loadtests kubernetes``). The documents:

- a PersistentVolumeClaim (``REPORTS_CLAIM``), mounted on the master at ``REPORT_MOUNT`` as its
  ``--report-dir``: the run directory outlives the master's pod, whose own disk goes with it (an
  emptyDir plus ``kubectl cp`` would need the pod still running, and Locust's exit ends it);
- the master: a Job of one pod (``backoffLimit: 0``: a failed load test is never silently run
  again), bound to ``0.0.0.0`` (the scenarios bind 127.0.0.1 unless told), with ``--expect-workers``
  and a bounded wait for them, ``-t``, and a Service for Locust's port ``MASTER_PORT``. Its pod's
  exit code is the verdict (0 PASS, 1 FAIL, 2 usage, 3 inconclusive; ``loadtests.errors``);
- the workers: a Job of N pods run at once (``parallelism`` = ``completions`` = N), not a
  Deployment: Locust workers exit when the master quits (or 60 s after its heartbeat stops), and
  a Job lets them end, where a Deployment would restart them against a master that is gone.

Both Jobs have ``activeDeadlineSeconds`` above the run time, master and workers the same
``--run-id`` (the master refuses any other worker: ``loadtests.record.membership``), and every object
the run's name, so that each render is a run of its own beside the earlier ones.

With ``live_metrics_port`` (``--live-metrics``), the master, which holds the cluster's results, serves
its live figures on that port on every interface (``--live-metrics-bind 0.0.0.0``; the harness binds
127.0.0.1 unless told), as the container port ``metrics`` and a port of its Service, and its pod
carries the ``prometheus.io/*`` annotations that Prometheus's Kubernetes pod discovery reads. After its
verdict the master waits up to ``LIVE_METRICS_LINGER_S`` for one more scrape (``--live-metrics-linger``),
so the final figures and gate states reach Prometheus before the pod ends. The workers serve none:
their figures reach the master with their rows.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from loadtests.declare.options import locust_arguments, option
from loadtests.errors import InvalidValue, UsageError

__all__ = ["Cluster", "manifests", "render"]

MASTER_PORT = 5557
"""Locust's ``--master-port`` (and the master's ``--master-bind-port``), its default."""
REPORT_MOUNT = "/reports"
"""Where the claim is mounted on the master: its ``--report-dir``."""
REPORTS_CLAIM = "sse-soak-reports"
"""The PersistentVolumeClaim every run of a namespace writes its run directory to."""
WORKERS_WAIT_S = 300
"""``--expect-workers-max-wait``: how long the master waits for all its workers (a worker gives up
reaching its master after Locust's 60 connection attempts of 5 s, as long)."""
START_AND_JUDGE_S = 900
"""Seconds of a Job's deadline beyond the waits and the run time: pulling the image, scheduling,
stopping the users and judging the run."""
KUBERNETES_NAME_MAX = 63
"""A Job's name is also a label value (``job-name``), at most 63 characters."""
API_KEY_SECRET_KEY = "api-key"
"""The key in ``--api-key-secret``'s Secret that holds the bearer token."""
USER_ID = 10001
"""The image's user (deploy/Dockerfile); the claim is made group-writable for it (``fsGroup``)."""
LIVE_METRICS_PORT = 9646
"""The master's live-metrics port when ``--live-metrics`` names none."""
LIVE_METRICS_LINGER_S = 120
"""``--live-metrics-linger``: two of Prometheus's default scrape intervals (1 min), so that a scrape after
the verdict comes before the master's pod ends; the master exits at that scrape."""
LIVE_METRICS_PATH = "/metrics"
"""Where the exporter serves its figures (``prometheus.io/path``)."""
LIVE_METRICS_FLAGS = ("--live-metrics-port", "--live-metrics-bind")
"""The harness's options that ``--live-metrics`` sets on the master alone."""
APP_LABEL = "app.kubernetes.io/name"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)
_QUANTITY = re.compile(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", re.ASCII)


@dataclass(frozen=True)
class Resources:
    """A container's requests and limits (Kubernetes quantities)."""

    cpu: str
    memory: str
    cpu_limit: str
    memory_limit: str

    def spec(self) -> dict[str, Any]:
        return {
            "requests": {"cpu": self.cpu, "memory": self.memory},
            "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit},
        }


MASTER_RESOURCES = Resources("1", "1Gi", "2", "4Gi")
"""The master sends no request; it writes every row and judges the run (pandas, matplotlib)."""
WORKER_RESOURCES = Resources("1", "512Mi", "1", "2Gi")
"""A Locust worker is one process on one core (gevent)."""


def dns_label(text: str) -> str:
    """``text`` if it is a DNS-1123 label (lower-case letters, digits, inner dashes; what a
    namespace, a name or a label value may be), else ``ValueError`` naming the rule."""
    if not _DNS_LABEL.fullmatch(text) or len(text) > KUBERNETES_NAME_MAX:
        raise InvalidValue(
            f"expected lower-case letters, digits and inner dashes (a Kubernetes name, at most "
            f"{KUBERNETES_NAME_MAX}), got {text!r}"
        )
    return text


def quantity(text: str) -> str:
    """``text`` if it is a Kubernetes storage quantity (``1Gi``, ``500M``), else ``ValueError``."""
    if not _QUANTITY.fullmatch(text) or not float(re.sub(r"[A-Za-z]+$", "", text)) > 0:
        raise InvalidValue(f"expected a positive Kubernetes quantity such as 1Gi or 500Mi, got {text!r}")
    return text


def image_name(text: str) -> str:
    """``text`` if it can name a container image (no space, not empty), else ``ValueError``."""
    if not text or any(char.isspace() for char in text):
        raise InvalidValue(f"expected an image reference such as registry.example.com/sse-soak:0.1.0, got {text!r}")
    return text


def metrics_port(text: str) -> int:
    """``text`` if it is a TCP port the master's live metrics may use (not Locust's ``MASTER_PORT``)."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise InvalidValue(f"expected a TCP port from 1 to 65535, got {text!r}")
    if int(text) == MASTER_PORT:
        raise InvalidValue(f"{text} is the master's Locust port: choose another")
    return int(text)


def shipped_scenario(text: str) -> str:
    """``text`` if it names a shipped scenario (the image holds those only), else ``ValueError``."""
    from loadtests.declare.catalog import shipped

    names = [scenario.name for scenario in shipped()]
    if text not in names:
        raise InvalidValue(f"{text}: no such shipped scenario (the image holds: {', '.join(names)})")
    return text


def target_host(text: str) -> str:
    """``text`` if it is an http(s) URL the manifests may show: no credentials, no query (they would
    sit in the manifests in plain text; a token goes in ``--api-key-secret``)."""
    url = option("host").kind.parse(text)
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None or parts.query:
        raise InvalidValue(
            "credentials or a query in the URL would sit in the manifests in plain text: give the host alone "
            "and the token as --api-key-secret"
        )
    return str(url)


@dataclass(frozen=True)
class Cluster:
    """One distributed run of a shipped scenario: the master, ``workers`` workers, and their options."""

    scenario: str
    host: str
    workers: int
    image: str
    run_id: str
    users: int = option("users").default
    spawn_rate: float = option("spawn_rate").default
    run_time_s: int = option("duration").default
    namespace: str = "default"
    storage: str = "1Gi"
    api_key_secret: str | None = None
    live_metrics_port: int | None = None
    """The master's live-metrics port, exposed on its pod and Service; None: no live metrics."""
    locust_args: tuple[str, ...] = field(default=())
    """More options for Locust and the scenario, given to the master and every worker."""

    def __post_init__(self) -> None:
        for flag in ("--proxy", "--server-bind", "--processes"):
            given = _value_of(self.locust_args, flag)
            if given is not None and not (flag == "--proxy" and given == "none"):
                raise UsageError(
                    f"{flag} {given}: the master's pod would start it on its own loopback, out of the worker pods' "
                    "reach: put any proxy in front of --host yourself, and scale with --workers"
                )
        for flag in LIVE_METRICS_FLAGS:
            if _value_of(self.locust_args, flag) is not None:
                raise UsageError(
                    f"{flag} after -- would go to every worker and open no port on the pods: give --live-metrics "
                    "(or --live-metrics-port PORT) to this command instead"
                )
        if len(self.name("workers")) > KUBERNETES_NAME_MAX:
            room = KUBERNETES_NAME_MAX - len(self.name("workers")) + len(self.run_id)
            raise UsageError(f"--run-id {self.run_id!r} is too long for this scenario's names: at most {room}")

    @property
    def instance(self) -> str:
        """The run's name: the scenario's and the run id."""
        return f"sse-soak-{self.scenario.replace('_', '-')}-{self.run_id}"

    def name(self, component: str) -> str:
        """The name of the run's ``component`` (master, workers)."""
        return f"{self.instance}-{component}"

    @property
    def deadline_s(self) -> int:
        """Each Job's ``activeDeadlineSeconds``: the workers' wait, the run time, the wait for a last
        scrape of the live metrics, and a margin."""
        linger = 0 if self.live_metrics_port is None else LIVE_METRICS_LINGER_S
        return WORKERS_WAIT_S + self.run_time_s + linger + START_AND_JUDGE_S

    def command(self) -> str:
        """The command line that renders these manifests, every setting spelled out."""
        words = ["python", "-m", "loadtests", "kubernetes", "--scenario", self.scenario, "--host", self.host]
        words += ["--workers", str(self.workers), "--image", self.image, "--users", str(self.users)]
        words += ["--spawn-rate", f"{self.spawn_rate:g}", "--run-time", f"{self.run_time_s}s"]
        words += ["--run-id", self.run_id, "--namespace", self.namespace, "--storage", self.storage]
        if self.api_key_secret is not None:
            words += ["--api-key-secret", self.api_key_secret]
        if self.live_metrics_port is not None:
            words += ["--live-metrics-port", str(self.live_metrics_port)]
        if self.locust_args:
            words += ["--", *self.locust_args]
        return shlex.join(words)

    def master_args(self) -> list[str]:
        return self._arguments(
            headless=True,
            master=True,
            master_bind_host="0.0.0.0",
            master_bind_port=MASTER_PORT,
            expect_workers=self.workers,
            expect_workers_max_wait=WORKERS_WAIT_S,
            users=self.users,
            spawn_rate=self.spawn_rate,
            duration=self.run_time_s,
            report_dir=REPORT_MOUNT,
            host=self.host,
            run_id=self.run_id,
            live_metrics_port=self.live_metrics_port,
            live_metrics_bind=None if self.live_metrics_port is None else "0.0.0.0",
            live_metrics_linger=None if self.live_metrics_port is None else LIVE_METRICS_LINGER_S,
        )

    def worker_args(self) -> list[str]:
        return self._arguments(
            worker=True,
            master_host=self.name("master"),
            master_port=MASTER_PORT,
            host=self.host,
            run_id=self.run_id,
            exit_code_on_error=0,  # a worker's failed requests are the master's to judge, not the worker Job's status
        )

    def _arguments(self, **values: Any) -> list[str]:
        return ["run", self.scenario, *locust_arguments(values), *self.locust_args]


def _value_of(args: Sequence[str], flag: str) -> str | None:
    """The value ``args`` give ``flag`` (``--flag V`` or ``--flag=V``; the last one wins), else None."""
    found = None
    for index, arg in enumerate(args):
        if arg == flag:
            found = args[index + 1] if index + 1 < len(args) else ""
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
    return found


def manifests(cluster: Cluster) -> list[dict[str, Any]]:
    """The run's objects, in the order to apply them: the claim, the master's Service and Job, the workers' Job."""
    master = cluster.name("master")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": REPORTS_CLAIM, "namespace": cluster.namespace, "labels": {APP_LABEL: "sse-soak"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": cluster.storage}}},
    }  # every run's, not one run's: no run's labels
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(cluster, master, "master"),
        "spec": {
            "selector": _labels(cluster, "master"),
            "ports": [
                {"name": "locust-master", "port": MASTER_PORT, "targetPort": MASTER_PORT},
                *_metrics_ports(cluster, "port", "targetPort"),
            ],
        },
    }
    volume = {"name": "reports", "persistentVolumeClaim": {"claimName": REPORTS_CLAIM}}
    mount = {"name": "reports", "mountPath": REPORT_MOUNT}
    master_container = _container(cluster, cluster.master_args(), MASTER_RESOURCES, [mount], MASTER_PORT)
    master_container["ports"] += _metrics_ports(cluster, "containerPort")
    master_job = _job(cluster, "master", 1, master_container, [volume])
    if cluster.live_metrics_port is not None:
        master_job["spec"]["template"]["metadata"]["annotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(cluster.live_metrics_port),
            "prometheus.io/path": LIVE_METRICS_PATH,
        }
    workers_job = _job(
        cluster, "workers", cluster.workers, _container(cluster, cluster.worker_args(), WORKER_RESOURCES, [], None), []
    )
    return [claim, service, master_job, workers_job]


def _metrics_ports(cluster: Cluster, *keys: str) -> list[dict[str, Any]]:
    """The live-metrics port named ``metrics`` under each of ``keys``, or none without live metrics."""
    if cluster.live_metrics_port is None:
        return []
    return [{"name": "metrics", **dict.fromkeys(keys, cluster.live_metrics_port)}]


def render(cluster: Cluster) -> str:
    """``manifests`` as multi-document YAML, headed by the command that renders them."""
    head = (
        f"# sse-soak: {cluster.scenario} on {cluster.workers} Locust workers against {cluster.host}, run id "
        f"{cluster.run_id}.\n# Rendered by: {cluster.command()}\n"
    )
    return head + yaml.safe_dump_all(manifests(cluster), sort_keys=False, explicit_start=True, width=120)


def _labels(cluster: Cluster, component: str) -> dict[str, str]:
    return {
        APP_LABEL: "sse-soak",
        "app.kubernetes.io/instance": cluster.instance,
        "app.kubernetes.io/component": component,
        "sse-soak/run-id": cluster.run_id,
    }


def _metadata(cluster: Cluster, name: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": cluster.namespace, "labels": _labels(cluster, component)}


def _container(
    cluster: Cluster, args: Sequence[str], resources: Resources, mounts: list[dict[str, Any]], port: int | None
) -> dict[str, Any]:
    env: list[dict[str, Any]] = []
    if cluster.api_key_secret is not None:  # a secret option travels in the environment, never in args
        secret = {"name": cluster.api_key_secret, "key": API_KEY_SECRET_KEY}
        env.append({"name": option("api_key").env_var, "valueFrom": {"secretKeyRef": secret}})
    container: dict[str, Any] = {
        "name": "locust",
        "image": cluster.image,
        "command": ["sse-soak"],
        "args": list(args),
        "resources": resources.spec(),
    }
    if env:
        container["env"] = env
    if port is not None:
        container["ports"] = [{"name": "locust-master", "containerPort": port}]
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _job(
    cluster: Cluster, component: str, pods: int, container: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": USER_ID, "runAsGroup": USER_ID, "fsGroup": USER_ID},
        "containers": [container],
    }
    if volumes:
        pod_spec["volumes"] = volumes
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(cluster, cluster.name(component), component),
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "activeDeadlineSeconds": cluster.deadline_s,
            "template": {"metadata": {"labels": _labels(cluster, component)}, "spec": pod_spec},
        },
    }
