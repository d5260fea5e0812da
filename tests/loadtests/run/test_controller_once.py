"""The run controller's once-only choices: importing registers nothing with Locust (declaring does,
once per process); a process picks its role once; a test's settings are computed once, at its
start, and kept on the run's state. Each check runs in a child Python: importing Locust patches the
process for gevent."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.loadtests.locust_run import run_in_checkout
from tests.loadtests.locust_run import run_python as python_in_checkout

pytestmark = pytest.mark.extended


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return run_in_checkout(*command, timeout=120)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return python_in_checkout(code, timeout=120)


def test_importing_loadtests_registers_no_listener_and_declaring_installs_the_controller_once() -> None:
    result = run_python("""
        from locust import events

        def handlers():
            return len(events.init._handlers), len(events.init_command_line_parser._handlers)

        before = handlers()
        import loadtests
        from loadtests import OpenAISDKUser, RequestMix, RequestSpec, Scenario, SSEUser
        import loadtests.run.controller
        print("imported:", handlers() == before)
        Scenario(name="first")
        declared = handlers()
        print("declared:", declared[0] - before[0], declared[1] - before[1])
        Scenario(name="second")

        class User(SSEUser):
            mix = RequestMix([RequestSpec("x", "completions", 8)])

        print("again:", handlers() == declared)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["imported: True", "declared: 1 1", "again: True"]


def test_a_scenario_declared_where_locust_does_not_run_imports_no_locust() -> None:
    result = run_python("""
        import sys
        from loadtests import RunSettings, Scenario
        Scenario(name="plain", server_args="--max-num-seqs 2")
        print("locust" in sys.modules, "loadtests.run.controller" in sys.modules)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False False"]


def test_each_runner_has_its_role_and_only_a_worker_does_not_lead() -> None:
    result = run_python("""
        from argparse import Namespace
        from locust.env import Environment
        from locust.event import Events
        from loadtests.base.ports import free_loopback_port
        from loadtests.run.roles import ARRIVAL_PROCESSES, ARRIVAL_START, role_of

        options = Namespace(rate=4.0, arrival="constant", arrival_seed=0, max_in_flight=None)
        local = role_of(Environment(events=Events()).create_local_runner())
        schedule = local.arrivals(options)
        print(type(local).__name__, local.leads, local.workers(), schedule is not None)
        port = free_loopback_port()
        master_runner = Environment(events=Events()).create_master_runner("127.0.0.1", port)
        master = role_of(master_runner)
        print(type(master).__name__, master.leads, master.probes_prompt_sizing, master.arrivals(options))
        print(getattr(options, ARRIVAL_PROCESSES), getattr(options, ARRIVAL_START) > 0)
        worker_runner = Environment(events=Events()).create_worker_runner("127.0.0.1", port)
        worker = role_of(worker_runner)
        print(type(worker).__name__, worker.leads, worker.arrivals(options) is not None)
        print(type(role_of(None)).__name__)
        worker_runner.quit()
        master_runner.quit()
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Local True 0 True",
        "Master True True None",
        "1 True",
        "Worker False True",
        "Local",
    ]


COUNTED = """
    import atexit

    from loadtests import RequestMix, RequestSpec, Scenario, SSEUser
    from loadtests.run import controller

    calls = {"role_of": 0, "run_settings": 0}


    def counted(name):
        real = getattr(controller, name)

        def counting(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        setattr(controller, name, counting)


    counted("role_of")
    counted("run_settings")
    atexit.register(lambda: print("calls:", calls["role_of"], calls["run_settings"], flush=True))

    scenario = Scenario(name="counted")


    class User(SSEUser):
        mix = RequestMix([RequestSpec("x", "completions", 8)])
"""


def test_a_headless_run_picks_its_role_once_and_computes_its_settings_once_at_init_and_once_at_the_test_start(
    tmp_path: Path,
) -> None:
    locustfile = tmp_path / "counted.py"
    locustfile.write_text(textwrap.dedent(COUNTED))
    command = [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", "1", "-t", "2s"]
    result = run(*command, "--report-dir", str(tmp_path / "reports"), "--only-summary")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "calls: 1 2" in result.stdout.splitlines(), result.stdout[-3000:]


def test_the_locustfiles_are_found_by_the_names_locust_gives_them_and_by_path_otherwise(tmp_path: Path) -> None:
    """``-f a.py,locust.py``: Locust names them ``a`` and ``locustfile``; a helper they import is not
    one; a file of ``-f`` imported under a name of its own is still found, by its path."""
    for name in ("a", "locust", "helper", "other"):
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    result = run_python(f"""
        import importlib.util, sys
        from pathlib import Path
        from locust.util.load_locustfile import load_locustfile
        from loadtests.run.controller import _locustfile_modules

        folder = Path({str(tmp_path)!r})
        for name in ("a", "locust", "helper"):
            load_locustfile(str(folder / f"{{name}}.py"))
        sys.argv = ["locust", "-f", f"{{folder / 'a.py'}},{{folder / 'locust.py'}}"]
        print(sorted(module.__name__ for module in _locustfile_modules() if module.__name__ != "__main__"))
        spec = importlib.util.spec_from_file_location("renamed", folder / "other.py")
        sys.modules["renamed"] = importlib.util.module_from_spec(spec)
        sys.argv = ["locust", "-f", str(folder / "other.py")]
        print(sorted(module.__name__ for module in _locustfile_modules() if module.__name__ != "__main__"))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["['a', 'locustfile']", "['renamed']"]
