"""``--slowdown-after``/``--slowdown-factor``: the engine's pace changes once, at the time asked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from target_server.config import ServerConfig
from target_server.engine import Engine, Generation

pytestmark = pytest.mark.fast


async def first_token(engine: Engine, job: Generation) -> str:
    async for token in engine.generate(job):
        return token
    raise AssertionError("no token")


def test_the_engine_slows_down_by_the_factor_once_the_time_has_come() -> None:
    timing: dict[str, Any] = {"time_to_first_token": 100, "prefill_time_per_token": 1, "slowdown_factor": 3}
    not_yet = Engine(ServerConfig(**timing, slowdown_after=3600))
    assert not_yet.pace() == 1.0 and not_yet.prefill_seconds(100) == pytest.approx(0.2)
    slowed = Engine(ServerConfig(**timing, slowdown_after=0))
    assert slowed.pace() == 1.0  # its clock starts at the first request
    job = Generation(prompt_tokens=100, max_tokens=1)
    assert asyncio.run(first_token(slowed, job)) and slowed.pace() == 3.0
    assert slowed.prefill_seconds(100) == pytest.approx(0.6)
    assert Engine(ServerConfig(**timing)).pace() == 1.0  # no time given: never


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"slowdown_after": -1.0}, "--slowdown-after must be a finite number of seconds >= 0, got -1.0"),
        ({"slowdown_factor": 0.0}, "--slowdown-factor must be a finite number > 0, got 0.0"),
        ({"slowdown_factor": float("inf")}, "--slowdown-factor must be a finite number > 0, got inf"),
    ],
)
def test_bad_slowdowns_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("+", r"\+")):
        ServerConfig(**settings)
