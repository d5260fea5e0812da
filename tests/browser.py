"""A real headless browser for tests: Debian's chromium driven by its chromedriver over the W3C
WebDriver protocol (plain HTTP, spoken with httpx: no new dependency), and checks on the PNG
screenshots it takes.

``Browser.start()`` starts chromedriver on a free loopback port, waits until it answers, and opens
one headless chromium session with a fresh profile and the flags that keep it off the network (as
root, on a machine without one, chromium otherwise stalls on refused connections). ``close()``
ends the session, then chromedriver and any chromium it left, each by its own pid.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil

CHROMIUM = os.environ.get("SSE_SOAK_CHROMIUM", "/usr/bin/chromium")
"""Debian's chromium unless SSE_SOAK_CHROMIUM names another build (a CI runner's google-chrome)."""
CHROMEDRIVER = os.environ.get("SSE_SOAK_CHROMEDRIVER", "/usr/bin/chromedriver")
"""Debian's chromedriver unless SSE_SOAK_CHROMEDRIVER names the one matching that build."""
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
    "--force-device-scale-factor=1",
]
_T = TypeVar("_T")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(check: Callable[[], _T | None], timeout: float, what: str, every: float = 0.2) -> _T:
    """``check()``'s first value that is not None (nor False), polled every ``every`` s; an
    ``AssertionError`` naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


class Browser:
    """One chromium session through chromedriver (module docstring)."""

    def __init__(self, driver: subprocess.Popen[bytes], url: str, profile: Path) -> None:
        self.driver = driver
        self.url = url
        self.profile = profile
        self.session: str | None = None
        self.http = httpx.Client(base_url=url, timeout=60)

    @classmethod
    def start(cls, log: Path) -> Browser:
        port = _free_port()
        with log.open("wb") as sink:
            driver = subprocess.Popen(
                [CHROMEDRIVER, f"--port={port}", "--allowed-ips=127.0.0.1"],
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        browser = cls(driver, f"http://127.0.0.1:{port}", Path(tempfile.mkdtemp(prefix="sse-soak-chromium-")))
        try:
            wait_until(browser._ready, 30, "chromedriver to answer")
            options = {"binary": CHROMIUM, "args": [*FLAGS, f"--user-data-dir={browser.profile}"]}
            capabilities = {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}
            answer = browser.http.post("/session", json={"capabilities": capabilities})
            answer.raise_for_status()
            browser.session = answer.json()["value"]["sessionId"]
        except BaseException:
            browser.close()
            raise
        return browser

    def _ready(self) -> bool:
        with contextlib.suppress(httpx.TransportError):
            return bool(self.http.get("/status", timeout=2).json()["value"]["ready"])
        return False

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = self.http.request(method, f"/session/{self.session}{path}", json=body)
        value = answer.json().get("value")
        if answer.status_code != 200:
            raise AssertionError(f"WebDriver {method} {path}: {answer.status_code} {value}")
        return value

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """``script`` (a function body: ``return ...``) run in the page, with ``arguments``."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path: Path) -> bytes:
        """The viewport as PNG, written to ``path`` too."""
        png = base64.b64decode(self._call("GET", "/screenshot"))
        path.write_bytes(png)
        return png

    def close(self) -> None:
        """End the session (chromium with it), then chromedriver and whatever it left, by pid."""
        if self.session is not None:
            with contextlib.suppress(httpx.HTTPError, AssertionError, ValueError):
                self._call("DELETE", "")
            self.session = None
        self.http.close()
        with contextlib.suppress(psutil.Error):
            left = psutil.Process(self.driver.pid).children(recursive=True)
            self.driver.terminate()
            self.driver.wait(10)
            for process in left:
                with contextlib.suppress(psutil.Error):
                    process.kill()
        if self.driver.poll() is None:
            self.driver.kill()
            self.driver.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)


# -- what a screenshot shows --------------------------------------------------------------------


def pixels(png: bytes) -> Any:
    """The screenshot as an RGB array (height, width, 3) of uint8 (Pillow comes with matplotlib)."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"))


def distinct_colours(image: Any) -> int:
    import numpy as np

    return len(np.unique(image.reshape(-1, 3), axis=0))


def ink(image: Any, rect: dict[str, float]) -> int:
    """Pixels inside ``rect`` (a DOMRect's ``x``, ``y``, ``width``, ``height``, in CSS pixels at scale
    1) that differ clearly from the region's most common colour, its background: text drawn there."""
    import numpy as np

    top, left = max(0, int(rect["y"])), max(0, int(rect["x"]))
    region = image[top : int(rect["y"] + rect["height"]), left : int(rect["x"] + rect["width"])].reshape(-1, 3)
    if not len(region):
        return 0
    colours, counts = np.unique(region, axis=0, return_counts=True)
    background = colours[counts.argmax()].astype(int)
    return int((np.abs(region.astype(int) - background).sum(axis=1) > 120).sum())
