"""The pair answers alike where they are known to: a plain completion stream's framing."""

from __future__ import annotations

import pytest

from tests.differential.parity import MODEL, Pair

pytestmark = pytest.mark.vllm


def test_a_plain_completion_stream_is_framed_alike(pair: Pair) -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 4, "stream": True}
    vllm, bundled = pair.both("POST", "/v1/completions", json=body)
    assert vllm.status == bundled.status == 200
    assert vllm.events[-1] == bundled.events[-1] == "[DONE]"
    assert len(vllm.events) == len(bundled.events) == 5  # four token chunks, then [DONE]
