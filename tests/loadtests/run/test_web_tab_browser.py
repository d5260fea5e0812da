"""The web UI's sse-soak tab and form in a real headless browser (Debian's chromium): opened while a
shipped scenario runs and after it, each time a screenshot checked against what the page's DOM
says it shows. Screenshots are written under the test's tmp_path (printed) and, when
SSE_SOAK_WEBUI_SCREENSHOTS names a directory, copied there (the docs' candidates)."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.declare.options import Surface, on
from loadtests.judge.gates import gate_is_noise
from loadtests.judge.summary import Summary
from tests.browser import Browser, distinct_colours, ink, pixels, wait_until
from tests.conftest import require_chromium
from tests.loadtests.locust_run import LiveLocust

pytestmark = pytest.mark.webui

SCREENSHOTS_ENV = "SSE_SOAK_WEBUI_SCREENSHOTS"
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")
TABLE = """
return [...document.querySelectorAll('table tbody tr')].map(row => {
  const cells = [...row.querySelectorAll('td')];
  return {cells: cells.map(cell => cell.innerText.trim()),
          rect: cells.length > 1 ? cells[1].getBoundingClientRect().toJSON() : null};
});
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    require_chromium()
    started = Browser.start(tmp_path / "chromedriver.log")
    yield started
    started.close()


def web_ui_answers(url: str) -> bool:
    try:
        return httpx.get(url + "/", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def screenshot(browser: Browser, path: Path) -> bytes:
    """The page as PNG, written to ``path`` (printed) and copied where SSE_SOAK_WEBUI_SCREENSHOTS
    says, if it says."""
    png = browser.screenshot(path)
    print(f"screenshot: {path}")
    directory = os.environ.get(SCREENSHOTS_ENV)
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(directory) / path.name)
    return png


def rows_by_name(browser: Browser) -> dict[str, dict[str, Any]]:
    """The sse-soak table as the page shows it: each row's cells and its value cell's box."""
    return {row["cells"][0]: row for row in browser.run(TABLE) if len(row["cells"]) == 3}


def assert_shows(png: bytes, row: dict[str, Any]) -> None:
    """The screenshot is a page, not a blank, and the value the DOM says the row shows is drawn
    where the DOM says it is, within the viewport."""
    image = pixels(png)
    assert image.shape[0] >= 800 and image.shape[1] >= 1200, image.shape
    assert distinct_colours(image) > 30, "the screenshot is (nearly) blank"
    rect = row["rect"]
    assert rect["y"] >= 0 and rect["y"] + rect["height"] <= image.shape[0], f"{row['cells']} out of view: {rect}"
    assert ink(image, rect) > 40, f"nothing drawn where the page says {row['cells'][1]!r} is ({rect})"


def raw_status(port: int, path: str) -> int:
    """The status of GET ``path`` sent as written (http.client normalises no ``..``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_the_tab_follows_a_run_then_shows_its_verdict_and_serves_its_report(tmp_path: Path, browser: Browser) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ("--web-host", "127.0.0.1", "--web-port", str(port), "--autostart", "-u", "4", "-r", "4", "-t", "10s")
    with LiveLocust("slow_prefill", tmp_path, *args, "--autoquit", "60", "--flush-interval", "1") as locust:
        run_dir = Path(locust.wait_for(r"^run directory: (.+)$")[1])
        browser.open(f"{url}/?tab=sse-soak")

        def running() -> dict[str, dict[str, Any]] | None:
            rows = rows_by_name(browser)
            verdict = rows.get("verdict", {}).get("cells", ["", ""])[1]
            gates = [name for name in rows if name.startswith("gate ")]
            return rows if verdict.startswith("running for") and gates and "harness lag" in rows else None

        during = wait_until(running, 30, "the tab to show the running test's gates")
        assert during["verdict"]["cells"][2].startswith("so far: ")
        assert during["report"]["cells"][1] == "written when the test stops"
        assert_shows(screenshot(browser, tmp_path / "sse-soak-tab-running.png"), during["verdict"])

        def judged() -> dict[str, dict[str, Any]] | None:  # the same page: its last poll carries the verdict
            rows = rows_by_name(browser)
            return rows if rows.get("verdict", {}).get("cells", ["", ""])[1] in VERDICTS else None

        after = wait_until(judged, 90, "the tab to show the verdict")
        assert_shows(screenshot(browser, tmp_path / "sse-soak-tab-judged.png"), after["verdict"])
        summary = json.loads((run_dir / "summary.json").read_text())
        assert after["verdict"]["cells"][1] == summary["verdict"]
        judged_run = Summary.load(run_dir)
        for gate in judged_run.gates:  # as the console shows them: a gate not worth showing is left out
            row = after.get(f"gate {gate.name}")
            if gate_is_noise(gate, judged_run.point_names):
                assert row is None, gate
            else:
                assert row is not None and row["cells"][1] == gate.word, gate
        assert after["keep-alive frames"]["cells"][1] == str(summary["keepalive_frames"])
        report = after["report"]["cells"][1]
        assert report == f"/sse-soak/runs/{run_dir.name}/report.html"
        browser.open(url + report)
        assert wait_until(lambda: browser.run("return document.body.innerText.includes('verdict')"), 30, "the report")
        assert httpx.get(url + report, timeout=10).content == (run_dir / "report.html").read_bytes()
        for escape in ("../", "..%2F", "%2e%2e/"):
            assert raw_status(port, f"/sse-soak/runs/{run_dir.name}/{escape}{escape}etc/passwd") == 404
        locust.signal(signal.SIGINT)  # the web UI, idle, quits (--autoquit is the bound if it did not)
        code = locust.wait(60)
    assert code == {"PASS": 0, "FAIL": 1}.get(summary["verdict"], 3)


def test_the_form_shows_short_labels_and_the_scenarios_values(tmp_path: Path, browser: Browser) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with LiveLocust("slow_prefill", tmp_path, "--web-host", "127.0.0.1", "--web-port", str(port)) as locust:
        wait_until(lambda: web_ui_answers(url), 60, "the web UI")
        page = httpx.get(url + "/", timeout=10).text
        template = json.loads(re.search(r"window\.templateArgs = (.*)", page)[1])  # type: ignore[index]
        fields = template["extra_options"]
        assert fields["keep_alive_interval"]["default_value"] == 0.5  # the scenario's, not empty
        assert fields["proxy"]["default_value"] == "embedded"
        assert fields["proxy_read_timeout"]["default_value"] == 10.0
        for item in on(Surface.LOCUST):
            if item.form:
                assert fields[item.name]["help_text"] == item.label, item.name

        browser.open(url + "/")
        wait_until(lambda: browser.run("return document.body.innerText.includes('Custom parameters')"), 30, "the form")
        browser.run("[...document.querySelectorAll('p')].find(p => p.innerText === 'Custom parameters').click()")
        shown = """
        return [...document.querySelectorAll('.MuiAccordionDetails-root .MuiFormControl-root')].map(field => {
          const label = field.querySelector('label'), input = field.querySelector('input');
          return {label: label ? label.innerText : null, cut: label ? label.scrollWidth > label.clientWidth + 1 : null,
                  name: input ? input.name : null, value: input ? input.value : null,
                  visible: input ? input.getBoundingClientRect().height > 0 : false,
                  rect: input ? input.getBoundingClientRect().toJSON() : null};
        });
        """
        expanded = "return !!document.querySelector('.MuiAccordion-root.Mui-expanded .MuiCollapse-entered')"
        wait_until(lambda: browser.run(expanded), 30, "the custom parameters to open")
        rows = [field for field in browser.run(shown) if field["visible"]]
        by_label = {field["label"]: field for field in rows if field["label"]}
        keep_alive = by_label["Keep Alive Interval (seconds; 0 = off)"]
        assert keep_alive["value"] == "0.5"
        assert [field["label"] for field in rows if field["cut"]] == []  # every label whole, none cut with "…"
        browser.run(
            "[...document.querySelectorAll('label')].find(l => l.innerText.startsWith('Keep Alive'))"
            ".scrollIntoView({block: 'center'})"
        )
        keep_alive = {f["label"]: f for f in browser.run(shown)}["Keep Alive Interval (seconds; 0 = off)"]
        png = screenshot(browser, tmp_path / "sse-soak-form.png")
        assert_shows(png, {"cells": ["keep_alive_interval", "0.5"], "rect": keep_alive["rect"]})
        locust.signal(signal.SIGINT)  # an idle web UI's Ctrl-C quits
        assert locust.wait(60) == 0
