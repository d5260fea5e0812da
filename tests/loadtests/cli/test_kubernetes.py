"""``python -m loadtests kubernetes``: the manifests of a Locust cluster, and the examples checked in.

Every document is checked against the Kubernetes API's own schemas (kubernetes-validate, offline:
the schemas ship with it), strictly: an unknown field is an error, as ``kubectl apply`` makes it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the test extra
import kubernetes_validate  # type: ignore[import-untyped]  # ships no types
import pytest
import yaml

from loadtests.cli.commands import main
from tests.loadtests.locust_run import ROOT

pytestmark = pytest.mark.fast
KUBERNETES_VERSION = "1.30"
EXAMPLES = ROOT / "deploy" / "kubernetes"
RENDERED_BY = "# Rendered by: "
BASE = ["--scenario", "mixed_truncate", "--host", "http://vllm:8000", "--image", "sse-soak:0.1.0"]


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["kubernetes", *argv])
    out, err = capsys.readouterr()
    assert (exited.value.code, err) == (0, ""), err
    return out


def documents(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The documents by kind and name (``Job``, ``...-master``)."""
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(text)}


def job(docs: dict[tuple[str, str], dict[str, Any]], component: str) -> dict[str, Any]:
    (found,) = [doc for (kind, name), doc in docs.items() if kind == "Job" and name.endswith(f"-{component}")]
    return found


def args(job: dict[str, Any]) -> list[str]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def flag(arguments: list[str], name: str) -> str:
    (value,) = [argument.split("=", 1)[1] for argument in arguments if argument.startswith(f"{name}=")]
    return value


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def test_the_examples_are_two_worker_counts() -> None:
    assert [path.name for path in examples()] == ["mixed_truncate-2-workers.yaml", "mixed_truncate-4-workers.yaml"]


@pytest.mark.parametrize("example", examples(), ids=lambda path: path.name)
def test_each_example_is_what_its_own_command_renders_today(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = example.read_text()
    (command,) = [line.removeprefix(RENDERED_BY) for line in text.splitlines() if line.startswith(RENDERED_BY)]
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "loadtests", "kubernetes"]
    assert render(capsys, *words[4:]) == text, f"stale: rerun {command} > {example.relative_to(ROOT)}"


def rendered_texts() -> list[Any]:
    more = [*BASE, "--workers", "3", "--api-key-secret", "vllm-key", "--namespace", "load", "--", "--model", "m"]
    live = [*BASE, "--workers", "2", "--live-metrics-port", "9100"]
    return [
        *(pytest.param(path.read_text(), id=path.name) for path in examples()),
        pytest.param(more, id="options"),
        pytest.param(live, id="live_metrics"),
    ]


@pytest.mark.parametrize("given", rendered_texts())
def test_every_document_is_valid_against_the_kubernetes_schemas(
    given: str | list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = given if isinstance(given, str) else render(capsys, *given)
    docs = list(yaml.safe_load_all(text))
    assert [doc["kind"] for doc in docs] == ["PersistentVolumeClaim", "Service", "Job", "Job"]
    for doc in docs:
        assert kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True) == KUBERNETES_VERSION


def test_the_validator_refuses_a_field_kubernetes_does_not_know(capsys: pytest.CaptureFixture[str]) -> None:
    master = job(documents(render(capsys, *BASE, "--workers", "1")), "master")
    master["spec"]["retries"] = 0
    with pytest.raises(jsonschema.ValidationError):
        kubernetes_validate.validate(master, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("workers", [1, 4])
def test_master_and_workers_share_a_fresh_run_id_and_the_worker_count(
    workers: int, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = documents(render(capsys, *BASE, "--workers", str(workers), "-t", "90s"))
    master, crew = job(docs, "master"), job(docs, "workers")
    run_id = flag(args(master), "--run-id")
    assert flag(args(crew), "--run-id") == run_id and len(run_id) == 16
    assert run_id != flag(args(job(documents(render(capsys, *BASE, "--workers", "1")), "master")), "--run-id")
    assert (crew["spec"]["parallelism"], crew["spec"]["completions"]) == (workers, workers)
    assert flag(args(master), "--expect-workers") == str(workers)
    assert (master["spec"]["parallelism"], master["spec"]["completions"]) == (1, 1)
    assert flag(args(master), "--run-time") == "90s"
    for each in (master, crew):  # no silent rerun of a load test; bounded above the run time
        assert each["spec"]["backoffLimit"] == 0
        assert each["spec"]["activeDeadlineSeconds"] > 90 + int(flag(args(master), "--expect-workers-max-wait"))
        assert each["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        (container,) = each["spec"]["template"]["spec"]["containers"]
        assert set(container["resources"]) == {"requests", "limits"}


def test_the_workers_reach_the_masters_service_and_the_master_keeps_its_run_on_the_claim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = documents(render(capsys, *BASE, "--workers", "2", "--run-id", "r1"))
    master, crew = job(docs, "master"), job(docs, "workers")
    service = docs["Service", "sse-soak-mixed-truncate-r1-master"]
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= crew["spec"]["template"]["metadata"]["labels"].items()
    port = service["spec"]["ports"][0]["port"]
    assert flag(args(crew), "--master-host") == "sse-soak-mixed-truncate-r1-master"
    assert flag(args(crew), "--master-port") == flag(args(master), "--master-bind-port") == str(port)
    assert flag(args(master), "--master-bind-host") == "0.0.0.0"  # the scenarios bind 127.0.0.1 unless told
    assert args(crew)[:2] == args(master)[:2] == ["run", "mixed_truncate"]
    assert flag(args(master), "--host") == flag(args(crew), "--host") == "http://vllm:8000"
    (mount,) = master["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    (volume,) = master["spec"]["template"]["spec"]["volumes"]
    assert flag(args(master), "--report-dir") == mount["mountPath"]
    claim = docs["PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_an_api_key_travels_from_a_secret_never_in_the_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    docs = documents(render(capsys, *BASE, "--workers", "1", "--api-key-secret", "vllm-key"))
    for component in ("master", "workers"):
        (container,) = job(docs, component)["spec"]["template"]["spec"]["containers"]
        assert container["env"] == [
            {"name": "SSE_SOAK_API_KEY", "valueFrom": {"secretKeyRef": {"name": "vllm-key", "key": "api-key"}}}
        ]
        assert not any("api-key" in argument for argument in container["args"])


def service_ports(docs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    (service,) = [doc for (kind, _), doc in docs.items() if kind == "Service"]
    return {port["name"]: port for port in service["spec"]["ports"]}


@pytest.mark.parametrize(("given", "port"), [(["--live-metrics"], 9646), (["--live-metrics-port", "9100"], 9100)])
def test_live_metrics_are_served_by_the_master_on_every_interface_and_exposed_for_prometheus(
    given: list[str], port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = documents(render(capsys, *BASE, "--workers", "2", *given))
    master, crew = job(docs, "master"), job(docs, "workers")
    assert flag(args(master), "--live-metrics-port") == str(port)
    assert flag(args(master), "--live-metrics-bind") == "0.0.0.0"  # the harness binds 127.0.0.1 unless told
    linger = int(flag(args(master), "--live-metrics-linger"))  # a last scrape of the final figures
    assert linger >= 2 * 60  # two of Prometheus's default scrape intervals
    deadline_without = job(documents(render(capsys, *BASE, "--workers", "2")), "master")["spec"][
        "activeDeadlineSeconds"
    ]
    assert master["spec"]["activeDeadlineSeconds"] == deadline_without + linger
    assert not any(argument.startswith("--live-metrics") for argument in args(crew))  # the master holds the results
    (container,) = master["spec"]["template"]["spec"]["containers"]
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert service_ports(docs)["metrics"] == {"name": "metrics", "port": port, "targetPort": port}
    assert master["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }
    (worker_container,) = crew["spec"]["template"]["spec"]["containers"]
    assert "ports" not in worker_container and "annotations" not in crew["spec"]["template"]["metadata"]
    unasked = documents(render(capsys, *BASE, "--workers", "2"))  # off unless asked, as the harness's option
    assert not any(argument.startswith("--live-metrics") for argument in args(job(unasked, "master")))
    assert set(service_ports(unasked)) == {"locust-master"}
    assert "annotations" not in job(unasked, "master")["spec"]["template"]["metadata"]


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["kubernetes", *argv])
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, ""), err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.rstrip("\n")


K8S = "python -m loadtests kubernetes: "
HOST = ["--host", "http://vllm:8000"]
REST = ["--image", "sse-soak:0.1.0", "--workers", "2"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        pytest.param(
            ["--scenario", "mixed_truncate", *HOST, "--image", "i", "--workers", "0"],
            "--workers: must be at least 1, got 0",
            id="no_workers",
        ),
        pytest.param(
            ["--scenario", "mixed_truncate", "--host", "vllm:8000", *REST],
            "--host: expected an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000, got 'vllm:8000'",
            id="host_without_scheme",
        ),
        pytest.param(
            ["--scenario", "nope", *HOST, *REST],
            "--scenario: nope: no such shipped scenario (the image holds: mixed_truncate, proxy_timeout, "
            "slow_prefill, soak)",
            id="unknown_scenario",
        ),
        pytest.param(
            ["--scenario", "soak", "--host", "http://user:pw@vllm:8000", *REST],
            "--host: credentials or a query in the URL would sit in the manifests in plain text: give the host "
            "alone and the token as --api-key-secret",
            id="credentials_in_host",
        ),
        pytest.param(
            ["--scenario", "soak", *HOST, *REST, "--run-id", "Run_1"],
            "--run-id: expected lower-case letters, digits and inner dashes (a Kubernetes name, at most 63), "
            "got 'Run_1'",
            id="run_id_no_name",
        ),
        pytest.param(
            ["--scenario", "mixed_truncate", *HOST, *REST, "--run-id", "a" * 40],
            f"--run-id {'a' * 40!r} is too long for this scenario's names: at most 31",
            id="run_id_too_long",
        ),
        pytest.param(
            ["--scenario", "soak", *HOST, *REST, "-t", "0.5s"],
            "-t/--run-time: '0.5s' is under 1 s, the resolution of Locust's -t (which reads 0s as no limit); use "
            "at least 1s",
            id="run_time_under_a_second",
        ),
        pytest.param(
            ["--scenario", "soak", *HOST, *REST, "--storage", "lots"],
            "--storage: expected a positive Kubernetes quantity such as 1Gi or 500Mi, got 'lots'",
            id="storage",
        ),
        pytest.param(["--scenario", "soak", *HOST, "--workers", "2"], "the following arguments are required: --image"),
        pytest.param(
            ["--scenario", "proxy_timeout", *HOST, *REST, "--", "--proxy=nginx"],
            "--proxy nginx: the master's pod would start it on its own loopback, out of the worker pods' reach: put "
            "any proxy in front of --host yourself, and scale with --workers",
            id="proxy_in_the_master_pod",
        ),
        pytest.param(
            ["--scenario", "soak", *HOST, *REST, "--live-metrics-port", "5557"],
            "--live-metrics-port: 5557 is the master's Locust port: choose another",
            id="live_metrics_on_the_master_port",
        ),
        pytest.param(
            ["--scenario", "soak", *HOST, *REST, "--live-metrics-port", "70000"],
            "--live-metrics-port: expected a TCP port from 1 to 65535, got '70000'",
            id="live_metrics_port_out_of_range",
        ),
        pytest.param(
            ["--scenario", "soak", *HOST, *REST, "--", "--live-metrics-port=9646"],
            "--live-metrics-port after -- would go to every worker and open no port on the pods: give "
            "--live-metrics (or --live-metrics-port PORT) to this command instead",
            id="live_metrics_after_the_dashes",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    said = usage_error(capsys, *argv)
    assert said.startswith(K8S) and said.endswith(line), said
