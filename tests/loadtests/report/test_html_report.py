"""report.html: one self-contained page whose tables and plots say what the run's data says.

The data is real: SSE frames fed through ``StreamTracker`` into a ``Recorder``, gates evaluated and
the summary built by the harness's own functions; the assertions read the page's content.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import re
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from loadtests.client.outcome import Outcome, RequestPlan, StreamTracker
from loadtests.client.sse import Frame
from loadtests.judge.gates import (
    ALWAYS_ON,
    FAIL,
    INCONCLUSIVE,
    UNJUDGED,
    Expect,
    GateResult,
    HarnessKeptUp,
    KeepAliveCovered,
    NoProxyTimeouts,
    RunTables,
    TruncationHonoured,
    evaluate,
    gate_is_noise,
)
from loadtests.judge.summary import Summary, summarize
from loadtests.record import figures
from loadtests.record.lag import lag_summary
from loadtests.record.recorder import FRAME_COLUMNS, Recorder
from loadtests.record.server_metrics import concept_series, parse_exposition, server_metrics_summary
from loadtests.report.html_parts import count_tick, seconds_tick
from loadtests.report.html_report import (
    NO_LAG_LIMIT,
    _gap_figure,
    _gap_interval,
    _gap_samples,
    _keepalive_figure,
    _lag_figure,
    _lag_limit,
    _read_timeout,
    _run_axis,
    _server_figure,
    _timeline_figure,
    write_html_report,
    write_requests_csv,
)
from tests.loadtests.tables import frames_of, requests_of

pytestmark = pytest.mark.fast

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE = re.compile(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
RUN_START = 1_800_000_000.0
ERROR_MESSAGE = "InjectedEngineError: <script>boom</script> mid-generation"
SETTINGS = {"proxy": "none", "keep_alive_interval": 1.0, "server_args": ["--max-model-len", "8192"]}
GATES = [Expect("truncated_ok_at_1000", where="truncate_prompt_tokens == 1000", require="outcome == 'ok'")]


def data_frame(payload: dict[str, Any]) -> Frame:
    text = json.dumps(payload)
    return Frame(t=0.0, nbytes=len(text) + 8, data=text)


def token(route: str, text: str = "w") -> Frame:
    choice = {"index": 0, "text": text} if route == "completions" else {"index": 0, "delta": {"content": text}}
    return data_frame({"choices": [choice]})


def usage(prompt_tokens: int, completion_tokens: int) -> Frame:
    return data_frame(
        {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}
    )


def keep_alive() -> Frame:
    return Frame(t=0.0, nbytes=14, comments=["keep-alive"])


def done() -> Frame:
    return Frame(t=0.0, nbytes=14, data="[DONE]")


def inband_error() -> Frame:
    return data_frame({"error": {"message": ERROR_MESSAGE, "type": "InternalServerError", "param": None, "code": 500}})


def record(
    recorder: Recorder,
    request_id: str,
    route: str,
    truncate: int | None,
    arrivals: list[tuple[float, Frame]],
    end: float,
    *,
    status: int = 200,
    ttfb: float = 0.01,
    body: str | None = None,
    failure: str | None = None,
    expected: str = "ok",
) -> None:
    """One request, sent ``len(recorder)`` half-seconds after the run started."""
    plan = RequestPlan(
        request_id,
        f"{route}:{'truncated' if truncate else 'plain'}",
        route,
        prompt_tokens=10_000,
        max_tokens=16,
        truncate_prompt_tokens=truncate,
        expected=expected,
    )
    stream = StreamTracker(plan, RUN_START + 0.5 * len(recorder))
    stream.headers(status, ttfb, "text/event-stream")
    if body is not None:
        stream.error_body(body)
    for t, frame in arrivals:
        stream.frame(frame, t)
    recorder.add(stream.finish(end, None if failure is None else Outcome(failure)), stream.frames)


def tokens(route: str, start: float, count: int, step: float = 0.02) -> list[tuple[float, Frame]]:
    return [(start + step * index, token(route)) for index in range(count)]


def build_run() -> tuple[pd.DataFrame, pd.DataFrame]:
    recorder = Recorder()
    keepalives = [(1.01, keep_alive()), (2.01, keep_alive())]
    ending = [(2.6, usage(1000, 3)), (2.61, done())]
    record(recorder, "ok-ka", "completions", 1000, keepalives + tokens("completions", 2.5, 3) + ending, 2.62)
    for index, (route, truncate) in enumerate([("chat", 1000), ("chat", None), ("completions", None)] * 2):
        arrivals = [*tokens(route, 0.1 + 0.01 * index, 4), (0.3, usage(truncate or 2000, 4)), (0.31, done())]
        record(recorder, f"ok-{index}", route, truncate, arrivals, 0.32)
    rejection = json.dumps(
        {"error": {"message": "prompt too long", "type": "BadRequestError", "param": "input_tokens", "code": 400}}
    )
    record(
        recorder, "rejected-1", "completions", None, [], 1.51, status=400, ttfb=1.5, body=rejection, expected="rejected"
    )
    record(recorder, "cut-1", "chat", 1000, tokens("chat", 0.2, 3), 0.5)
    errored = [*tokens("completions", 0.1, 2), (0.15, inband_error()), (0.151, done())]
    record(recorder, "inband-1", "completions", None, errored, 0.16)
    record(recorder, "stopped-1", "chat", None, tokens("chat", 0.1, 2), 0.2, failure="stopped")
    return requests_of(recorder), frames_of(recorder)


@pytest.fixture(scope="module")
def run() -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    requests, frames = build_run()
    summary = summarize("unit_run", requests, evaluate(RunTables(requests), GATES), SETTINGS).to_json()
    return requests, frames, summary


def render(tmp_path: Path, summary: dict[str, Any], requests: pd.DataFrame, frames: pd.DataFrame) -> str:
    path = write_html_report(tmp_path, Summary.from_json(summary), requests, frames)  # as read back from the file
    assert path == tmp_path / "report.html"
    return path.read_text(encoding="utf-8")


def section(page: str, title: str) -> str:
    start = page.index(f">{title}</h")
    return page[start : page.index("</section>", start)]


def cell(row_html: str, attribute: str, value: str) -> str:
    match = re.search(rf'<td class="num" {attribute}="{re.escape(value)}">([^<]*)</td>', row_html)
    assert match, (attribute, value, row_html)
    return match.group(1)


def table_row(page: str, attributes: str) -> str:
    match = re.search(rf"<tr {re.escape(attributes)}>(.*?)</tr>", page)
    assert match, attributes
    return match.group(1)


def test_the_run_covers_what_the_report_must_show(run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]) -> None:
    requests, frames, summary = run
    assert set(requests["outcome"]) == {"ok", "rejected", "cut", "inband_error", "stopped"}
    assert set(requests["route"]) == {"chat", "completions"}
    assert set(frames["kind"]) == {"data", "keepalive", "error", "done"}
    assert summary["passed"] is False and len(summary["gates"]) == len(ALWAYS_ON) + 1


def test_headline_shows_the_verdict_and_every_gate(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    page = render(tmp_path, summary, requests, frames)
    headline = page[: page.index("</section>")]
    assert "unit_run" in headline
    assert '<div class="verdict fail">FAIL</div>' in headline and "PASS</div>" not in headline
    assert f"<b>{len(requests)}</b> requests" in headline
    for gate in summary["gates"]:
        verdict = "PASS" if gate["passed"] else "FAIL"
        line = f'<span class="badge">{verdict}</span> <b>{html.escape(gate["name"])}</b>: {html.escape(gate["detail"])}'
        assert line in headline
    assert "keep_alive_interval" in headline and "--max-model-len 8192" in headline
    causes = Summary.from_json(summary).causes_lines()  # the console's causes: line, in the report too
    assert causes[0].startswith("causes: ") and f"<h3>Causes</h3><p>{html.escape(causes[0])}</p>" in headline

    passing = {**summary, "passed": True, "gates": [{"name": "all_good", "passed": True, "detail": "fine"}]}
    assert '<div class="verdict pass">PASS</div>' in render(tmp_path, passing, requests, frames)


def test_the_page_speaks_the_consoles_words(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    point_unjudged = {"name": "keepalive_through_silence", "passed": False, "detail": "none silent", "skipped": True}
    passed = [gate for gate in summary["gates"] if gate["passed"]]
    inconclusive = {**summary, "point": ["keepalive_through_silence"], "gates": [*passed, point_unjudged]}
    for data, word in ((summary, FAIL), (inconclusive, INCONCLUSIVE)):
        loaded = Summary.from_json(data)
        assert loaded.verdict == word and loaded.verdict_line().startswith(f"verdict: {word}")
        headline = render(tmp_path, data, requests, frames).split("</section>")[0]
        assert f'<div class="verdict {word.lower()}">{word}</div>' in headline
        badges = re.findall(r'<span class="badge">([A-Z]+)</span> <b>([^<]+)</b>', headline)
        assert badges and [(gate.word, gate.name) for gate in loaded.gates] == badges
        console = [line.split()[1] for line in loaded.console_lines() if line.startswith("gate ")]
        assert console == [word for word, _ in badges]
        assert not re.search(r"PASSED|FAILED", headline)
    assert UNJUDGED in {gate.word for gate in Summary.from_json(inconclusive).gates}


def test_a_gate_with_nothing_to_judge_outside_the_runs_point_is_not_shown(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    missing: Any = pd.NA  # pandas-stubs take no scalar NA here
    untruncated = requests.assign(truncate_prompt_tokens=missing)  # a scenario that never truncates
    noise = TruncationHonoured().evaluate(figures.judged(untruncated))
    assert noise.word == UNJUDGED and "0/0" in noise.detail
    thin = GateResult("max_gap_within_interval", False, "2/2 judged; 3 of 5 unjudged", True, 3, 2)
    point_gate = GateResult("keepalive_through_silence", False, "no stream was silent", True)
    kept = [gate for gate in summary["gates"] if gate["passed"] and gate["name"] != noise.name]
    gates = [*kept, *(dataclasses.asdict(gate) for gate in (noise, thin, point_gate))]
    data = {**summary, "point": [point_gate.name], "gates": gates}
    loaded = Summary.from_json(data)
    assert [gate.name for gate in loaded.gates if gate_is_noise(gate, loaded.point_names)] == [noise.name]
    assert loaded.verdict == INCONCLUSIVE  # the shown point gate, not the noise, makes it so
    headline = render(tmp_path, data, requests, frames).split("</section>")[0]
    shown = re.findall(r'<span class="badge">[A-Z]+</span> <b>([^<]+)</b>', headline)
    assert noise.name not in shown and {thin.name, point_gate.name, "requests_completed"} <= set(shown)
    assert f"kept in summary.json): {noise.name}</p>" in headline  # named once, quietly
    assert noise.name in {gate["name"] for gate in loaded.to_json()["gates"]}


def test_outcome_table_counts_equal_the_value_counts(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    page = render(tmp_path, summary, requests, frames)
    truncation = requests["truncate_prompt_tokens"].astype(object).where(requests["truncate_prompt_tokens"].notna())
    labels = truncation.map(lambda v: "none" if pd.isna(v) else str(int(v)))
    expected = requests.groupby([requests["route"], labels, requests["outcome"]]).size()
    for key, group in expected.groupby(level=[0, 1]):
        route, label = cast(tuple[str, str], key)
        row = table_row(page, f'data-route="{route}" data-truncation="{label}"')
        for outcome in requests["outcome"].unique():
            assert int(cell(row, "data-outcome", outcome)) == int(group.get((route, label, outcome), 0))
    totals = table_row(page, 'class="total" data-route="all"')
    for outcome, count in requests["outcome"].value_counts().items():
        assert int(cell(totals, "data-outcome", str(outcome))) == count
    assert 'data-outcome="timeout"' not in page  # only outcomes that occur get a column
    statuses = requests["status"].value_counts()
    for status, count in statuses.items():
        assert f'<td>{status}</td><td class="num">{count}</td>' in table_row(page, f'data-status="{status}"')


def test_percentile_table_matches_pandas(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    page = render(tmp_path, summary, requests, frames)
    ttft = requests["ttft_s"].dropna()
    cells = re.findall(r'<td class="num">([^<]*)</td>', table_row(page, 'data-metric="ttft_s"'))
    assert cells[0] == f"{ttft.quantile(0.5):.4f}"
    assert cells[4] == f"{ttft.max():.4f}" and cells[5] == str(len(ttft))
    assert len(ttft) < len(requests)  # the rejected request has no TTFT and is not counted


def test_three_embedded_pngs_and_nothing_external(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    page = render(tmp_path, summary, requests, frames)
    images = IMAGE.findall(page)
    assert len(images) == 3 == page.count("<img ")
    for encoded in images:
        assert base64.b64decode(encoded).startswith(PNG_SIGNATURE)
    assert not re.search(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', page, re.IGNORECASE)
    assert "<script" not in page and html.escape(ERROR_MESSAGE) in page


def test_worst_streams_list_the_failures_with_their_frames(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    worst = section(render(tmp_path, summary, requests, frames), "Worst streams")
    streams = dict(re.findall(r'<tbody class="stream" data-request="([^"]+)">(.*?)</tbody>', worst, re.DOTALL))
    assert {"cut-1", "inband-1", "ok-ka"} <= set(streams)
    assert "rejected-1" not in streams  # the longest gap of all, but the top by gap are 2xx streams only
    # the stream ends at its error frame: the [DONE] after it is neither recorded nor counted
    assert re.findall(r'class="frame k-(\w+)"', streams["inband-1"]) == ["data", "data", "error"]
    assert re.findall(r'class="frame k-(\w+)"', streams["cut-1"]) == ["data"] * 3
    assert re.findall(r'class="frame k-(\w+)"', streams["ok-ka"])[:2] == ["keepalive", "keepalive"]
    assert "500 / " in streams["inband-1"] and "cut</span>" in streams["cut-1"]


def test_sampled_frames_are_announced_and_missing_ones_marked(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    assert "from a sample" not in render(tmp_path, summary, requests, frames)
    kept = requests.loc[requests["outcome"] != "ok", "request_id"]
    sampled = frames[frames["request_id"].isin(kept)]
    page = render(tmp_path, {**summary, "frame_sample_rate": 0.25}, requests, sampled)
    assert "Frame-level plots and tables come from a sample: 25% of the ok streams" in page
    assert "streams whose outcome is not ok are always kept" in page
    worst = section(page, "Worst streams")
    ok_row = re.search(r'data-request="ok-ka">(.*?)</tbody>', worst, re.DOTALL)
    assert ok_row and "(frames not sampled)" in ok_row.group(1)


def test_empty_and_tiny_runs_still_render(tmp_path: Path) -> None:
    empty_requests = requests_of(Recorder())
    empty_frames = pd.DataFrame(columns=list(FRAME_COLUMNS))
    summary = summarize("empty_run", empty_requests, evaluate(RunTables(empty_requests)), {}).to_json()
    page = render(tmp_path, summary, empty_requests, empty_frames)
    assert "<b>0</b> requests" in page and "No requests were recorded." in page and "<img" not in page

    requests, frames = build_run()
    single = requests[requests["request_id"] == "rejected-1"].copy()
    for column in ("ttft_s", "max_data_gap_s", "silence_before_first_token_s", "start_time"):
        single[column] = float("nan")
    page = render(
        tmp_path, summarize("one", single, evaluate(RunTables(single)), {}).to_json(), single, frames.iloc[0:0]
    )
    assert page.count("<img") == 0 and "No frames were recorded." in page
    assert table_row(page, 'data-metric="ttft_s"').endswith('<td class="num">0</td>')


def test_requests_csv_round_trips(run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path) -> None:
    requests, _, _ = run
    path = write_requests_csv(tmp_path, requests)
    assert path == tmp_path / "requests.csv"
    back = pd.read_csv(path)
    assert len(back) == len(requests) and list(back.columns) == list(requests.columns)
    assert back["request_id"].tolist() == requests["request_id"].tolist()


def test_a_frame_read_late_says_so_in_its_chip(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    """``wait_s`` (bytes in the kernel before the read) is shown from a millisecond up, not below."""
    requests, frames, summary = run
    cut = frames.index[frames["request_id"] == "cut-1"]
    frames = frames.copy()
    frames.loc[cut, "wait_s"] = [0.0, 0.0421, 0.0009]
    worst = section(render(tmp_path, summary, requests, frames), "Worst streams")
    stream = re.search(r'data-request="cut-1">(.*?)</tbody>', worst, re.DOTALL)
    assert stream
    chips = re.findall(r'<span class="frame k-data">(.*?)</span>', stream.group(1))
    assert [chip.endswith("(read 0.0421 late)") for chip in chips] == [False, True, False]
    assert worst.count(" late)") == 1  # frames without a wait (the openai client's, old runs) are not marked


def server_scrapes(start: float, seconds: int) -> pd.DataFrame:
    """One vLLM-like scrape a second from ``start``: 4 running, a queue that grows, the KV cache filling."""
    texts = [
        f'vllm:num_requests_running{{engine="0"}} 4\nvllm:num_requests_waiting{{engine="0"}} {second}\n'
        f'vllm:kv_cache_usage_perc{{engine="0"}} {second / seconds}\n'
        for second in range(seconds)
    ]
    return pd.concat(
        [pd.DataFrame(parse_exposition(text, start + second)) for second, text in enumerate(texts)], ignore_index=True
    )


def test_the_servers_queue_is_plotted_on_the_timelines_axis_or_its_absence_explained(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    metrics = server_scrapes(RUN_START - 1.0, 8)
    with_metrics = {**summary, "server_metrics": server_metrics_summary(metrics)}
    page = write_html_report(tmp_path, Summary.from_json(with_metrics), requests, frames, None, metrics).read_text(
        encoding="utf-8"
    )
    server = section(page, "Server: queue and KV cache")
    assert server.count("<img") == 1 and "8 scrapes" in server
    assert re.search(r"<td>waiting requests</td><td class=\"num\">3.5</td><td class=\"num\">[\d.]+</td>", server)
    axis = _run_axis(requests)
    assert axis is not None and axis.origin == RUN_START
    spans = pd.DataFrame({"start": requests["start_time"], "duration": requests["duration_s"], "outcome": "ok"})
    lag = pd.DataFrame({"worker": "local", "time": RUN_START + np.arange(0, 5, 0.01), "lag_s": 0.001})
    limits = {
        _timeline_figure(spans, axis).axes[0].get_xlim(),
        _lag_figure(lag, axis, 5.0).axes[0].get_xlim(),
        _server_figure(concept_series(metrics), axis).axes[0].get_xlim(),
    }
    assert limits == {axis.limits}  # one time axis: same origin, same range

    reason = "turned off with --no-server-metrics"
    unavailable = {**summary, "server_metrics": {"available": False, "reason": reason}}
    page = write_html_report(tmp_path, Summary.from_json(unavailable), requests, frames).read_text(encoding="utf-8")
    assert f"No server metrics: {reason}." in section(page, "Server: queue and KV cache")


def keepalive_streams(requests: pd.DataFrame, silences: list[float], frames: list[int | None]) -> pd.DataFrame:
    """Copies of the run's first ok stream, each silent for one of ``silences`` from its send and
    counting ``frames`` keep-alives (None: an openai SDK stream, which cannot see comments)."""
    template = requests[requests["outcome"] == "ok"].iloc[[0] * len(silences)].reset_index(drop=True)
    return template.assign(
        request_id=[f"ka-{index}" for index in range(len(silences))],
        client=["raw" if count is not None else "openai" for count in frames],
        silence_from_send_s=silences,
        silence_before_first_token_s=silences,
        keepalive_frames=pd.array(frames, dtype="Int64"),
    )


def test_the_keepalive_plot_draws_the_gates_own_stepped_minimum(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    # keep-alive every 1 s: the gate wants floor(silence / 1.2 s) frames; a silence/interval line
    # would put every one of these passing streams under it
    streams = keepalive_streams(requests, [1.0, 2.0, 3.9, 5.5, 6.0], [0, 1, 3, 4, None])
    gate = KeepAliveCovered(1.0)
    judged = gate.evaluate(streams)
    assert judged.word == "PASS" and judged.judged_rows == 3
    figure = _keepalive_figure(
        pd.DataFrame(
            {"x": streams["silence_from_send_s"], "y": streams["keepalive_frames"], "outcome": streams["outcome"]}
        ).dropna(),
        gate,
    )
    (step,) = [line for line in figure.axes[0].get_lines() if str(line.get_label()).startswith("keepalive_covered")]
    assert step.get_drawstyle() == "steps-post" and "floor(silence / 1.20 s)" in str(step.get_label())
    xs, ys = np.asarray(step.get_xdata()), np.asarray(step.get_ydata())
    assert np.array_equal(ys, gate.required_frames(pd.Series(xs)).to_numpy()) and set(ys) == {0, 1, 2, 3, 4}
    dots = np.concatenate([collection.get_offsets() for collection in figure.axes[0].collections])
    assert len(dots) == 4  # the SDK stream has no keep-alive count: not drawn
    assert all(y >= gate.required_frames(pd.Series([x])).iloc[0] for x, y in dots)  # none under what passed

    on_page = {**summary, "gate_specs": [KeepAliveCovered(1.0).spec()]}
    page = render(tmp_path, on_page, streams, frames.iloc[0:0])
    caption = section(page, "Keep-alive frames against silence before the first token")
    assert "one per whole 1.20 s of silence" in caption and "1 SDK streams left out" in caption


def test_the_gap_plot_keeps_sdk_streams_apart_and_draws_its_thresholds(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    raw = requests[requests["request_id"] == "ok-ka"]
    sdk = raw.assign(request_id="sdk-1", client="openai", keepalive_frames=pd.array([None], dtype="Int64"))
    sdk_frames = frames[(frames["request_id"] == "ok-ka") & (frames["kind"] != "keepalive")].assign(request_id="sdk-1")
    sdk_frames.loc[sdk_frames.index[0], "gap_s"] = 2.5  # the SDK's first chunk: a wait full of unseen comments
    requests, frames = pd.concat([requests, sdk], ignore_index=True), pd.concat([frames, sdk_frames])
    samples = _gap_samples(frames, requests)
    assert 2.5 in samples.sdk_chunks and samples.any_bytes.max() < 1.1  # a proxy saw no such silence
    assert len(samples.sdk_chunks) == len(sdk_frames) and len(samples.any_bytes) == len(frames) - len(sdk_frames)

    on_host = {**summary, "gate_specs": [NoProxyTimeouts(2.0, 1.0).spec()], "settings": {**SETTINGS, "proxy": "none"}}
    loaded = Summary.from_json(on_host)
    assert _read_timeout(loaded) == 2.0 and _gap_interval(loaded) == 1.0  # the gate's timeout, no proxy started
    figure = _gap_figure(samples, _gap_interval(loaded), _read_timeout(loaded))
    axes = figure.axes[0]
    labels = [str(patch.get_label()) for patch in axes.patches]
    assert [label.split(" (")[0] for label in labels] == [
        "raw streams, any bytes",
        "raw streams, data only",
        "openai SDK streams, chunks",
    ]
    assert labels[2].endswith(f"n={len(sdk_frames)}") and labels[0].endswith(f"n={len(samples.any_bytes)}")
    orders = [patch.get_zorder() for patch in axes.patches]
    assert orders == sorted(orders) and len(set(orders)) == 3  # each curve drawn over the one before
    verticals = {line.get_label(): np.asarray(line.get_xdata())[0] for line in axes.get_lines()}
    assert verticals == {"keep-alive interval 1 s": 1.0, "proxy read timeout 2 s": 2.0}
    assert axes.get_xlim()[1] > 2.0  # the threshold is inside the plot
    figure.canvas.draw()  # the decades in plain words, never mathtext's 10^n (whose grammar costs 0.1-0.2 s)
    shown = [tick.get_text() for tick in axes.get_xticklabels() if tick.get_text()]
    assert {"1 ms", "10 ms", "1 s"} <= set(shown) and not any("$" in text for text in shown), shown
    counts = [tick.get_text() for tick in axes.get_yticklabels() if tick.get_text()]
    assert "1" in counts and not any("$" in text for text in counts), counts

    caption = section(render(tmp_path, on_host, requests, frames), "Gaps between frames")
    assert "The openai SDK cannot see comments" in caption
    without_proxy = Summary.from_json({**summary, "settings": {**SETTINGS, "proxy": "none"}})
    assert _read_timeout(without_proxy) is None  # no proxy and no gate: no timer was in force


def test_the_read_timeout_drawn_is_the_one_the_proxy_runs(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]],
) -> None:
    """``--proxy apache --proxy-read-timeout 1.5``: Apache runs 2 s, and the gap plot's line is drawn at
    2 s, as the gate and the causes judge it, whether the summary holds that figure or predates it."""
    requests, _, summary = run
    settings = {**SETTINGS, "proxy": "apache", "proxy_read_timeout": 1.5}
    judged = summarize("unit_run", requests, [], settings).to_json()
    assert judged["causes"]["proxy_timeouts"]["read_timeout_s"] == 2.0
    assert _read_timeout(Summary.from_json({**summary, **judged})) == 2.0
    older = {**summary, "settings": settings, "causes": {**summary["causes"], "proxy_timeouts": None}}
    assert _read_timeout(Summary.from_json(older)) == 2.0  # from the settings, as Apache runs them
    declared = {**older, "gate_specs": [NoProxyTimeouts(1.5, 0.0, proxy="apache").spec()]}
    assert _read_timeout(Summary.from_json(declared)) == 2.0  # from the gate, as Apache runs it


def test_the_servers_running_and_waiting_requests_never_hide_each_other() -> None:
    # a queue as long as the slots: on one axes, one step line lay exactly over the other
    texts = [
        f'vllm:num_requests_running{{engine="0"}} 4\nvllm:num_requests_waiting{{engine="0"}} 4\n'
        f'vllm:kv_cache_usage_perc{{engine="0"}} 0.{second}\n'
        for second in range(5)
    ]
    scrapes = pd.concat(
        [pd.DataFrame(parse_exposition(text, RUN_START + second)) for second, text in enumerate(texts)],
        ignore_index=True,
    )
    series = concept_series(scrapes)
    figure = _server_figure(series, None)
    drawn = {line.get_label(): (axes, line) for axes in figure.axes for line in axes.get_lines()}
    assert set(drawn) == {"running", "waiting", "kv_cache_usage"}
    assert len({id(axes) for axes, _ in drawn.values()}) == 3  # each series alone on its axes
    for concept, (axes, line) in drawn.items():
        assert list(np.asarray(line.get_ydata())) == list(series[concept]) and axes.get_ylim()[1] > max(series[concept])
    assert len({axes.get_xlim() for axes in figure.axes}) == 1  # one time axis


def test_the_lag_plot_draws_the_gates_limit_or_says_none_was_set(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    lag = pd.DataFrame({"worker": "local", "time": RUN_START + np.arange(0, 5, 0.01), "lag_s": 0.001})
    judged = {**summary, "gate_specs": [HarnessKeptUp(20.0).spec()], "harness_lag_ms": lag_summary(lag, 20.0)}
    unjudged = {**summary, "harness_lag_ms": lag_summary(lag)}
    for data, limit in ((judged, 20.0), (unjudged, None)):
        loaded = Summary.from_json(data)
        assert _lag_limit(loaded) == limit
        figure = _lag_figure(lag, _run_axis(requests), limit, {"local": 1.0})
        axes = figure.axes[0]
        lines = {str(line.get_label()): list(np.asarray(line.get_ydata())) for line in axes.get_lines()}
        assert lines["local p99 1 ms"] == [1.0, 1.0]
        figure.canvas.draw()
        assert {"0", "1"} <= {tick.get_text() for tick in axes.get_yticklabels()}  # ms, in plain words, not 10^n
        notes = [text.get_text() for text in axes.texts]
        if limit:
            assert lines["harness_kept_up limit 20 ms"] == [20.0, 20.0] and not notes
            assert axes.get_ylim()[1] > 20.0  # far above every sample, still inside the plot
        else:
            assert not any("limit" in label for label in lines) and notes == [NO_LAG_LIMIT]
        page = write_html_report(tmp_path, loaded, requests, frames, lag).read_text(encoding="utf-8")
        caption = section(page, "Harness lag")
        said = "gate's limit of 20 ms" if limit else NO_LAG_LIMIT
        assert html.escape(said) in caption


def test_the_headline_says_what_the_verdict_covers_in_the_consoles_words(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    requests, frames, summary = run
    covered = {"judged": 308, "seen": 2503, "lost": 2195, "locust": 2503, "unwritten": 2195, "max_share": 0.1}
    line = Summary.from_json({**summary, "coverage": covered}).coverage.line()  # type: ignore[union-attr]
    assert line.startswith("coverage: 308 of 2503 requests judged (Locust counted 2503)")
    page = render(tmp_path, {**summary, "coverage": covered}, requests, frames)
    headline = page[: page.index("</section>")]
    assert f'<p class="coverage">{html.escape(line.removeprefix("coverage: "))}</p>' in headline


def test_a_report_the_disk_refuses_leaves_nothing_beside_it(
    run: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]], tmp_path: Path
) -> None:
    """Before: ``report.html.tmp`` was left in the run directory when the disk refused the page."""
    requests, frames, summary = run
    (tmp_path / "report.html").mkdir()  # the page cannot take its place: as a disk that refuses it
    (tmp_path / "requests.csv").mkdir()
    with pytest.raises(OSError):
        write_html_report(tmp_path, Summary.from_json(summary), requests, frames)
    with pytest.raises(OSError):
        write_requests_csv(tmp_path, requests)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("value", "seconds", "count"),
    [(0.0, "0", "0"), (1e-4, "0.1 ms", "0.0001"), (0.01, "10 ms", "0.01"), (1.0, "1 s", "1"), (300.0, "300 s", "300"),
     (1e4, "10000 s", "10k"), (2.5e6, "2.5e+06 s", "2.5M")],
)  # fmt: skip
def test_log_axes_label_their_decades_in_the_unit_they_are_read_in(value: float, seconds: str, count: str) -> None:
    assert seconds_tick(value) == seconds and count_tick(value) == count
