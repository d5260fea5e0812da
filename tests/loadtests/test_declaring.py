"""Declaring a scenario: users that are their mix, installation by declaring, queries checked at
declaration. Each check runs in a child Python: importing Locust patches the process for gevent."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.loadtests.locust_run import ROOT


def run_python(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` with this checkout's ``loadtests`` first on the path."""
    command = [sys.executable, "-c", textwrap.dedent(code), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, cwd=cwd, env=env, stdin=subprocess.DEVNULL
    )


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
