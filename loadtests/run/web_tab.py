"""sse-soak's tab in Locust's web UI: the test's gates and figures while it runs, then its verdict
and its report; and the form's fields as the scenario runs them.

Locust's web UI takes extra tabs through ``web_ui.template_args`` (``extended_tabs``, and
``extended_tables``: one table per tab) and fills each table from ``extended_stats`` in its
``/stats/requests`` answers, which its page polls every 2 s while a test runs (Locust's
extend-web-UI example adds them in an ``after_request`` hook, as here). So:

- While a test runs, a greenlet judges the test's run directory so far (``judge_so_far``: the
  same gates and figures as the judgement at its end) off the event loop, and only while someone
  looks (a poll in the last ``WATCHED_S``), at most every ``LIVE_INTERVAL_S`` and never more than
  a fifth of the time. The master writes every worker's rows and lag samples there, so with
  ``--processes`` the tab shows the whole run. An answer never computes: it carries the last view.
- The page stops polling once an answer says the test stopped, but the verdict comes later (the
  judgement runs in ``test_stop``). An answer to ``/stats/requests`` given while a test is being
  judged waits for its judgement (at most ``JUDGEMENT_WAIT_S``) and then says the runner's state
  as it is then: the page's last poll carries the verdict.
- ``/sse-soak/live.json`` is the same view as JSON. ``/sse-soak/runs/<run>/<file>`` serves the
  files of the run directories this process made (report.html, summary.json, ...) and nothing else:
  an unknown run is 404, and ``send_from_directory`` refuses a path out of its directory (404).
  ``/sse-soak/report.html`` is the last judged test's; the Download Data tab links it.
- The form: Locust labels a custom option ``<Name> (<its help>)`` on one line, cut with "…", and
  shows the command line's value (empty where it gave none). Before the page renders
  (``before_render_template``), each of ours gets its short ``Option.label`` instead, and an empty
  field the value the scenario runs (``Scenario.form_values``).

Only the master (or the single process) has a web UI: nothing here runs headless or on a worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from flask import Flask, Response, abort, before_render_template, jsonify, redirect, request, send_from_directory
from gevent.event import Event

from loadtests.base.safe_text import printable
from loadtests.declare.options import label_form_fields
from loadtests.errors import error_kind
from loadtests.judge.gates import Gate, GateResult, gate_is_noise, verdict_of
from loadtests.judge.summary import HarnessLag, Summary
from loadtests.record.run_dir import RunDir

if TYPE_CHECKING:  # the tab is tested without Locust, which patches the process on import
    from locust.env import Environment
    from locust.runners import Runner

TAB = "sse-soak"
"""The tab's key: its table's, and ``?tab=sse-soak`` in the page's address."""
PREFIX = "/sse-soak"
LIVE_INTERVAL_S = 2.0
"""How often the view of a running test is refreshed at most: Locust's page polls every 2 s."""
MAX_SHARE = 0.2
"""The most of the time the refreshes may take: the next waits at least four times the last's cost."""
WATCHED_S = 10.0
"""A view nobody asked for in this long is not refreshed: no page open, no cost."""
JUDGEMENT_WAIT_S = 60.0
"""How long a stats answer waits for the judgement of a test that stopped."""
DETAIL_CHARS = 240
"""A gate's detail is cut to this in the table (the report has it whole)."""
RUNNING_STATES = ("spawning", "running")
COLUMNS = [
    {"key": "figure", "title": "sse-soak"},
    {"key": "value", "title": "Value"},
    {"key": "detail", "title": "Detail"},
]


@dataclass
class _Test:
    """The test the tab shows: its run directory, how it is judged, and the last view of it."""

    run: RunDir
    gates: list[Gate]
    settings: dict[str, Any]
    point: list[str]
    started: float = field(default_factory=time.monotonic)
    summary: Summary | None = None
    """So far while it runs; its judgement's once judged."""
    judged: Event = field(default_factory=Event)
    problem: str | None = None
    """Why the view could not be made, if it could not."""
    as_of: float | None = None

    @property
    def report_path(self) -> str:
        return f"{PREFIX}/runs/{self.run.path.name}/{RunDir.REPORT}"


class WebTab:
    """The tab of one Locust process's web UI (module docstring); the run controller tells it when a
    test starts (``show``) and when it is judged (``judged``)."""

    def __init__(self, environment: Environment, form_values: Callable[[], dict[str, Any]]) -> None:
        self.environment = environment
        self.form_values = form_values
        self.test: _Test | None = None
        self.runs: dict[str, Path] = {}
        """The run directories this process made, by name: all the routes serve."""
        self._watched_at = 0.0
        self._refresher: gevent.Greenlet | None = None

    @classmethod
    def install(
        cls,
        environment: Environment,
        form_values: Callable[[], dict[str, Any]],
        form_host: Callable[[str], str] = lambda host: host,
    ) -> WebTab:
        """The tab on ``environment``'s web UI; ``form_host`` turns the host a ``/swarm`` form gives
        into the one Locust holds and answers with (the run's controller takes its credentials out)."""
        tab = cls(environment, form_values)
        web_ui = environment.web_ui
        assert web_ui is not None and web_ui.app is not None, "installed where a web UI is served"
        web_ui.template_args["extended_tabs"] = [{"title": "sse-soak", "key": TAB}]
        web_ui.template_args["extended_tables"] = [{"key": TAB, "structure": COLUMNS}]
        web_ui.template_args["extended_csv_files"] = [
            {"href": f".{PREFIX}/{RunDir.REPORT}", "title": "sse-soak: report.html of the last test"}
        ]
        add_routes(web_ui.app, tab, web_ui.auth_required_if_enabled)
        web_ui.app.before_request(lambda: _take_form_host(form_host))
        before_render_template.connect(tab._label_form, web_ui.app, weak=False)
        environment.events.test_stopping.add_listener(lambda **_: tab._stop_refreshing())
        return tab

    # -- told by the run controller -----------------------------------------------------------------
    def show(self, run: RunDir, gates: Sequence[Gate], settings: dict[str, Any], point: Sequence[str]) -> None:
        """A test started, writing into ``run``, judged by ``gates`` (and the always-on ones)."""
        self._stop_refreshing()
        self.test = _Test(run, list(gates), settings, list(point))
        self.runs[run.path.name] = run.path.resolve()
        self._refresher = gevent.spawn(self._refresh, self.test)

    def judged(self) -> None:
        """The test is judged (or its judgement ended without a summary): show what it wrote."""
        self._stop_refreshing()
        test = self.test
        if test is None or test.judged.is_set():
            return
        try:
            test.summary, test.problem = Summary.read(test.run.summary), None
        except Exception as exc:  # no summary (the disk refused it): say so, never crash the web UI
            test.problem = f"no summary.json in {test.run.path}: {error_kind(exc)}: {exc}"
        test.as_of = time.monotonic()
        test.judged.set()

    # -- the view -------------------------------------------------------------------------------
    @property
    def _runner(self) -> Runner:
        """The web UI's runner (Locust makes it before the web UI serves a page)."""
        assert self.environment.runner is not None
        return self.environment.runner

    def view(self) -> dict[str, Any]:
        """The tab's content: ``rows`` for its table and the same figures as plain JSON."""
        self._watched_at = time.monotonic()
        return view_of(self.test, self._runner.state)

    def stats_answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Locust's ``/stats/requests`` answer with the tab's table; given while a test is being
        judged, once it is (then with the runner's state as it is)."""
        test = self.test
        runner = self._runner
        judging = test is not None and not test.judged.is_set() and runner.state not in RUNNING_STATES
        if judging and test is not None and test.judged.wait(JUDGEMENT_WAIT_S):
            answer["state"] = runner.state
        return {**answer, "extended_stats": [{"key": TAB, "data": self.view()["rows"]}]}

    def _refresh(self, test: _Test) -> None:
        from loadtests.record.parts_writer import _off_loop
        from loadtests.record.run_dir import RunRecord
        from loadtests.run.judging import judge_so_far  # pandas: only once a test runs

        while not test.judged.is_set():
            began = time.monotonic()
            if began - self._watched_at < WATCHED_S:
                try:
                    test.summary = _off_loop(judge_so_far, RunRecord(test.run), test.gates, test.settings, test.point)
                    test.problem = None
                except Exception as exc:  # a part read as it was renamed, say: the next refresh tries again
                    test.problem = f"{error_kind(exc)}: {exc}"
                test.as_of = time.monotonic()
            cost = time.monotonic() - began
            gevent.sleep(max(LIVE_INTERVAL_S, cost * (1 - MAX_SHARE) / MAX_SHARE))

    def _stop_refreshing(self) -> None:
        if self._refresher is not None:
            self._refresher.kill(block=False)
            self._refresher = None

    def _label_form(self, _app: Flask, template: Any, context: dict[str, Any], **_: Any) -> None:
        fields = (context.get("template_args") or {}).get("extra_options")
        if getattr(template, "name", None) == "index.html" and fields:
            label_form_fields(fields, self.form_values())


def view_of(test: _Test | None, runner_state: str) -> dict[str, Any]:
    """The tab's view of ``test`` (None: no test yet) as the runner is in ``runner_state``: the rows
    of its table (``figure``, ``value``, ``detail``, in this order: Locust's table sorts rows by a
    ``name`` key, which they have not) and the figures they show."""
    if test is None:
        row = _row("verdict", "no test yet", "start one: this tab follows it")
        return {"state": "idle", "rows": [row]}
    judged = test.judged.is_set()
    state = "judged" if judged else "running" if runner_state in RUNNING_STATES else "judging"
    view: dict[str, Any] = {"state": state, "run_dir": str(test.run.path)}
    summary = test.summary
    if judged:
        verdict = summary.verdict if summary is not None else "not judged"
        detail = summary.verdict_line() if summary is not None else test.problem or ""
        view.update(verdict=verdict, report=test.report_path)
        rows = [_row("verdict", verdict, detail), _row("report", test.report_path, str(test.run.path))]
    else:
        so_far = None
        if summary is not None:
            so_far = verdict_of(summary.gates, summary.point_names, summary.requests_judged)
        waiting = "judging the test" if state == "judging" else f"running for {time.monotonic() - test.started:.0f} s"
        detail = f"so far: {so_far}" if so_far is not None else "no rows written yet"
        view.update(verdict=None, so_far=so_far)
        rows = [_row("verdict", waiting, detail), _row("report", "written when the test stops", str(test.run.path))]
    if test.problem is not None:
        rows.append(_row("problem", "the view is not up to date", test.problem))
    if summary is not None:
        figures = _figures(summary)
        shown = [result for result in summary.gates if not gate_is_noise(result, summary.point_names)]
        view.update(figures=figures, gates=[_gate(result) for result in shown])
        rows += [_row(f"gate {gate['name']}", gate["result"], gate["detail"]) for gate in view["gates"]]
        rows += _figure_rows(figures)
    if test.as_of is not None:
        rows.append(_row("as of", f"{time.monotonic() - test.as_of:.0f} s ago", "judged" if judged else "so far"))
    view["rows"] = rows
    return view


def _row(figure: str, value: Any, detail: str = "") -> dict[str, Any]:
    return {"figure": figure, "value": value, "detail": detail}


def _gate(result: GateResult) -> dict[str, str]:
    detail = printable(result.detail)
    if len(detail) > DETAIL_CHARS:
        detail = detail[: DETAIL_CHARS - 1] + "…"
    return {"name": result.name, "result": result.word, "detail": detail}


def _figures(summary: Summary) -> dict[str, Any]:
    outcomes = summary.outcomes
    lag = summary.harness_lag_ms or HarnessLag()
    by_process = {name: {"p99": each.get("p99"), "max": each.get("max")} for name, each in lag.by_worker.items()}
    return {
        "requests": summary.requests,
        "requests_judged": summary.requests_judged,
        "outcomes": {name: count for name, count in outcomes.items() if count},
        "keepalive_frames": summary.keepalive_frames,
        "protocol_errors": outcomes.get("protocol_error", 0),
        "inband_errors": outcomes.get("inband_error", 0),
        "inband_500": summary.inband_500,
        "http_500": summary.http_500,
        "harness_lag_ms": {
            "p99": lag.p99,
            "max": lag.max,
            "by_process": by_process,
        },
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _figure_rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    outcomes = ", ".join(f"{count} {name}" for name, count in figures["outcomes"].items()) or "none yet"
    lag = figures["harness_lag_ms"]
    by_process = "; ".join(
        f"{name}: p99 {_ms(each['p99'])}, max {_ms(each['max'])}" for name, each in lag["by_process"].items()
    )
    return [
        _row("requests", figures["requests"], f"{figures['requests_judged']} judged: {outcomes}"),
        _row(
            "keep-alive frames",
            figures["keepalive_frames"],
            "SSE comments received (any text: each is a keep-alive), raw streams",
        ),
        _row("protocol errors", figures["protocol_errors"], "streams whose SSE the harness could not read"),
        _row("in-band errors", figures["inband_errors"], f"{figures['inband_500']} with code 500 (under HTTP 200)"),
        _row("HTTP 500", figures["http_500"], "answers with status 500"),
        _row("harness lag", f"p99 {_ms(lag['p99'])}, max {_ms(lag['max'])}", by_process or "no samples yet"),
    ]


def _take_form_host(form_host: Callable[[str], str]) -> None:
    """Before Locust's ``/swarm`` reads its form: the form's host as ``form_host`` turns it."""
    if request.method != "POST" or not request.path.endswith("/swarm"):
        return
    host = request.form.get("host")
    if host:
        immutable = type(request.form)  # Flask's own (immutable) multi-dict: a form stays read-only
        form = request.form.copy()
        form["host"] = form_host(host)
        request.form = immutable(form)  # werkzeug caches the parsed form here


def add_routes(app: Flask, tab: WebTab, guarded: Callable[[Any], Any] = lambda view: view) -> None:
    """The tab's routes on the web UI's Flask ``app`` (each behind the web UI's login, if any), and
    its table in Locust's stats answers."""

    def live() -> Response:
        return jsonify(tab.view())

    def run_file(run: str, path: str) -> Response:
        directory = tab.runs.get(run)
        if directory is None:
            abort(404)
        return send_from_directory(directory, path)  # safe_join: 404 for a path out of the directory

    def last_report() -> Any:
        test = tab.test
        if test is None or not test.judged.is_set():
            abort(404, "no test judged yet")
        return redirect("." + test.report_path[len(PREFIX) :])

    app.add_url_rule(f"{PREFIX}/live.json", "sse_soak_live", guarded(live))
    app.add_url_rule(f"{PREFIX}/runs/<run>/<path:path>", "sse_soak_run_file", guarded(run_file))
    app.add_url_rule(f"{PREFIX}/{RunDir.REPORT}", "sse_soak_last_report", guarded(last_report))

    @app.after_request
    def with_tab(response: Response) -> Response:
        if request.path == "/stats/requests" and response.is_json:
            response.set_data(json.dumps(tab.stats_answer(response.get_json())))
        return response
