"""Benchmarks cannot rot: every script in bench/ runs in its quick mode against the current code,
exits 0 and prints each of its figures (checked by label and shape, never by value)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
TIMEOUT_S = 120
NUM = r"[-+]?(?:\d[\d,.]*|nan|inf)"  # a printed figure; nan is a figure too (a round too short to time)

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(TIMEOUT_S + 30), pytest.mark.bench]


def run_bench(script: str, *args: str, timeout_s: float = TIMEOUT_S) -> str:
    """Run ``bench/<script> --quick`` as a subprocess, bounded; returns its stdout after checking exit 0.
    On a timeout ``subprocess.run`` kills the script by its pid; the servers it started see their
    stdin pipe close and stop themselves."""
    command = [sys.executable, str(BENCH / script), "--quick", *args]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return result.stdout


def assert_figures(output: str, patterns: list[str]) -> None:
    missing = [pattern for pattern in patterns if not re.search(pattern, output, re.MULTILINE)]
    assert not missing, f"figures not printed: {missing}\n{output[-4000:]}"


def test_keepalive_overhead_quick(tmp_path: Path) -> None:
    output = run_bench("keepalive_overhead.py", "--json", str(tmp_path / "figures.json"))
    assert_figures(
        output,
        [
            r"^server off: http://127\.0\.0\.1:\d+ pid \d+ args .*--sse-keep-alive-interval 0",
            r"^server  on: http://127\.0\.0\.1:\d+ pid \d+ args .*--sse-keep-alive-interval 1",
            rf"^\s+\d+\s+off\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$",
            rf"^\s+\d+\s+on\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$",
            rf"keep-alive off: +{NUM} frames/wall s +{NUM} frames/server-cpu s",
            rf"keep-alive  on: +{NUM} frames/wall s +{NUM} frames/server-cpu s",
            rf"^throughput on/off \(frames per wall s\): {NUM}$",
            rf"^server CPU per frame on/off: +{NUM}$",
            rf"^keep-alive overhead: {NUM}% of throughput \(frames per server CPU s; (?:NOT )?under 15%\); "
            rf"by wall clock: {NUM}%$",
            rf"^cross-check, median of adjacent off/on pairs \(CPU\): {NUM}% overhead$",
            r"^integrity keep-alive off: (\d+)/\1 streams ended with data: \[DONE\] .* -> OK$",
            r"^integrity keep-alive  on: (\d+)/\1 streams ended with data: \[DONE\] .* -> OK$",
        ],
    )
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert {"overhead_pct_cpu", "overhead_pct_wall", "overhead_pct_cpu_paired"} <= figures["summary"].keys()


def test_sse_user_throughput_quick(tmp_path: Path) -> None:
    output = run_bench("sse_user_throughput.py", "--json", str(tmp_path / "figures.json"))
    load = rf"frames/load-generator CPU s +{NUM} frames/wall s +load generator CPU {NUM}%"
    assert_figures(
        output,
        [
            r"^open-files limit: \d+$",
            r"^server: http://127\.0\.0\.1:\d+ pid \d+ args .*--inter-token-latency 0",
            rf"^\s+\d+\s+bare\s+\d+\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}",
            rf"^\s+\d+\s+sse\s+\d+\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}",
            rf"^  bare: +{NUM} {load}$",
            rf"^   sse: +{NUM} {load}$",
            rf"^SSE user throughput: {NUM}% of the bare loop \(target >= \d+%\) -> (?:PASS|FAIL)$",
            rf"^cross-check, median of adjacent bare/sse pairs: {NUM}%$",
            r"^frame counts: every stream ok, same frames per stream for both users -> OK$",
            r"^server: http://127\.0\.0\.1:\d+ pid \d+ args .*--trace-file ",
            r"^streams: (\d+) started of \1, finished: \1 ok$",
            r"^peak open at once: \d+ \(harness send\.\.end\), \d+ \(server trace first\.\.last frame\)$",
            r"^frames: (\d+) sent by the server \(\d+ keep-alive\), \1 recorded by the harness$",
            r"^mismatching requests: 0 \(must be 0\)$",
            rf"^load generator: peak RSS \d+ MiB \(\d+ MiB before the users, ~-?\d+ KiB per stream\), "
            rf"CPU {NUM} s over {NUM} s wall \({NUM}%\); its loop's lag p99 {NUM} ms, max {NUM} ms; "
            rf"p99 once every user was started {NUM} ms$",
            r"^capacity: OK, nothing lost or miscounted$",
        ],
    )
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert {"ratio", "ratio_paired", "counts_ok"} <= figures["throughput"].keys()
    assert figures["capacity"]["ok"]


def test_soak_memory_quick(tmp_path: Path) -> None:
    output = run_bench("soak_memory.py", "--report-dir", str(tmp_path / "reports"), "--json", str(tmp_path / "f.json"))
    memory = rf"memory: first window {NUM} MiB, last {NUM} MiB, growth second->last window {NUM}% \(gate: \+10%\)$"
    assert_figures(
        output,
        [
            r"^running: .* -m loadtests soak --duration 30s --windows 3 --users 4 ",
            r"^run: /",
            r"^window +from s +to s +requests +harness MiB +server MiB$",
            rf"^ +1 +{NUM} +{NUM} +\d+ +{NUM} +{NUM}$",
            rf"^ +3 +{NUM} +{NUM} +\d+ +{NUM} +{NUM}$",
            rf"^harness {memory}",
            rf"^server {memory}",
            rf"^held: \d+ requests in \d+ s = {NUM} requests/s$",
            r"^soak \S",
        ],
    )
    figures = json.loads((tmp_path / "f.json").read_text())
    assert {"harness_rss_mb_growth_second_to_last", "server_rss_mb_growth_second_to_last"} <= figures.keys()


def test_timing_fidelity_quick() -> None:
    output = run_bench("timing_fidelity.py")
    flagged = rf"(?:[\d,]+ \({NUM}%\)|none to flag|n/a)"
    assert_figures(
        output,
        [
            r"^server: http://127\.0\.0\.1:\d+ pid \d+ args .*--inter-token-latency 40 .*--trace-file ",
            r"^running: -m locust -f \S+/mixed_truncate\.py --headless --host http://127\.0\.0\.1:\d+ -u 20 ",
            rf"^streams compared: \d+ of \d+ raw ok streams, \d+ gaps; error p50 {NUM} ms, p99 {NUM} ms, "
            rf"max {NUM} ms; count mismatches: \d+$",
            rf"^recorded minus sent time of a frame, median: {NUM} ms$",
            rf"^errors over 10 ms: \d+; (?:flagged by the harness \(.+\): {flagged}; not flagged: \d+, \d+ of them "
            r".+|flagged share unavailable: .+)$",
            r"^bursts: \d+ gaps over 20 ms fell in \d+ windows of 50 ms, up to \d+ streams each$",
            r"^\| users \| processes \| gaps compared \| error p50 ms \| p99 ms \| max ms \| count mismatches "
            r"\| errors >10 ms \| flagged by the harness \| not flagged "
            r"\| bursts \(50 ms windows >20 ms, max streams\) \|$",
            rf"^\| 20 \| 1 \| [\d,]+ \| {NUM} \| {NUM} \| {NUM} \| \d+ \| [\d,]+ \| {flagged} \| [\d,]+ "
            r"\| \d+, \d+ \|$",
        ],
    )


def test_open_loop_quick(tmp_path: Path) -> None:
    output = run_bench("open_loop.py", "--report-dir", str(tmp_path))
    phase = rf"\s+\d+\s+{NUM}\s+(?:{NUM}|-)\s+(?:{NUM}|-)\s+(?:{NUM}|-)\s+(?:{NUM}|-)$"
    assert_figures(
        output,
        [
            rf"^closed loop: 8 users; its rate before the slowdown: {NUM}/s -> the open loop's --rate$",
            r"^server slows down x4 5 s after its first request; runs of 12 s$",
            r"^run\s+phase\s+sent\s+sent/s\s+TTFT p99 s\s+from sched s\s+queue mean\s+queue max$",
            rf"^closed\s+before{phase}",
            rf"^closed\s+after{phase}",
            rf"^open\s+before{phase}",
            rf"^open\s+after{phase}",
            rf"^open loop: asked {NUM}/s, achieved {NUM}/s, \d+ not sent, \d+ started late$",
            rf"^sent/s after/before: closed {NUM}, open {NUM}$",
        ],
    )


def test_verdict_stability_quick() -> None:
    output = run_bench("verdict_stability.py")
    assert_figures(
        output,
        [
            r"^cores: \d+; levels \(CPU-burning processes beside the run\): \[0\]; 1 run\(s\) of 4 s$",
            r"^good server \(main job\) +0  PASS +(?:(?:PASS|FAIL|INCONCLUSIVE) x\d+(?:, )?)+ +\d+$",
            r"^keep-alive off behind proxy +0  FAIL +(?:(?:PASS|FAIL|INCONCLUSIVE) x\d+(?:, )?)+ +\d+$",
            r"^in-band faults \(20%\) +0  FAIL +(?:(?:PASS|FAIL|INCONCLUSIVE) x\d+(?:, )?)+ +\d+$",
            r"^false verdicts: \d+ \(target 0\); inconclusive: \d+$",
        ],
    )


def test_proxy_distortion_quick(tmp_path: Path) -> None:
    from loadtests.services.proxies import real_proxies

    REAL_PROXIES = real_proxies()
    output = run_bench("proxy_distortion.py", "--json", str(tmp_path / "figures.json"))
    installed = [kind for kind, proxy in REAL_PROXIES.items() if shutil.which(proxy.binary) is not None]
    if "haproxy" in installed:
        installed.append(r"haproxy\+nodelay")
    figures = rf"{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+\d+/\d+\s+\d+/\d+\s+\d+/\d+\s+\d+"
    assert_figures(
        output,
        [
            r"^server: http://127\.0\.0\.1:\d+ pid \d+ args .*--trace-file ",
            r"^stream: 2 at once per target, 10 tokens, first token after 600 ms, a token every 20 ms, ",
            r"^proxy +streams +ttfb p50 ms +added ms +1st frame ms +delay p50 ms +p99 ms +gap err p50 ms +p99 ms "
            r"+merged gaps +frames rec/sent +comments rec/sent +mismatches$",
            *(rf"^{name}\s+2/2\s+{figures}$" for name in ["direct", "embedded", *installed]),
        ],
    )
    rows = json.loads((tmp_path / "figures.json").read_text())
    assert {"direct", "embedded"} <= {row["name"] for row in rows}


SCALE_TIMEOUT_S = 2 * TIMEOUT_S
"""scale.py's quick run has three parts (A, B and C's floor and sse-soak runs): about 95 s on 2 busy cores."""


@pytest.mark.timeout(SCALE_TIMEOUT_S + 30)
def test_scale_quick(tmp_path: Path) -> None:
    output = run_bench("scale.py", "--json", str(tmp_path / "figures.json"), timeout_s=SCALE_TIMEOUT_S)
    assert_figures(
        output,
        [
            r"^sse-soak scale benchmark; open-files limit \d+$",
            r"^== 100 streams in one load-generator process ==$",
            r"^mismatching requests: 0 \(must be 0\)$",
            rf"^\s+100\s+yes\s+100\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$",
            rf"^\s+200\s+yes\s+200\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}$",
            rf"^\s+2\s+\d+\s+{NUM}\s+0\s+{NUM}%\s+{NUM}%$",
            r"^master with 2 workers: (?:not the bottleneck|MAY BE THE BOTTLENECK) \(\d+% of a core, 0 rows lost\)$",
            rf"^every frame exact and no row lost: yes; median lag p99 {NUM} ms$",
            r"^== C: the floor at 100 streams: 10 tokens 200 ms apart, keep-alive 1 s, 1 round\(s\) of floor and "
            r"sse-soak, \d+ s each ==$",
            *(
                rf"^round 1 {tool} *: \d+ frames in a {NUM} s steady window, CPU {NUM} s, {NUM} us per frame; "
                rf"nvcsw \d+, nivcsw \d+ \(whole run\); exit [01](?: \(gates failed: .+\))?$"
                for tool in ("floor", "sse-soak")
            ),
            rf"^round 1: sse-soak CPU per frame / floor at 100 streams: {NUM}x$",
            rf"^floor at 100 streams: sse-soak CPU per frame / floor {NUM} \(median {NUM}x\) \(goal <= 1\.3x\)$",
        ],
    )
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert [row["streams"] for row in figures["streams"]] == [100, 200]
    floor = figures["floor"]
    assert [(run["round"], run["tool"]) for run in floor["runs"]] == [(1, "floor"), (1, "sse-soak")]
    assert all(run["frames"] > 0 for run in floor["runs"]), floor  # a steady window with frames in it, for both
    assert 0 < floor["median_ratio"] < float("inf"), floor
    assert [row["workers"] for row in figures["aggregation"]] == [2] and figures["aggregation"][0]["rows"] > 0


def test_api_server_scaling_quick(tmp_path: Path) -> None:
    output = run_bench("api_server_scaling.py", "--json", str(tmp_path / "figures.json"))
    assert_figures(
        output,
        [
            r"^server x1: http://127\.0\.0\.1:\d+ pid \d+ args .*--api-server-count 1 ",
            r"^server x2: http://127\.0\.0\.1:\d+ pid \d+ args .*--api-server-count 2 ",
            rf"^\s+\d+\s+[12]\s+\d+\s+{NUM}\s+{NUM}\s+{NUM}%\s+{NUM}%$",
            rf"^1 process  : {NUM} frames/s \(client CPU {NUM}%\)$",
            rf"^2 processes: {NUM} frames/s \(client CPU {NUM}%\)$",
            rf"^frames/s, 2 processes / 1 process: {NUM}$",
            r"^integrity: every stream carried \d+ tokens and \[DONE\] -> OK$",
        ],
    )
    figures = json.loads((tmp_path / "figures.json").read_text())["figures"]
    assert {"frames_per_s_1", "frames_per_s_2", "ratio"} <= figures.keys()


def test_history_scale_quick() -> None:
    output = run_bench("history_scale.py")
    assert_figures(
        output,
        [
            r"^nights: 40 in 2 series, 1 regression\(s\), 0 left out; carried back: 40 nights$",
            *(rf"^ *{phase}: +{NUM} s$" for phase in ("write nights", "read", "flags", "tables", "page", "carried")),
            rf"^history from the run directories: {NUM} s \({NUM} ms a night\)$",
            rf"^history from history.parquet: {NUM} s$",
            rf"^peak traced memory \(read, flags, page\): {NUM} MiB$",
            rf"^peak RSS: {NUM} MiB$",
            *(rf"^{name}: {NUM} KiB$" for name in ("history.parquet", "history-flags.parquet", "history.html")),
        ],
    )


def test_peers_quick() -> None:
    output = run_bench("peers.py")
    assert_figures(
        output,
        [
            r"^machine: .+, \d+ CPUs, Python [\d.]+$",
            r"^sse-soak read path: (compiled|python) \(SSE_SOAK_PURE_PYTHON_READS=1 reads through Python: the A/B\)$",
            r"^workload: \d+ chat streams of \d+ prompt / \d+ output tokens for \d+ s; server TTFT ",
            r"^tool +frames +cpu s +frames/cpu s +stream cpu s +frames/stream cpu s +ttft err ms p50/p99 "
            r"+gap err ms p50/p99$",
            rf"^sse-soak +\d+ +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} / {NUM} +{NUM} / {NUM}$",
            r"^sse-soak: \d+/\d+ paired, \d+ gaps compared; server: inband \d+, cut \d+, keep-alive \d+; "
            r"tool: failed \d+ \(.*\), flagged inband (\d+)/\1, cuts (\d+)/\2, keep-alive (\d+)$",
            rf"^floor +\d+ +{NUM} +{NUM} +{NUM} +{NUM} +n/a +n/a$",
            r"^floor: 0/0 paired, 0 gaps compared; server: .*; tool: failed 0 \(reconnects \d+ of \d+ requests; "
            r"frames \d+\), flagged n/a \(judges nothing\), keep-alive n/a$",
            r"^counters +cpu us/frame +utime s +stime s +nvcsw +nivcsw +gc0/1/2 per 1k frames +frames/read "
            r"+frames/wake$",
            rf"^floor +{NUM} +{NUM} +{NUM} +\d+ +\d+ +{NUM} / {NUM} / {NUM} +{NUM} +{NUM}$",
            rf"^sse-soak +{NUM} +{NUM} +{NUM} +\d+ +\d+ +{NUM} / {NUM} / {NUM} +(?:{NUM}|n/a) +(?:{NUM}|n/a)$",
            rf"^sse-soak CPU per frame / floor: {NUM}x streaming-only, {NUM}x in all \(goal <= 1\.3x\)$",
        ],
    )
    floor_line = re.search(r"^floor +(\d+) ", output, re.MULTILINE)
    assert floor_line is not None and int(floor_line.group(1)) > 0, output  # the floor read frames from the server
    ratio = re.search(rf"^sse-soak CPU per frame / floor: ({NUM})x streaming-only, ({NUM})x in all", output, re.M)
    assert ratio is not None and all(0 < float(value) < float("inf") for value in ratio.groups()), output


def test_peers_resolutions_quick() -> None:
    """sse-soak alone at a timing resolution: the table of cost and error (0 ms, the default, which
    every harness has; other resolutions pass ``--timing-resolution-ms``)."""
    output = run_bench("peers.py", "--resolutions", "0")
    assert_figures(
        output,
        [
            r"^resolution ms +cpu us/frame +frames/cpu s +nvcsw +ttft err ms p50/p99/max +gap err ms p50/p99/max "
            r"+gaps merged$",
            rf"^ +0 +{NUM} +{NUM} +\d+ +{NUM} / {NUM} / {NUM} +{NUM} / {NUM} / {NUM} +(?:{NUM}% of \d+|n/a)$",
            rf"^resolution 0 ms: median {NUM} CPU us per frame over 1 run\(s\)$",
        ],
    )
    assert "\nfloor " not in output  # sse-soak alone


def test_breakdown_stages_quick() -> None:
    """The loop-free replay (bench/breakdown.py's B); its py-spy part needs py-spy from PyPI and is
    covered by test_bench_breakdown.py on a committed capture."""
    output = run_bench("breakdown.py", "--stages", "--repeat", "2")
    assert_figures(
        output,
        [
            r"^loop-free replay: \d+ reads of \d+ streams \(\d+ frames\), best of 2$",
            *(rf"^{stage} +{NUM}$" for stage in ("parse", "JSON", "judge", "record", "total")),
        ],
    )


def test_live_metrics_cost_quick() -> None:
    output = run_bench("live_metrics_cost.py")
    assert_figures(
        output,
        [
            r"^batch: \d+ requests x \d+ frames, \d+ times$",
            rf"^counting: {NUM} us per request, {NUM} ns per frame$",
            rf"^writing the same batch: {NUM} us per request$",
            rf"^counting / writing: {NUM}$",
            rf"^one scrape: {NUM} ms of CPU, \d+ bytes$",
            r"^on the loop: 0 calls per request or frame",
            rf"^\s+1\s+off\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+0$",
            rf"^\s+1\s+on\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s+\d+$",
            rf"^median requests_s: off {NUM}, on {NUM}, on/off {NUM}$",
            rf"^median lag_p99_ms: off {NUM}, on {NUM}, on/off {NUM}$",
        ],
    )


def test_hot_path_quick() -> None:
    """The golden reads replayed per stage, under this tree and (alternating) under its own HEAD."""
    assert_figures(run_bench("hot_path.py"), [rf"^read {NUM} µs  split {NUM} µs  record {NUM} µs  stamp {NUM} µs$"])
    output = run_bench("hot_path.py", "--against", "HEAD")
    assert_figures(
        output,
        [
            rf"^round 1: read {NUM}->{NUM}",
            *(
                rf"^  {stage} +A +{NUM}  B +{NUM}  saved {NUM}  B/A {NUM}$"
                for stage in ("read", "split", "record", "stamp")
            ),
        ],
    )
