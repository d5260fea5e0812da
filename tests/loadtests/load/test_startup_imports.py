"""What a Locust process imports before its test starts: only what its locustfile uses.

The openai SDK (with pydantic) and FastAPI cost about 0.5 and 0.25 s of CPU at every start; a
run of raw users that starts no server of its own needs neither. httpx's command-line client
(rich, pygments: about 50 ms) no run needs. A locustfile that defines an
``OpenAISDKUser`` must have the SDK loaded while it loads, never by the first user mid-run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

LOADED = "print(sorted(name for name in ('openai', 'pydantic', 'fastapi', 'rich', 'pygments') if name in sys.modules))"


def _loaded_after(code: str) -> str:
    script = f"import sys, locust\n{code}\n{LOADED}"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_a_raw_users_locustfile_loads_neither_the_sdk_nor_fastapi() -> None:
    code = (
        "from loadtests import RequestMix, RequestSpec, Scenario, SSEUser\n"
        "class RawUser(SSEUser):\n"
        "    mix = RequestMix([RequestSpec('short', 'chat', 16, max_tokens=4)])\n"
        "import loadtests.services.stack, loadtests.run.judging"
    )
    assert _loaded_after(code) == "[]"


def test_a_locustfile_with_an_sdk_user_loads_the_sdk_as_it_loads() -> None:
    code = (
        "from loadtests import OpenAISDKUser, RequestMix, RequestSpec\n"
        "class SDKUser(OpenAISDKUser):\n"
        "    mix = RequestMix([RequestSpec('short', 'chat', 16, max_tokens=4)])"
    )
    assert _loaded_after(code) == "['openai', 'pydantic']"
