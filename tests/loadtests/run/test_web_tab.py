"""The web UI's tab without a browser: its routes serve only the run directories of this process,
its table says what the run's judgement says, and the form's fields get short labels and the
scenario's values."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urljoin

import pytest
from flask import Flask

from loadtests.declare.options import LABEL_MAX, OPTIONS, Surface, label_form_fields, on, option
from loadtests.declare.scenario import Scenario
from loadtests.judge.gates import GateResult
from loadtests.judge.summary import summarize
from loadtests.record.run_dir import RunDir
from loadtests.run.web_tab import TAB, WebTab, _Test, add_routes, view_of
from tests.loadtests.tables import table

if TYPE_CHECKING:
    from locust.env import Environment  # typing only: importing Locust patches the process


def _tab_serving(tmp_path: Path) -> tuple[WebTab, Flask, RunDir]:
    run = RunDir(tmp_path / "reports" / "slow_prefill-20260101T000000Z")
    run.path.mkdir(parents=True)
    (run.path / "report.html").write_text("<title>report</title>")
    (tmp_path / "reports" / "secret.txt").write_text("not served")
    (tmp_path / "secret.txt").write_text("not served")
    environment = SimpleNamespace(runner=SimpleNamespace(state="stopped"))  # all the tab reads of Locust's
    tab = WebTab(cast("Environment", environment), dict)
    tab.test = _Test(run, [], {}, [])
    tab.runs[run.path.name] = run.path
    app = Flask(__name__)
    add_routes(app, tab)
    return tab, app, run


@pytest.mark.fast
def test_the_report_route_serves_the_runs_files_and_refuses_any_path_out_of_them(tmp_path: Path) -> None:
    _, app, run = _tab_serving(tmp_path)
    client = app.test_client()
    base = f"/sse-soak/runs/{run.path.name}"
    with client.get(f"{base}/report.html") as answer:
        assert answer.status_code == 200 and b"<title>report</title>" in answer.data
    for path in (
        f"{base}/../secret.txt",
        f"{base}/../../secret.txt",
        f"{base}/..%2Fsecret.txt",
        f"{base}/%2e%2e/%2e%2e/secret.txt",
        f"{base}//etc/passwd",
        "/sse-soak/runs/../secret.txt",
        "/sse-soak/runs/secret.txt/x",
        "/sse-soak/runs/other-run/report.html",
    ):
        with client.get(path, follow_redirects=True) as refused:  # // is merged (308) into a path in the run
            assert refused.status_code == 404, path
            assert b"not served" not in refused.data and b"root:" not in refused.data, path


@pytest.mark.fast
def test_the_last_report_is_the_judged_tests_and_none_before(tmp_path: Path) -> None:
    tab, app, run = _tab_serving(tmp_path)
    client = app.test_client()
    assert client.get("/sse-soak/report.html").status_code == 404  # not judged yet
    assert tab.test is not None
    tab.test.judged.set()
    answer = client.get("/sse-soak/report.html")
    assert answer.status_code == 302
    location = urljoin("/sse-soak/report.html", answer.headers["Location"])
    assert location == f"/sse-soak/runs/{run.path.name}/report.html"


@pytest.mark.fast
def test_locusts_stats_answer_carries_the_tabs_table(tmp_path: Path) -> None:
    tab, app, _ = _tab_serving(tmp_path)
    tab.test = None

    @app.route("/stats/requests")
    def stats() -> Any:
        return {"state": "ready", "stats": []}

    answer = json.loads(app.test_client().get("/stats/requests").data)
    assert answer["state"] == "ready"
    assert answer["extended_stats"] == [
        {
            "key": TAB,
            "data": [{"figure": "verdict", "value": "no test yet", "detail": "start one: this tab follows it"}],
        }
    ]


def _summary() -> Any:
    import pandas as pd

    inband = {"status": 200, "outcome": "inband_error", "error_code": "500", "keepalive_frames": 2}
    requests = table({"status": 200, "outcome": "ok", "keepalive_frames": 3}, {"status": 200, "outcome": "ok"}, inband)
    gates = [GateResult("no_http_500", True, "0 HTTP 500"), GateResult("keepalive_covered", False, "2 uncovered")]
    lag = pd.DataFrame(
        {"worker": ["worker-0", "worker-1"], "time": [1.0, 1.0], "t_mono": [1.0, 1.0], "lag_s": [0.002, 0.004]}
    )
    summary = summarize("slow_prefill", requests, gates, lag=lag)
    summary.point = ["keepalive_covered", "requests_completed"]
    return summary


@pytest.mark.fast
def test_the_table_shows_the_gates_so_far_then_the_verdict_and_the_report(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "slow_prefill-20260101T000000Z")
    test = _Test(run, [], {}, [])
    test.summary = _summary()
    running = view_of(test, "running")
    rows = {row["figure"]: row for row in running["rows"]}
    assert running["state"] == "running" and running["so_far"] == "FAIL"
    assert rows["verdict"]["value"].startswith("running for ") and rows["verdict"]["detail"] == "so far: FAIL"
    assert rows["gate keepalive_covered"]["value"] == "FAIL" and rows["gate no_http_500"]["value"] == "PASS"
    assert rows["in-band errors"]["value"] == 1 and rows["in-band errors"]["detail"].startswith("1 with code 500")
    assert rows["requests"]["value"] == 3 and rows["keep-alive frames"]["value"] == 5
    assert rows["harness lag"]["value"] == "p99 4.0 ms, max 4.0 ms"
    assert "worker-0: p99 2.0 ms" in rows["harness lag"]["detail"]  # every process the master heard from
    assert view_of(test, "stopping")["state"] == "judging"
    test.judged.set()
    judged = view_of(test, "stopped")
    rows = {row["figure"]: row for row in judged["rows"]}
    assert judged["verdict"] == rows["verdict"]["value"] == "FAIL"
    assert rows["report"]["value"] == judged["report"] == f"/sse-soak/runs/{run.path.name}/report.html"


@pytest.mark.fast
def test_every_form_option_has_a_short_label_shown_in_place_of_its_help() -> None:
    for item in OPTIONS:
        if Surface.LOCUST in item.surfaces and item.form:
            assert item.label and len(item.label) <= LABEL_MAX, item.name
            assert len(item.label) < len(item.help), item.name
    fields: dict[str, dict[str, Any]] = {
        "keep_alive_interval": {"help_text": option("keep_alive_interval").help, "default_value": None},
        "proxy": {"help_text": option("proxy").help, "default_value": "nginx"},  # given on the command line
        "someone_elses": {"help_text": "their help", "default_value": None},
    }
    label_form_fields(fields, {"keep_alive_interval": 0.5, "proxy": "embedded", "someone_elses": 1})
    assert fields == {
        "keep_alive_interval": {"help_text": "seconds; 0 = off", "default_value": 0.5},
        "proxy": {"help_text": "proxy in front of the server", "default_value": "nginx"},
        "someone_elses": {"help_text": "their help", "default_value": None},
    }


@pytest.mark.fast
def test_the_forms_values_are_the_scenarios_where_it_runs_them() -> None:
    scenario = Scenario("s", keep_alive_interval=0.25, proxy="embedded")
    bundled = Namespace(host=None, server="bundled")
    assert scenario.form_values(bundled) == {"proxy": "embedded", "keep_alive_interval": 0.25}
    # never assumed of a server the run did not start
    assert scenario.form_values(Namespace(host="http://h:1", server="bundled")) == {"proxy": "none"}
    assert scenario.form_values(Namespace(host=None, server="vllm")) == {"proxy": "embedded"}
    assert Scenario("plain").form_values(bundled) == {"proxy": "none"}
    assert [item.name for item in on(Surface.LOCUST) if item.form and item.label is None] == []
