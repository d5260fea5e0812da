"""The history's page: one self-contained file whose regressions, left-out directories, series and
trend panels say what the ``History`` holds.

``History`` objects are built here directly (nights, baselines and flags as the model defines
them), so the page is tested whatever the statistics that produced them; plots are drawn by
matplotlib for real and read back from the page.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from loadtests.report.history import FIGURES, NIGHT_COLUMNS, Flag, History, LeftOut, regressions
from loadtests.report.history_page import REGRESSIONS_SHOWN, TABLE_NIGHTS_SHOWN, render_history_page, write_history_page
from loadtests.report.html_report import CSS as REPORT_CSS

pytestmark = pytest.mark.fast

FIRST_NIGHT = pd.Timestamp("2026-11-01 01:00", tz="UTC")
WINDOW = 14
SENSITIVITY = 4.0


RECORDED = ("ttft_p99_s", "silence_over_interval", "keepalive_per_silent_s", "rate_http_5xx", "harness_peak_rss_mb")
"""The figures a synthetic night records unless told: a few panels draw quickly."""
EVERY_FIGURE = tuple(figure.column for figure in FIGURES)


def nights_of(series: str, count: int, seed: int = 0, recorded: tuple[str, ...] = RECORDED) -> pd.DataFrame:
    """``count`` nightly PASS runs of one series recording the figures ``recorded``, noisy around a level."""
    random = np.random.default_rng(seed)
    scenario, _, server = series.partition(" on ")
    rows = []
    for night in range(count):
        row: dict[str, object] = {
            "series": series,
            "scenario": scenario,
            "server": server,
            "proxy": "none",  # as the reader names no proxy
            "run_dir": f"{scenario}-{night:03d}",
            "path": f"/runs/{scenario}-{night:03d}",
            "started_at": FIRST_NIGHT + pd.Timedelta(days=night),
            "kind": "soak",
            "version": "0.9.0",
            "verdict": "PASS",
            "gates_failed": "",
            "requests": 12000 + night,
            "judged": 11990 + night,
            "keep_alive_interval_s": 15.0,
            "longest_silence_s": 9.0,
            "harness_lag_max_ms": 20.0,
        }
        for figure in FIGURES:
            level = {"s": 0.2, "share": 0.001, "ms": 4.0, "MiB": 300.0}.get(figure.unit, 1.0)
            row[figure.column] = (
                np.nan if figure.column not in recorded else level * (1 + 0.05 * random.standard_normal())
            )
        rows.append(row)
    return pd.DataFrame(rows, columns=[*NIGHT_COLUMNS, *(figure.column for figure in FIGURES)])


def judged(nights: pd.DataFrame, window: int = WINDOW, sensitivity: float = SENSITIVITY) -> History:
    """A ``History`` of these nights, judged by the history's own statistics (``regressions``)."""
    nights = nights.sort_values("started_at", kind="stable").reset_index(drop=True)
    baselines, flags, within = regressions(nights, window, sensitivity)
    return History(
        nights=nights,
        flags=flags,
        baselines=baselines,
        window=window,
        sensitivity=sensitivity,
        within_timing_error=within,
    )


def section_of(page: str, title: str) -> str:
    """The page's section whose heading is ``title`` (escaped as the page escapes it)."""
    heading = re.search(rf"<h[12][^>]*>{re.escape(html.escape(title))}</h[12]>", page)
    assert heading, f"no section {title!r}"
    return page[heading.start() : page.index("</section>", heading.start())]


def panel_images(part: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([^"]+)"', part)]


def test_the_regressions_table_lists_exactly_the_flags_with_their_figures_and_values() -> None:
    nights = nights_of("chat on bundled", 30)
    nights.loc[20, "ttft_p99_s"] = 0.9  # one night's TTFT p99 jumps from ~200 ms
    nights.loc[29, "keepalive_per_silent_s"] = 0.2  # the newest night's keep-alives fall (worse: down)
    history = judged(nights)
    assert {(flag.run_dir, flag.figure) for flag in history.flags} == {
        ("chat-020", "ttft_p99_s"),
        ("chat-029", "keepalive_per_silent_s"),
    }
    regressions_part = section_of(render_history_page(history), "Regressions")
    said = "2 regressions on 2 nights; 1 of the server on the newest night of a series: it fails the job."
    assert f'<p class="alarm">{said}</p>' in regressions_part
    rows = re.findall(r'<tr class="([a-z-]+)" data-figure="([a-z0-9_]+)">(.*?)</tr>', regressions_part)
    assert [(kind, figure) for kind, figure, _ in rows] == [
        ("fails-job", "keepalive_per_silent_s"),  # the newest night first: it fails the job
        ("regression", "ttft_p99_s"),
    ]
    newest, older = rows[0][2], rows[1][2]
    assert "chat-029" in newest and "keep-alive frames per silent second" in newest and "0.2 per s" in newest
    assert "newest night: fails the job" in newest
    flag = next(flag for flag in history.flags if flag.figure == "ttft_p99_s")
    assert "chat-020" in older and "2026-11-21 01:00 UTC" in older and "TTFT p99" in older
    assert "900 ms" in older  # seconds under one shown as ms
    assert f"over {flag.baseline_nights} nights" in older
    assert f"+{round((0.9 - flag.baseline_median) / flag.baseline_median * 100)}%" in older
    assert "newest night: fails the job" not in older


def test_a_long_list_of_regressions_keeps_the_newest_open_and_the_older_behind_a_toggle() -> None:
    history = judged(nights_of("chat on bundled", 80))
    history.flags = [
        Flag(
            "chat on bundled",
            "ttft_p99_s",
            f"chat-{night:03d}",
            FIRST_NIGHT + pd.Timedelta(days=night),
            0.9,
            0.2,
            0.01,
            14,
            0.7,
            47.2,
        )
        for night in range(10, 80)
    ]
    regressions = section_of(render_history_page(history), "Regressions")
    shown, older = regressions.split("<details>")
    assert shown.count("<tr class=") == REGRESSIONS_SHOWN and older.count("<tr class=") == 70 - REGRESSIONS_SHOWN
    assert "chat-079" in shown and "fails-job" in shown and "chat-010" in older and "chat-029" in older
    assert f"<summary>{70 - REGRESSIONS_SHOWN} older regressions</summary>" in older


def test_no_regression_is_said_plainly_and_the_method_in_one_sentence_with_its_options() -> None:
    page = render_history_page(judged(nights_of("chat on bundled", 20), window=7, sensitivity=3.5))
    method = section_of(page, "sse-soak history")
    assert "the median and the MAD (median absolute deviation) of the same figure over the previous 7 nights" in method
    assert "by more than 3.5 robust standard deviations" in method and "with a floor" in method
    assert "No regression: no night moved past its baseline." in section_of(page, "Regressions")
    assert '<table class="regressions">' not in page


def test_left_out_directories_and_why_are_shown_escaped_at_the_top() -> None:
    history = judged(nights_of("chat on bundled", 10))
    history.left_out = [
        LeftOut("/runs/<b>night-7</b>", "summary.json is not JSON: Expecting value & more"),
        LeftOut("/runs/gone", "no such directory"),
    ]
    page = render_history_page(history)
    left_out = section_of(page, "Left out")
    assert page.index(left_out) < page.index('id="series-1"')  # before any series: never hidden
    assert "<b>night-7</b>" not in page
    assert "<td>/runs/&lt;b&gt;night-7&lt;/b&gt;</td><td>summary.json is not JSON: Expecting value &amp; more</td>" in (
        left_out
    )
    assert "<td>/runs/gone</td><td>no such directory</td>" in left_out
    assert '<p class="note">2 directories left out.</p>' in left_out
    assert "Nothing: every directory given was read." in section_of(
        render_history_page(judged(nights_of("a on b", 3))), "Left out"
    )


def test_a_fail_night_shows_its_verdict_and_its_failed_gates_in_report_htmls_words_and_colours() -> None:
    nights = nights_of("chat on bundled", 12)
    nights.loc[7, ["verdict", "gates_failed"]] = ["FAIL", "keep_alive_covered, no_http_5xx"]
    nights.loc[8, "verdict"] = "INCONCLUSIVE"
    page = render_history_page(judged(nights))
    series = section_of(page, "chat on bundled")
    cells = dict(re.findall(r'<tr data-run="(chat-00[678])">(.*?)</tr>', series))
    assert '<span class="verdict fail">FAIL</span>' in cells["chat-007"]
    assert '<td class="gates">keep_alive_covered, no_http_5xx</td>' in cells["chat-007"]
    assert '<span class="verdict inconclusive">INCONCLUSIVE</span>' in cells["chat-008"]
    assert (
        '<span class="verdict pass">PASS</span>' in cells["chat-006"] and '<td class="gates"></td>' in cells["chat-006"]
    )
    assert "12 nights (10 PASS, 1 FAIL, 1 INCONCLUSIVE)" in series
    rule = r"\.verdict\.(pass|fail|inconclusive) \{ background: (#[0-9a-f]{6}); \}"
    colours = dict(re.findall(rule, page))
    assert colours == dict(re.findall(rule, REPORT_CSS)) and set(colours) == {"pass", "fail", "inconclusive"}


def test_each_series_gets_its_own_section_with_its_trend_panels() -> None:
    chat = nights_of("chat on bundled", 20, seed=1)
    chat.loc[:4, "version"] = "0.8.1"
    silence = nights_of("long-silence on vllm", 15, seed=2)
    silence["series"], silence["proxy"] = "long-silence on vllm via nginx", "nginx"
    nights = pd.concat([chat, silence])
    page = render_history_page(judged(nights))
    covered = "35 nights in 2 series, from 2026-11-01 to 2026-11-20; sse-soak versions: 0.8.1 (5 nights), 0.9.0 (30"
    assert covered in page
    for title, count in (("chat on bundled", 20), ("long-silence on vllm via nginx", 15)):
        series = section_of(page, title)
        scenario, _, server = title.partition(" on ")  # the proxy, when one stood between, named as in the title
        intro = f"<p>{count} nights ({count} PASS, 0 FAIL, 0 INCONCLUSIVE); scenario {scenario} on {server}.</p>"
        assert intro in series
        assert len(re.findall(r"<tr data-run=", series)) == count
        (image,) = panel_images(series)
        assert image.startswith(b"\x89PNG")
        other = "long-silence" if title.startswith("chat") else "chat-"
        assert other not in series


def test_a_figure_absent_from_a_series_is_said_not_recorded_and_not_drawn() -> None:
    server = ("server_waiting_p95", "server_kv_cache_max", "server_peak_rss_mb")
    nights = pd.concat([nights_of("chat on bundled", 10), nights_of("chat on vllm", 10, recorded=RECORDED + server)])
    page = render_history_page(judged(nights))
    bundled, vllm = section_of(page, "chat on bundled"), section_of(page, "chat on vllm")
    absent = re.search(r'<p class="not-recorded">Not recorded in this series: (.*?)\.</p>', bundled)
    assert absent
    labels = absent[1].split(", ")
    assert {"server waiting requests p95", "server KV-cache usage max", "server peak memory", "TTFT p50"} <= set(labels)
    assert "TTFT p99" not in labels and "harness peak memory" not in labels
    assert len(labels) == len(FIGURES) - len(RECORDED)
    present = re.search(r'<p class="not-recorded">Not recorded in this series: (.*?)\.</p>', vllm)
    assert present and "server" not in present[1]
    # two rows of three panels against three rows: the absent figures take no panel
    (fewer,) = panel_images(bundled)
    (more,) = panel_images(vllm)
    assert png_height(fewer) < png_height(more)


def png_height(image: bytes) -> int:
    return int.from_bytes(image[20:24], "big")  # the IHDR chunk: width at 16, height at 20


def tinted(image: bytes) -> dict[str, int]:
    """Pixels of the trend image by tint: strong red (a regression's dot), pale red (a FAIL night's
    stripe), pale blue (the band to the flag limit); the legend's samples count in every image."""
    rgb = imread(io.BytesIO(image), format="png")[..., :3].astype(float)
    red, green, blue = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return {
        "regression": int(((red - green) > 0.5).sum()),
        "fail": int((((red - green) > 0.08) & ((red - green) < 0.4) & ((red - blue) > 0.08)).sum()),
        "band": int((((blue - red) > 0.1) & (red > 0.6)).sum()),
    }


def test_the_panels_mark_regressions_red_fail_nights_by_stripes_and_draw_the_band_only_where_a_baseline_is() -> None:
    nights = nights_of("chat on bundled", 30)
    plain = judged(nights)
    assert not plain.flags
    regressed = nights.copy()
    regressed.loc[[20, 25], "ttft_p99_s"] = 0.9
    failed = nights.copy()
    failed.loc[[8, 16, 24], "verdict"] = "FAIL"
    no_band = judged(nights)
    no_band.baselines = no_band.baselines.iloc[0:0]

    def counts(history: History) -> dict[str, int]:
        (image,) = panel_images(section_of(render_history_page(history), "chat on bundled"))
        return tinted(image)

    before, flagged, striped, bare = counts(plain), counts(judged(regressed)), counts(judged(failed)), counts(no_band)
    assert len(judged(regressed).flags) == 2
    assert flagged["regression"] > before["regression"] > 0  # the legend's dot, then the nights' dots
    assert striped["fail"] > before["fail"] > 0 and striped["regression"] == before["regression"]
    assert before["band"] > 10 * bare["band"] > 0  # without baselines, only the legend's sample


def test_a_hostile_scenario_name_and_run_directory_are_escaped_everywhere() -> None:
    hostile = '<script>alert("x")</script>'
    nights = nights_of("chat on bundled", 12)
    nights["scenario"] = hostile
    nights["series"] = f"{hostile} on http://h.example/?a=1&b=<i>"
    nights["run_dir"] = [f'night-{n}"><img src=x>' for n in range(12)]
    nights["gates_failed"] = "<gate>"
    nights["version"] = "<v>"
    nights.loc[11, "ttft_p99_s"] = 5.0
    history = judged(nights)
    assert history.flags
    page = render_history_page(history)
    for raw in ("<script>", "<img src=x>", "<i>", "<gate>", "<v>"):
        assert raw not in page
    assert html.escape(hostile) in page
    assert "&lt;gate&gt;" in page and "&lt;v&gt; (12 nights)" in page


def test_the_page_refers_to_nothing_outside_itself() -> None:
    nights = pd.concat([nights_of("chat on bundled", 20), nights_of("chat on vllm", 20, seed=3)])
    nights.loc[nights.index[5], "server"] = "https://vllm.example:8000"  # a URL as text is fine, as a resource not
    page = render_history_page(judged(nights))
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    sources = re.findall(r'\b(?:src|href)="([^"]*)"', page)
    assert sources and all(source.startswith(("data:image/png;base64,", "#")) for source in sources)


def test_a_long_series_shows_its_newest_nights_and_keeps_the_older_behind_a_toggle() -> None:
    page = render_history_page(judged(nights_of("chat on bundled", 40)))
    series = section_of(page, "chat on bundled")
    shown, older = series.split("<details>")
    runs = re.findall(r'<tr data-run="([^"]+)">', shown)
    assert runs == [f"chat-{n:03d}" for n in range(39, 39 - TABLE_NIGHTS_SHOWN, -1)]  # newest first
    assert "<summary>10 older nights</summary>" in older
    assert re.findall(r'<tr data-run="([^"]+)">', older) == [f"chat-{n:03d}" for n in range(9, -1, -1)]


def test_a_year_of_nights_makes_one_bounded_image_and_a_bounded_page_per_series() -> None:
    page = render_history_page(judged(nights_of("chat on bundled", 365, recorded=EVERY_FIGURE)))
    (image,) = panel_images(section_of(page, "chat on bundled"))  # one image whatever the nights
    assert png_height(image) < 1200
    assert len(page.encode()) < 700_000, len(page.encode())  # measured: 0.34 MB


def test_an_empty_history_still_says_what_was_left_out() -> None:
    page = render_history_page(History(nights=nights_of("chat on bundled", 0), left_out=[LeftOut("/x", "corrupt")]))
    assert "No night was read." in page and "<td>/x</td><td>corrupt</td>" in page


def test_the_page_is_written_whole_and_a_refused_write_leaves_nothing_beside_it(tmp_path: Path) -> None:
    history = judged(nights_of("chat on bundled", 8))
    path = tmp_path / "history.html"
    write_history_page(history, path)
    assert path.read_text(encoding="utf-8") == render_history_page(history)
    refused = tmp_path / "refused.html"
    refused.mkdir()  # the page cannot take its place: as a disk that refuses it
    with pytest.raises(OSError):
        write_history_page(history, refused)
    assert not list(tmp_path.glob("*.tmp"))


def test_a_harness_change_fails_nothing_and_moves_within_the_timing_error_are_apart() -> None:
    """The newest night's loop lag jumped (a busier box) and its gap p99 moved with it, within the
    harness's own error: the page says no regression of the server fails the job, names the lag a
    harness change, and lists the gap move apart with the timing error it stayed within. The night
    before, the same kind of move with the lag as usual is a regression (the control)."""
    nights = nights_of("chat on bundled", 30, recorded=("gap_p99_s", "harness_lag_p99_ms"))
    nights.loc[28, "harness_lag_p99_ms"] = 4.0
    nights.loc[28, "gap_p99_s"] = 0.3  # +100 ms, the lag as usual (~4 ms): a regression
    nights.loc[29, "harness_lag_p99_ms"] = 200.0  # from ~4 ms
    nights.loc[29, "gap_p99_s"] = 0.3  # +100 ms under a 200 ms lag: within the harness's error
    history = judged(nights)
    assert {(flag.run_dir, flag.figure) for flag in history.flags} >= {
        ("chat-028", "gap_p99_s"),
        ("chat-029", "harness_lag_p99_ms"),
    }
    assert ("chat-029", "gap_p99_s") in [(flag.run_dir, flag.figure) for flag in history.within_timing_error]
    page = render_history_page(history)
    regressions_part = section_of(page, "Regressions")
    said = "1 regression and 1 harness change on 2 nights; none of the server on the newest night of a series"
    assert said + ": the job does not fail on them." in regressions_part
    assert "newest night: fails the job" not in regressions_part
    assert "harness loop lag p99 (the harness, not the server: fails nothing)" in regressions_part
    within = section_of(page, "Within the harness's own timing error")
    rows = re.findall(r'<tr class="([a-z-]+)" data-figure="([a-z0-9_]+)">(.*?)</tr>', within)
    assert [(figure, "chat-029" in row) for _, figure, row in rows] == [("gap_p99_s", True)]
    assert "± 204" in rows[0][2]  # 200 ms tonight + the baseline's ~4 ms
