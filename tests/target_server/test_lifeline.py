"""``sse_soak_lifeline``: the refusal line a harness reads back, and who is told it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sse_soak_lifeline import ENV_VAR, harness_environment, parse_refusal, refusal_line


def test_a_refusal_line_is_one_line_that_parses_back_to_its_reason() -> None:
    line = refusal_line("cannot listen on 127.0.0.1:80:\n  Permission denied")
    assert "\n" not in line
    assert parse_refusal(line + "\n") == "cannot listen on 127.0.0.1:80: Permission denied"


@pytest.mark.parametrize("line", ["", "\n", "target_server ready: http://127.0.0.1:8000 (model m)\n", "failed: x\n"])
def test_any_other_line_is_no_refusal(line: str) -> None:
    assert parse_refusal(line) is None


@pytest.mark.parametrize(("launched", "printed"), [(True, "target_server failed: port taken\n"), (False, "")])
def test_the_refusal_line_is_printed_only_for_a_harness(launched: bool, printed: str) -> None:
    env = {name: value for name, value in os.environ.items() if name != ENV_VAR}
    if launched:
        env.update(harness_environment())
    script = "from sse_soak_lifeline import announce_refusal; announce_refusal('port   taken')"
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, printed), result.stderr
