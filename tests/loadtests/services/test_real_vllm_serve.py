"""Real vLLM started on this machine's CPU (``python -m loadtests vllm setup`` installs it): one
server for the session (its start takes about a minute), the API key, the tiny model's tokenizer;
and the model directory's determinism (keep-alive while queued: tests/differential, which retries
a queue that vLLM leaves silent on a busy machine). Without an install
these skip, saying why, unless ``SSE_SOAK_REQUIRE_VLLM=1`` (CI sets it): then they fail."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import psutil
import pytest

from loadtests.services import real_vllm as real
from tests.conftest import VLLM_AUTH as AUTH
from tests.conftest import require_vllm

pytestmark = pytest.mark.vllm


def test_the_api_key_guards_v1_but_not_health(vllm_server: real.VllmServer) -> None:
    with httpx.Client(base_url=vllm_server.url, timeout=30) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/health").status_code == 200
        listed = client.get("/v1/models", headers=AUTH).json()
    assert [model["id"] for model in listed["data"]] == ["tiny-llama"]
    assert listed["data"][0]["max_model_len"] == 8192


def test_the_tiny_models_tokenizer_adds_bos_and_its_chat_template_works(vllm_server: real.VllmServer) -> None:
    with httpx.Client(base_url=vllm_server.url, timeout=60, headers=AUTH) as client:
        tokenized = client.post("/tokenize", json={"model": vllm_server.model, "prompt": "Hello there"}).json()
        chat = client.post(
            "/v1/chat/completions",
            json={"model": vllm_server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        )
    assert tokenized["tokens"][0] == 1 and tokenized["count"] == len(tokenized["tokens"]) > 1
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens"] > 1


def test_the_model_directory_is_the_same_bytes_each_time_and_reused(tmp_path: Path) -> None:
    install = require_vllm()
    first = real.make_model_dir(tmp_path / "a", install.python)
    second = real.make_model_dir(tmp_path / "b", install.python)
    files = sorted(path.name for path in first.iterdir())
    assert files == sorted(path.name for path in second.iterdir())
    assert files == [
        "config.json",
        "generation_config.json",
        real.MODEL_STAMP,
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert all((first / name).read_bytes() == (second / name).read_bytes() for name in files)
    assert (first / "config.json").read_bytes() == (install.model_dir / "config.json").read_bytes()
    made = (first / "tokenizer.json").stat().st_mtime_ns
    assert real.make_model_dir(first, Path("/nonexistent/python")) == first  # reused: nothing run
    assert (first / "tokenizer.json").stat().st_mtime_ns == made


def test_vllm_and_every_process_it_started_run_on_the_cpus_left_to_it(vllm_server: real.VllmServer) -> None:
    """On a machine of several CPUs, vLLM (its API server, engine core and worker) keeps off the
    last one, which the load generator keeps: busy-polling on every vCPU froze these VMs."""
    tree = [psutil.Process(vllm_server.pid), *psutil.Process(vllm_server.pid).children(recursive=True)]
    assert len(tree) >= 3, [process.name() for process in tree]  # the watchdog, vLLM, its engine
    if len(os.sched_getaffinity(0)) < 2:
        assert vllm_server.cpus is None and vllm_server.notes() == []
        return
    assert vllm_server.cpus == real.cpus_for_vllm()
    assert {process.name(): process.cpu_affinity() for process in tree} == {
        process.name(): vllm_server.cpus for process in tree
    }
    assert f"runs on CPU {','.join(map(str, vllm_server.cpus or []))} of" in vllm_server.notes()[0]
