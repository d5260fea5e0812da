"""With ``--api-server-count 2``, whichever process answers ``/metrics`` answers for the whole
server, on real vLLM and on the bundled server alike: the token counters and
``http_requests_total`` are the sums over both processes on every scrape, and there are no
process families. (vLLM has one engine behind its API servers, so one ``engine`` label set; each
bundled process is a scheduler of its own, with its own: a documented difference, not checked.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from loadtests.services import real_vllm as real
from loadtests.services.stack import TargetServerProcess
from tests.conftest import require_vllm
from tests.server_gauges import scrape

REQUESTS = 6
SCRAPES = 6
COMPLETIONS = 'handler="/v1/completions",method="POST",status="2xx"'


@pytest.fixture(scope="module")
def two_process_servers() -> Iterator[dict[str, str]]:
    """Real vLLM and the bundled server, each with two API server processes: their URLs by name."""
    require_vllm()
    with real.VllmServer(max_num_seqs=2, api_server_count=2) as vllm:
        bundled = TargetServerProcess.start(["--model", vllm.model, "--api-server-count", "2", "--max-num-seqs", "2"])
        try:
            yield {"vllm": vllm.url, "bundled": bundled.url}
        finally:
            bundled.stop()


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["vllm", "bundled"])
def test_any_process_answers_for_the_whole_server(two_process_servers: dict[str, str], name: str) -> None:
    url = two_process_servers[name]
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    before = scrape(url)
    generated = prompted = 0
    for index in range(REQUESTS):  # each on a connection of its own: the kernel spreads them
        body = {"model": model, "prompt": f"hello {index}", "max_tokens": 5}
        answer = httpx.post(url + "/v1/completions", json=body, timeout=60, headers={"Connection": "close"})
        assert answer.status_code == 200, answer.text
        generated += answer.json()["usage"]["completion_tokens"]
        prompted += answer.json()["usage"]["prompt_tokens"]
    time.sleep(0.5)  # the bundled processes publish every 0.1 s

    def total(seen: dict[str, dict[str, float]], sample: str) -> float:
        return sum(seen.get(sample, {}).values())

    for _ in range(SCRAPES):
        seen = scrape(url)
        assert total(seen, "vllm:generation_tokens_total") - total(before, "vllm:generation_tokens_total") == generated
        assert total(seen, "vllm:prompt_tokens_total") - total(before, "vllm:prompt_tokens_total") == prompted
        answered = seen["http_requests_total"][COMPLETIONS] - before.get("http_requests_total", {}).get(COMPLETIONS, 0)
        assert answered == REQUESTS
        assert not [sample for sample in seen if sample.startswith(("process_", "python_"))]
