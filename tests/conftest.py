"""Shared fixtures: real target servers on free loopback ports, always stopped; and the fast tier's
promise checked: a test marked ``fast`` that starts a process fails."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from loadtests.services import real_vllm as real
from loadtests.services.proxies import real_proxies
from loadtests.services.proxies.litellm import litellm_available
from loadtests.services.stack import ChildService, TargetServerProcess
from tests.browser import CHROMEDRIVER, CHROMIUM
from tests.no_process import no_child_processes

StartServer = Callable[..., ChildService]

pytest_plugins = ["pytester"]  # a user's own pytest, for the plugin's tests (tests/user_pytest.py)

# The suite's runs judge the server, on a CI machine that runs many of them at once: the
# harness_kept_up gate (which judges this machine) is off in them unless a test turns it on with
# --harness-lag-limit-ms, as the tests of the gate itself do. Every Locust child inherits this.
os.environ.setdefault("SSE_SOAK_HARNESS_LAG_LIMIT_MS", "0")


HEAVY_TIER = "heavy tier:"
"""How pyproject's ``[tool.pytest.ini_options] markers`` declares a heavy tier: its description
starts with this. Those markers are the tiers, declared there only; nothing else (a file's name, a
skip, a fixture) puts a test in a tier."""


def heavy_tiers(config: pytest.Config) -> tuple[str, ...]:
    """The tiers ``python -m pytest`` leaves out, in pyproject's order (its markers say what each
    holds). Every other test is the install tier: the fast tier and end-to-end runs against the
    bundled server, what a newcomer needs to trust an install, in minutes. ``-m heavy`` runs every
    heavy tier."""
    declared = (line.partition(":") for line in config.getini("markers"))
    return tuple(name.strip() for name, _, description in declared if description.strip().startswith(HEAVY_TIER))


def pytest_configure(config: pytest.Config) -> None:
    """A bare ``python -m pytest`` (no ``-m``, no paths) runs the install tier. Named files or a
    ``-m`` expression run what they name, heavy or not."""
    bare = config.args_source in (pytest.Config.ArgsSource.TESTPATHS, pytest.Config.ArgsSource.INVOCATION_DIR)
    if not config.option.markexpr and bare:
        config.option.markexpr = "not heavy"


def pytest_report_header(config: pytest.Config) -> str:
    if config.option.markexpr == "not heavy":
        return "sse-soak: the install tier (-m heavy runs the heavy tiers: " + ", ".join(heavy_tiers(config)) + ")"
    return f"sse-soak: tests selected by -m {config.option.markexpr!r}" if config.option.markexpr else ""


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test of a heavy tier is marked ``heavy`` too, unless it is ``fast``: a fast test is of the
    install tier wherever it lives (its module's tier marker is for the module's other tests). A test
    that uses the session's real vLLM must be marked ``vllm`` (a collection error says so); those run
    last, together: vLLM starts once, after every other test, and stops with the session, so no other
    test shares the machine with it."""
    tiers = heavy_tiers(config)
    unmarked = [item.nodeid for item in items if uses_real_vllm(item) and item.get_closest_marker("vllm") is None]
    if unmarked:
        raise pytest.UsageError("these use vllm_server: mark them pytest.mark.vllm\n" + "\n".join(unmarked))
    for item in items:
        if item.get_closest_marker("fast") is None and any(item.get_closest_marker(tier) for tier in tiers):
            item.add_marker(pytest.mark.heavy)
    items.sort(key=uses_real_vllm)


def uses_real_vllm(item: pytest.Item) -> bool:
    """``item`` uses the session's real vLLM (the ``vllm_server`` fixture), directly or through another fixture."""
    return "vllm_server" in getattr(item, "fixturenames", ())


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``fast`` fails if it starts a child process, even one whose error it caught."""
    if request.node.get_closest_marker("fast") is None:
        yield
        return
    with no_child_processes(request.node.nodeid) as refused:
        yield
    if refused:
        pytest.fail("\n".join(refused), pytrace=False)


REQUIRE_COMPILED_READS = "SSE_SOAK_REQUIRE_COMPILED_READS"
"""Set to 1 (CI does): a compiled read path that is not built fails its tests instead of skipping them."""


def compiled_reads() -> Any:
    """``loadtests.client._fastread``, whatever ``SSE_SOAK_PURE_PYTHON_READS`` says; a skip when it
    is not built (``pip install -e .`` builds it), a failure under ``SSE_SOAK_REQUIRE_COMPILED_READS=1``."""
    try:
        return importlib.import_module("loadtests.client._fastread")
    except ImportError as exc:
        missing = f"the compiled read path is not built ({exc}): pip install -e ."
        if os.environ.get(REQUIRE_COMPILED_READS) == "1":
            pytest.fail(f"{missing} (required here: {REQUIRE_COMPILED_READS}=1)", pytrace=False)
        pytest.skip(missing)


@pytest.fixture(params=["python", "compiled"])
def read_path(request: pytest.FixtureRequest) -> str:
    """Each read path of a raw body: "python" (``RawBody.take_read``, ``MuxedBody.readable``) and
    "compiled" (``_fastread.Reader``; skipped when not built, see ``compiled_reads``). Records must
    be identical on both."""
    if request.param == "compiled":
        compiled_reads()
    return str(request.param)


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """``start_server("--max-num-seqs", "1", ...)`` starts a server; all are stopped at teardown."""
    started: list[ChildService] = []

    def start(*args: str) -> ChildService:
        server = TargetServerProcess.start(args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
        assert server.process.returncode is not None


@pytest.fixture(scope="module")
def default_server() -> Iterator[ChildService]:
    """One server with default settings, shared by a module's read-only tests."""
    server = TargetServerProcess.start(())
    yield server
    server.stop()


@pytest.fixture
def client(default_server: ChildService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=default_server.url, timeout=30) as http:
        yield http


def pytest_collection_finish(session: pytest.Session) -> None:
    """With SSE_SOAK_TIER_LISTING=FILE, the selected tests and their markers go to FILE as JSON
    (tests/test_tiers.py reads it to check the tiers)."""
    listing = os.environ.get("SSE_SOAK_TIER_LISTING")
    if listing:
        markers = {item.nodeid: sorted({mark.name for mark in item.iter_markers()}) for item in session.items}
        Path(listing).write_text(json.dumps(markers))


_RUNNING: list[pytest.Item] = []
"""The test being run, noted before any of its fixtures is set up (``require`` reads it)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _RUNNING[:] = [item]


def require(tier: str, missing: str | None, variable: str) -> None:
    """What a test needs beyond the install (``missing``: what it lacks, or None) is there: else
    a skip naming it, or a failure when ``variable`` is 1 (CI installs every tool and sets them all).
    Such a test must be of the tool's heavy ``tier``, checked here: a bare ``python -m pytest`` (the
    install tier) never skips for a missing tool, it has none to miss."""
    item = _RUNNING[0] if _RUNNING else None
    if item is not None and item.get_closest_marker(tier) is None:
        pytest.fail(f"{item.nodeid} needs what the {tier} tier has: mark it pytest.mark.{tier}", pytrace=False)
    if missing is None:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{missing} (required here: {variable}=1)", pytrace=False)
    pytest.skip(missing)


def require_nginx() -> None:
    """nginx on PATH (``require``; SSE_SOAK_REQUIRE_NGINX=1 makes its absence a failure)."""
    require_proxy("nginx")


REQUIRE_PROXY_ENV = {"nginx": "SSE_SOAK_REQUIRE_NGINX"}
"""The variable that makes a real proxy's tests fail rather than skip without it; the others'
(HAProxy, Caddy, Apache, Squid) is SSE_SOAK_REQUIRE_PROXIES. CI installs them all and sets both."""


def require_proxy(kind: str) -> None:
    """The real proxy ``kind`` (``loadtests.services.proxies``) on PATH, for a test of the ``proxies`` tier."""
    proxy = real_proxies()[kind]
    absent = shutil.which(proxy.binary) is None
    missing = f"{proxy.binary} is not installed (Debian: apt-get install {proxy.package})" if absent else None
    require("proxies", missing, REQUIRE_PROXY_ENV.get(kind, "SSE_SOAK_REQUIRE_PROXIES"))


def real_proxy_params(*kinds: str) -> list[Any]:
    """``kinds`` as parameters, the real proxies among them marked of the ``proxies`` tier (the
    embedded one is the package's own and runs in the install tier)."""
    return [pytest.param(kind, marks=pytest.mark.proxies if kind in real_proxies() else ()) for kind in kinds]


def require_chromium() -> None:
    """Debian's chromium and its chromedriver (``tests.browser``), for a test of the ``webui`` tier."""
    absent = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
    missing = (
        f"{', '.join(absent)} not installed (Debian: apt-get install chromium chromium-driver)" if absent else None
    )
    require("webui", missing, "SSE_SOAK_REQUIRE_CHROMIUM")


def require_litellm() -> None:
    """A complete LiteLLM install (``python -m loadtests litellm setup``), for the ``litellm`` tier."""
    available, reason = litellm_available()
    require("litellm", None if available else reason, "SSE_SOAK_REQUIRE_LITELLM")


VLLM_KEY = "sse-soak-test-key"
VLLM_AUTH = {"Authorization": f"Bearer {VLLM_KEY}"}
VLLM_KEEP_ALIVE = 1
"""The shared real vLLM's keep-alive interval, in whole seconds (vLLM takes no fraction)."""


def require_vllm(release: str = real.DEFAULT_RELEASE) -> real.Install:
    """The complete real-vLLM install of ``release`` (``python -m loadtests vllm setup [--release
    R]``), for the ``vllm`` tier."""
    available, reason = real.vllm_available(release=release)
    require("vllm", None if available else f"real vLLM: {reason}", "SSE_SOAK_REQUIRE_VLLM")
    return real.Install(real.vllm_home(release), release)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[real.VllmServer]:
    """The session's one real vLLM (its start takes 30 to 60 s): one slot (so a second stream
    queues), ``max_model_len`` 8192, keep-alive every ``VLLM_KEEP_ALIVE`` s and the API key
    ``VLLM_KEY``; stopped at the end of the session, its whole process group gone."""
    require_vllm()
    with real.VllmServer(max_num_seqs=1, keep_alive_interval=VLLM_KEEP_ALIVE, api_key=VLLM_KEY) as server:
        group = server.pid
        assert len(live_members(group)) >= 3  # the watchdog, vLLM's API server, its engine
        yield server
    assert live_members(group) == []


def live_members(group: int) -> list[psutil.Process]:
    """The processes of process group ``group`` that have not ended (zombies have)."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):  # gone meanwhile
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
    return members
