"""Declaring a scenario: users that are their mix, installation by declaring, queries checked at
declaration. Each check runs in a child Python: importing Locust patches the process for gevent."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.loadtests.locust_run import ROOT, run_in_checkout
from tests.loadtests.locust_run import run_python as python_in_checkout

pytestmark = pytest.mark.extended


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return run_in_checkout(*command, timeout=60)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return python_in_checkout(code, timeout=60)


def run_locustfile(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``locust -f <text as a file> --headless -t 2s args``."""
    locustfile = tmp_path / "locustfile_under_test.py"
    locustfile.write_text(textwrap.dedent(text))
    return run(sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-t", "2s", *args)


def test_a_user_class_is_its_mix_and_its_own_tasks_replace_the_default() -> None:
    result = run_python("""
        from locust import task
        from loadtests import OpenAISDKUser, RequestMix, RequestSpec, SSEUser

        MIX = RequestMix([RequestSpec("x", "completions", 8)])

        class Plain(SSEUser):
            mix = MIX

        class Own(SSEUser):
            mix = MIX

            @task
            def mine(self) -> None: ...

        class Heir(Own):
            pass

        class Sdk(OpenAISDKUser):
            mix = MIX

        for user in (SSEUser, OpenAISDKUser, Plain, Own, Heir, Sdk):
            print(user.__name__, user.abstract, [t.__name__ for t in user.tasks])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "SSEUser True ['_send_next']",
        "OpenAISDKUser True ['_send_next']",
        "Plain False ['_send_next']",
        "Own False ['mine']",
        "Heir False ['mine']",
        "Sdk False ['_send_next']",
    ]


def test_a_misspelt_column_in_an_expect_stops_locust_at_declaration_in_one_line(tmp_path: Path) -> None:
    result = run_locustfile(
        tmp_path,
        """
        from loadtests import Expect, RequestMix, RequestSpec, Scenario, SSEUser

        typo = Expect("truncated", where="truncate_tokens == 1", require="outcome == 'ok'")
        scenario = Scenario(name="typo", gates=[typo])

        class User(SSEUser):
            mix = RequestMix([RequestSpec("x", "completions", 8)])
    """,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "sse-soak: scenario typo: gate truncated: where names truncate_tokens, which is no column of the request "
        "table (did you mean truncate_prompt_tokens?): truncate_tokens == 1"
    ]
    assert list(tmp_path.iterdir()) == [tmp_path / "locustfile_under_test.py"]  # no run directory


def test_users_with_no_scenario_declared_are_refused_in_one_line(tmp_path: Path) -> None:
    result = run_locustfile(
        tmp_path,
        """
        from loadtests import RequestMix, RequestSpec, SSEUser

        class Forgotten(SSEUser):
            mix = RequestMix([RequestSpec("x", "completions", 8)])
    """,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "sse-soak: Forgotten run in no scenario: declare one in the locustfile, e.g. scenario = "
        'Scenario(name="my_scenario") (declaring it installs it)'
    )


def test_the_run_scenario_is_the_locustfiles_own_when_it_imports_others() -> None:
    """scenarios/soak.py imports mixed_truncate, slow_prefill and proxy_timeout (declaring theirs)."""
    result = run(sys.executable, "scenarios/soak.py", "--help")
    assert result.returncode == 0, result.stderr
    assert "Options of the sse-soak scenario 'soak'." in result.stdout
    assert result.stdout.count("Options of the sse-soak scenario") == 1


def test_two_scenarios_in_one_locustfile_are_refused_in_one_line(tmp_path: Path) -> None:
    result = run_locustfile(
        tmp_path,
        """
        from loadtests import Scenario

        first, second = Scenario(name="first"), Scenario(name="second")
    """,
    )
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert last.startswith("sse-soak: 2 scenarios in the locustfile(s) given: first (")
    assert last.endswith("a run runs exactly one Scenario: give one locustfile that declares one")


def test_two_locustfiles_each_with_a_scenario_are_refused_in_one_line() -> None:
    """``-f a.py,b.py`` loads both as locustfiles: a run still runs one scenario."""
    command = [
        sys.executable, "-m", "locust", "-f", "scenarios/mixed_truncate.py,scenarios/slow_prefill.py",
        "--headless", "-u", "1", "-t", "2s",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    last = result.stderr.splitlines()[-1]
    assert last.startswith("sse-soak: 2 scenarios in the locustfile(s) given: ") and "mixed_truncate (" in last
    assert "slow_prefill (" in last and last.endswith("give one locustfile that declares one")


def test_slow_prefills_keepalive_gates_are_unjudgeable_without_the_servers_interval_and_strict_at_zero() -> None:
    """Against --host without --keep-alive-interval they cannot be formed (no false FAIL on fast streams);
    with keep-alive off (0, the negative control) they are the real gates."""
    result = run_python("""
        import sys
        sys.path.insert(0, "scenarios")
        import slow_prefill
        from loadtests import RunSettings
        for interval in (None, 0.0):
            settings = RunSettings("none", 60.0, interval, (), "http://h:1")
            print([type(gate).__name__ for gate in slow_prefill.gates(settings)])
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "['Expect', 'Unjudgeable', 'Unjudgeable']",
        "['Expect', 'Expect', 'Expect']",
    ]
