"""The differential suite's pair: the session's real vLLM and a bundled server started with the
same settings (model name, ``max_model_len`` 8192, one slot, keep-alive 1 s, API key)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadtests.services import real_vllm as real
from loadtests.services.stack import ChildService, TargetServerProcess
from tests.conftest import VLLM_KEEP_ALIVE, VLLM_KEY
from tests.differential.parity import Pair, Server

VLLM_DECODE_MS = 1.6
"""Real vLLM's pace here, ms a token (``real-vllm.md``): the twin streams a long answer as long."""


@pytest.fixture(scope="session")
def bundled_twin(vllm_server: real.VllmServer) -> Iterator[ChildService]:
    """The bundled server with real vLLM's settings and pace (started only when vLLM is there to compare with)."""
    args = (
        "--model", vllm_server.model,
        "--max-model-len", str(vllm_server.max_model_len),
        "--max-num-seqs", str(vllm_server.max_num_seqs),
        "--sse-keep-alive-interval", str(VLLM_KEEP_ALIVE),
        "--api-key", VLLM_KEY,
        "--inter-token-latency", str(VLLM_DECODE_MS),
    )  # fmt: skip
    server = TargetServerProcess.start(args)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pair(vllm_server: real.VllmServer, bundled_twin: ChildService) -> Pair:
    return Pair(
        Server("vllm", vllm_server.url, vllm_server.model, VLLM_KEY),
        Server("bundled", bundled_twin.url, vllm_server.model, VLLM_KEY),
    )
