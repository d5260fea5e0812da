"""``deploy/grafana/sse-soak.json``: the Grafana dashboard of a live run, checked without a Grafana.

What would break it unseen: a query of a metric the harness does not export (or with a label it does
not carry), a variable no one defines, a panel id used twice, a datasource pinned to one Grafana's
uid, a query Prometheus cannot parse, a list of failure outcomes that drifted from the harness's. A
checker that finds nothing proves nothing, so each one is also shown refusing a broken copy.

PromQL is checked by a small parser of its own (brackets, strings, functions, selectors, ranges):
no promtool on this machine's packages or the test extra. ``promtool check rules`` accepted every
expression when this was written (docs/kubernetes.md, "Watching a run")."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.client.outcome import FAILURE_OUTCOMES, UNJUDGED_OUTCOMES, Outcome
from loadtests.record import live_metrics
from loadtests.record.live_metrics import PASSING, LiveFigures
from tests.loadtests.live_batches import LABELS, batch

pytestmark = pytest.mark.fast
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "sse-soak.json"


def _exported() -> dict[str, tuple[str, frozenset[str]]]:
    """The live exporter's series as a scrape shows them (a counter with its ``_total``, a histogram
    by its base name), their type and labels: read from the exporter itself, fed a batch of every
    kind of stream, every gate state and the keep-alive interval, so no series is missing."""
    figures = LiveFigures()
    figures.begin(LABELS)
    figures.set_gates({"no_http_500": PASSING})
    figures.set_keep_alive_interval(0.25)
    figures.observe_batch(batch())
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for family in figures.families():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = frozenset(label for sample in family.samples for label in sample.labels if label != "le")
        found[name] = (family.type, labels)
    return found


EXPORTED = _exported()
SCRAPE_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus adds to every scraped series."""
FRAME_KINDS = frozenset(live_metrics.FRAME_KINDS)
GAP_KINDS = frozenset(live_metrics.GAP_KINDS)


def exported_metric_names() -> set[str]:
    """The names the exporter serves: the one place the dashboard's metrics are checked against."""
    return set(EXPORTED)


GRAFANA_BUILTINS = frozenset(
    {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms", "__all", "__auto"}
)
PROMQL_FUNCTIONS = frozenset(
    {
        *("rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets", "histogram_quantile"),
        *("vector", "scalar", "time", "timestamp", "absent", "absent_over_time", "clamp", "clamp_min", "clamp_max"),
        *("abs", "ceil", "floor", "round", "sort", "sort_desc", "label_replace", "label_join"),
        *("max_over_time", "min_over_time", "avg_over_time", "sum_over_time", "count_over_time", "last_over_time"),
        *("sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile"),
        "label_values",  # Grafana's variable query, not PromQL
    }
)
CLAUSES = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
"""Keywords followed by a parenthesised label list, not a function's arguments."""
RANGE_FUNCTIONS = frozenset({"rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<range>\[[^\]]*\])|(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)"""
    r"""|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<op>=~|!~|!=|==|>=|<=|[-+*/^%(){},=<>]))""",
    re.ASCII,
)
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]", re.ASCII)
_DURATION = re.compile(r"\[(\$__rate_interval|\$__interval|\$__range|\d+[smhdwy])\]", re.ASCII)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside a collapsed row included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' queries and the query variables'."""
    found = [target["expr"] for panel in panels(board) for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def datasources(value: Any) -> Iterator[Any]:
    """Every value under a ``datasource`` key, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "datasource":
                yield item
            yield from datasources(item)
    elif isinstance(value, list):
        for item in value:
            yield from datasources(item)


def tokens(expr: str) -> list[tuple[str, str]]:
    """``expr`` as (kind, text) tokens, Grafana's variables in place; ``ValueError`` at a character
    no PromQL token starts with."""
    found: list[tuple[str, str]] = []
    text = re.sub(r"\$\{?(\w+)\}?", r"__grafana_\1", expr)  # a variable reads as a name (in a string it stays one)
    position = 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ValueError(f"no PromQL token at {text[position:].lstrip()[:20]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


def promql_problems(expr: str) -> list[str]:
    """What is wrong with ``expr`` as PromQL (empty when nothing is): unbalanced brackets, an unknown
    function, ``by``/``without`` with no label list, a range that is not a duration or Grafana's
    interval, a range function without a range, a histogram's quantile whose sum keeps no ``le``."""
    try:
        found = tokens(expr)
    except ValueError as error:
        return [str(error)]
    problems: list[str] = []
    depth: list[str] = []
    pairs = {")": "(", "}": "{"}
    for index, (kind, text) in enumerate(found):
        following = found[index + 1] if index + 1 < len(found) else ("", "")
        if kind == "op" and text in "({":
            depth.append(text)
        elif kind == "op" and text in ")}":
            if not depth or depth.pop() != pairs[text]:
                problems.append(f"unbalanced {text!r}")
        elif kind == "range" and not _DURATION.fullmatch(text.replace("__grafana_", "$")):
            problems.append(f"range {text} is no duration")
        elif kind == "name" and following == ("op", "(") and not text.startswith("sse_soak_"):
            if text in CLAUSES:
                continue
            if text not in PROMQL_FUNCTIONS:
                problems.append(f"unknown function {text}")
            if text in RANGE_FUNCTIONS and not any(k == "range" for k, _ in _call_arguments(found, index + 1)):
                problems.append(f"{text}() without a range")
        elif kind == "name" and text in {"by", "without"} and following != ("op", "("):
            problems.append(f"{text} without a label list")
    if depth:
        problems.append(f"unclosed {''.join(depth)!r}")
    for name in metric_names(expr):
        if name.endswith("_bucket") and "histogram_quantile" in expr and not re.search(r"\bby \([^)]*\ble\b", expr):
            problems.append(f"{name} summed without keeping le")
    return problems


def _call_arguments(found: list[tuple[str, str]], opening: int) -> list[tuple[str, str]]:
    """The tokens between the parenthesis at ``opening`` and the one that closes it."""
    depth = 0
    for index in range(opening, len(found)):
        if found[index] == ("op", "("):
            depth += 1
        elif found[index] == ("op", ")"):
            depth -= 1
            if depth == 0:
                return found[opening + 1 : index]
    return found[opening + 1 :]


def metric_names(expr: str) -> list[str]:
    return re.findall(r"\bsse_soak_[a-z_]+", expr)


def exported_name(series: str) -> str | None:
    """The exported metric a series name belongs to (a histogram's ``_bucket``, ``_sum``, ``_count`` to
    the histogram), or None."""
    if series in exported_metric_names():
        return series
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and base in exported_metric_names() and EXPORTED[base][0] == "histogram":
            return base
    return None


def selectors(expr: str) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """Each ``metric{label op "value", ...}`` of ``expr``: the metric and its matchers."""
    found = tokens(expr)
    for index, (kind, text) in enumerate(found):
        if kind != "name" or not text.startswith("sse_soak_"):
            continue
        matchers: list[tuple[str, str, str]] = []
        if index + 1 < len(found) and found[index + 1] == ("op", "{"):
            cursor = index + 2
            while found[cursor] != ("op", "}"):
                label, op, value = found[cursor][1], found[cursor + 1][1], found[cursor + 2][1]
                matchers.append((label, op, json.loads(value)))
                cursor += 4 if found[cursor + 3] == ("op", ",") else 3
        yield text, matchers


def metric_problems(expr: str) -> list[str]:
    """Metrics ``expr`` uses that the exporter does not serve, and matchers on labels it does not carry."""
    problems: list[str] = []
    for series, matchers in selectors(expr):
        metric = exported_name(series)
        if metric is None:
            problems.append(f"{series} is not exported")
            continue
        labels = EXPORTED[metric][1] | SCRAPE_LABELS | ({"le"} if series.endswith("_bucket") else set())
        problems += [f"{series} has no label {label}" for label, _, _ in matchers if label not in labels]
    for metric, label in re.findall(r"label_values\((\w+)[^,]*,\s*(\w+)\)", expr):
        if metric in EXPORTED and label not in EXPORTED[metric][1]:
            problems.append(f"label_values: {metric} has no label {label}")
    return problems


def defined_variables(board: dict[str, Any]) -> set[str]:
    return {variable["name"] for variable in board["templating"]["list"]}


def undefined_variables(board: dict[str, Any]) -> set[str]:
    """Variables used anywhere in the dashboard that neither it nor Grafana defines."""
    used = {next(filter(None, match)) for text in strings(board) for match in _VARIABLE.findall(text)}
    declared = {entry["name"] for entry in board.get("__inputs", [])}
    return used - defined_variables(board) - GRAFANA_BUILTINS - declared


def pinned_datasources(board: dict[str, Any]) -> list[Any]:
    """Datasources that name one Grafana's own uid rather than the dashboard's datasource variable."""
    return [
        source
        for source in datasources(board)
        if not (isinstance(source, dict) and re.fullmatch(r"\$\{?datasource\}?", str(source.get("uid", ""))))
    ]


def overlapping_panels(board: dict[str, Any]) -> list[tuple[str, str]]:
    """Pairs of top-level panels whose places on the 24-column grid overlap."""
    cells: dict[tuple[int, int], str] = {}
    overlaps: list[tuple[str, str]] = []
    for panel in board["panels"]:
        place = panel["gridPos"]
        for x in range(place["x"], place["x"] + place["w"]):
            for y in range(place["y"], place["y"] + place["h"]):
                if (x, y) in cells and (cells[x, y], panel["title"]) not in overlaps:
                    overlaps.append((cells[x, y], panel["title"]))
                cells[x, y] = panel["title"]
    return overlaps


def matcher_values(board: dict[str, Any], label: str) -> list[tuple[str, str]]:
    """(op, value) of every matcher on ``label`` in the dashboard's queries."""
    return [
        (op, value)
        for expr in expressions(board)
        for _, matchers in selectors(expr)
        for name, op, value in matchers
        if name == label
    ]


# -- the dashboard as Grafana imports it ---------------------------------------------------------


def test_the_file_is_a_dashboard_grafana_imports() -> None:
    board = dashboard()
    assert board["id"] is None  # an id is one Grafana's row: importing it elsewhere would overwrite or fail
    assert isinstance(board["title"], str) and board["title"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", board["uid"])  # a stable uid, so links to it survive a re-import
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert {"from", "to"} <= board["time"].keys()
    assert isinstance(board["panels"], list) and board["panels"]
    assert isinstance(board["templating"]["list"], list)
    assert isinstance(board["annotations"]["list"], list)
    assert board["refresh"]  # a live run: it refreshes by itself


def test_panel_ids_are_unique_and_every_panel_says_what_it_means() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), sorted(ids)
    for panel in panels(board):
        if panel["type"] == "row":
            continue
        assert panel["title"] and len(panel["description"]) > 40, panel["title"]
        assert panel["targets"], panel["title"]
        assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"]), panel["title"]
        place = panel["gridPos"]
        assert place["x"] >= 0 and place["w"] > 0 and place["x"] + place["w"] <= 24, panel["title"]
    assert overlapping_panels(board) == []


def test_the_datasource_is_a_variable_never_one_grafanas_uid() -> None:
    board = dashboard()
    (variable,) = [entry for entry in board["templating"]["list"] if entry["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    assert pinned_datasources(board) == []
    assert sum(1 for _ in datasources(board)) > len(list(panels(board)))  # panels and their targets both name it


def test_every_variable_used_is_defined_and_scenario_and_worker_take_many_or_all() -> None:
    board = dashboard()
    assert undefined_variables(board) == set()
    for name in ("scenario", "worker"):
        (variable,) = [entry for entry in board["templating"]["list"] if entry["name"] == name]
        assert variable["multi"] and variable["includeAll"], name
    for expr in expressions(board):  # a multi-value variable is a regex: matched with =~, never =
        for _, matchers in selectors(expr):
            assert all(op == "=~" for _, op, value in matchers if "$" in value), expr


# -- the queries ---------------------------------------------------------------------------------


def test_every_query_reads_metrics_and_labels_the_harness_exports() -> None:
    board = dashboard()
    problems = [f"{expr}: {problem}" for expr in expressions(board) for problem in metric_problems(expr)]
    assert problems == []
    used = {exported_name(name) for expr in expressions(board) for name in metric_names(expr)}
    assert used == exported_metric_names()  # and every exported metric is shown somewhere


def test_every_query_is_promql() -> None:
    problems = [f"{expr}: {problem}" for expr in expressions(dashboard()) for problem in promql_problems(expr)]
    assert problems == []


def test_cluster_totals_sum_over_workers_and_a_row_breaks_them_down_by_worker() -> None:
    board = dashboard()
    queried = [expr for expr in expressions(board) if not expr.startswith("label_values")]
    by_worker = [expr for expr in queried if re.search(r"\bby \([^)]*\bworker\b", expr)]
    assert len(by_worker) >= 4
    for expr in queried:  # a per-worker series left unaggregated would draw one line per worker
        per_worker = any("worker" in EXPORTED[exported_name(name) or ""][1] for name in metric_names(expr))
        if expr not in by_worker and per_worker:
            assert re.match(r"\(*(sum|max|count|histogram_quantile)\b", expr), expr
    (row,) = [panel for panel in panels(board) if panel["type"] == "row" and panel["title"] == "Per worker"]
    below = [panel for panel in board["panels"] if panel["gridPos"]["y"] > row["gridPos"]["y"]] + row["panels"]
    assert below and all("worker" in panel["title"] for panel in below)


def test_failures_are_the_harness_failure_outcomes_and_every_outcome_has_its_colour() -> None:
    board = dashboard()
    outcome_matchers = matcher_values(board, "outcome")
    values = {value for _, value in outcome_matchers}
    failures = {value for value in values if "|" in value and set(value.split("|")) & {"http_5xx", "cut"}}
    assert failures == {"|".join(FAILURE_OUTCOMES)}  # one list, and it is the harness's
    unjudged = {value for op, value in outcome_matchers if op == "!~"}
    assert unjudged == {"|".join(UNJUDGED_OUTCOMES)}
    named = {part for value in values for part in value.split("|")}
    assert named <= {str(outcome) for outcome in Outcome}
    (by_outcome,) = [panel for panel in panels(board) if panel["title"] == "Requests per second by outcome"]
    colours = {
        override["matcher"]["options"]: override["properties"][0]["value"]["fixedColor"]
        for override in by_outcome["fieldConfig"]["overrides"]
    }
    assert set(colours) == {str(outcome) for outcome in Outcome}
    assert all("red" in colours[o] or "orange" in colours[o] for o in FAILURE_OUTCOMES)
    assert not any("red" in colours[o] or "orange" in colours[o] for o in set(Outcome) - set(FAILURE_OUTCOMES))


def test_frame_kinds_queried_are_the_exported_kinds() -> None:
    board = dashboard()
    kinds: dict[str, set[str]] = {"sse_soak_frames_total": set(), "sse_soak_frame_gap_seconds_bucket": set()}
    for expr in expressions(board):
        for series, matchers in selectors(expr):
            kinds.get(series, set()).update(value for label, _, value in matchers if label == "kind")
    assert kinds["sse_soak_frames_total"] <= FRAME_KINDS and "keepalive" in kinds["sse_soak_frames_total"]
    assert kinds["sse_soak_frame_gap_seconds_bucket"] <= GAP_KINDS


def test_the_zero_500s_promise_turns_red_above_zero() -> None:
    board = dashboard()
    for title in ("HTTP 5xx so far", "In-band errors so far"):
        (panel,) = [panel for panel in panels(board) if panel["title"] == title]
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert panel["type"] == "stat" and [step["color"] for step in steps] == ["green", "red"]
        assert 0 < steps[1]["value"] <= 1
        (target,) = panel["targets"]
        assert target["expr"].endswith("or vector(0)")  # a run with no 5xx yet has no such series: 0, not "No data"


def test_gate_states_read_as_passing_failing_and_not_judged() -> None:
    (panel,) = [panel for panel in panels(dashboard()) if panel["title"] == "Gates so far"]
    (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
    shown = {value: (entry["text"], entry["color"]) for value, entry in mapping["options"].items()}
    assert shown == {"1": ("passing", "green"), "0": ("failing", "red"), "-1": ("not judged yet", "text")}


# -- each checker refuses what it is there to find -----------------------------------------------


def broken(change: str) -> dict[str, Any]:
    board = copy.deepcopy(dashboard())
    first = next(panel for panel in panels(board) if panel.get("targets"))
    if change == "duplicate_id":
        board["panels"][2]["id"] = board["panels"][1]["id"]
    elif change == "pinned_uid":
        first["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
    elif change == "undefined_variable":
        first["targets"][0]["expr"] = first["targets"][0]["expr"].replace("$scenario", "$scenarios")
    elif change == "overlap":
        board["panels"][2]["gridPos"] = dict(board["panels"][1]["gridPos"])
    return board


def test_the_checkers_find_a_duplicate_id_a_pinned_uid_an_undefined_variable_and_an_overlap() -> None:
    board = broken("duplicate_id")
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) != len(set(ids))
    assert pinned_datasources(broken("pinned_uid")) == [{"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}]
    assert undefined_variables(broken("undefined_variable")) == {"scenarios"}
    assert overlapping_panels(broken("overlap"))


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ('sum(rate(sse_soak_requests_total{scenario=~"$scenario"}[$__rate_interval])', "unclosed '('"),
        ('sum(rate(sse_soak_requests_total{scenario=~"a"}[5m])))', "unbalanced ')'"),
        ("sum(rated(sse_soak_requests_total[5m]))", "unknown function rated"),
        ("sum(rate(sse_soak_requests_total))", "rate() without a range"),
        ("sum(rate(sse_soak_requests_total[five]))", "range [five] is no duration"),
        ("sum by worker (sse_soak_open_streams)", "by without a label list"),
        (
            "histogram_quantile(0.99, sum by (worker) (rate(sse_soak_ttft_seconds_bucket[5m])))",
            "sse_soak_ttft_seconds_bucket summed without keeping le",
        ),
        ("sum(sse_soak_open_streams) ; 1", "no PromQL token at '; 1'"),
    ],
)
def test_the_promql_check_refuses_broken_expressions(expr: str, problem: str) -> None:
    assert any(problem in found for found in promql_problems(expr)), promql_problems(expr)


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(sse_soak_request_total)", "sse_soak_request_total is not exported"),
        ("sum(sse_soak_open_streams_bucket)", "sse_soak_open_streams_bucket is not exported"),  # a gauge has none
        ('sum(sse_soak_gate_state{worker=~"$worker"})', "sse_soak_gate_state has no label worker"),
        ('sum(sse_soak_frames_total{route="chat"})', "sse_soak_frames_total has no label route"),
        ("label_values(sse_soak_run_info, worker)", "label_values: sse_soak_run_info has no label worker"),
    ],
)
def test_the_metric_check_refuses_unexported_names_and_labels(expr: str, problem: str) -> None:
    assert problem in metric_problems(expr)


def test_a_histograms_series_belong_to_the_histogram() -> None:
    assert [exported_name(f"sse_soak_ttft_seconds{suffix}") for suffix in ("", *HISTOGRAM_SUFFIXES)] == [
        "sse_soak_ttft_seconds"
    ] * 4
    assert exported_name("sse_soak_requests_total_bucket") is None
