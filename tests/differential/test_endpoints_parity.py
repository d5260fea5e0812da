"""The routes beside generation: the same requests to real vLLM and to the bundled server.

``/v1/models``, ``/health``, ``/version``, ``/tokenize``, ``/detokenize``, ``/metrics`` (the
families the harness scrapes), the API key's rules and the CORS headers. Token ids and counts
differ between the two tokenizers; the rules that relate them must not.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadtests.record.server_metrics import CONCEPTS
from tests.differential.parity import MODEL, Answer, Pair, Server

pytestmark = pytest.mark.vllm  # every test here compares real vLLM with the bundled server

PROMPT = "hello world, said the load test"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]


def header_names(answer: Answer) -> set[str]:
    return set(answer.headers) - {"date"}


def test_models_lists_one_card_of_vllms_shape(pair: Pair) -> None:
    vllm, bundled = pair.both("GET", "/v1/models")
    assert vllm.status == bundled.status == 200
    assert set(bundled.json) == set(vllm.json) == {"object", "data"}
    assert bundled.json["object"] == vllm.json["object"] == "list"
    (vllm_card,), (bundled_card,) = vllm.json["data"], bundled.json["data"]
    assert set(bundled_card) == set(vllm_card)
    for name in ("id", "object", "owned_by", "parent", "max_model_len"):
        assert bundled_card[name] == vllm_card[name], name
    assert isinstance(bundled_card["root"], str) and bundled_card["root"]
    assert isinstance(bundled_card["created"], int)
    (vllm_permission,), (bundled_permission,) = vllm_card["permission"], bundled_card["permission"]
    assert set(bundled_permission) == set(vllm_permission)
    for name, value in vllm_permission.items():
        if name not in ("id", "created"):
            assert bundled_permission[name] == value, name
    assert bundled_permission["id"].startswith("modelperm-") and vllm_permission["id"].startswith("modelperm-")
    assert header_names(bundled) == header_names(vllm)


@pytest.mark.parametrize("path", ["/health", "/version"])
def test_health_and_version_answer_alike(pair: Pair, path: str) -> None:
    vllm, bundled = pair.both("GET", path, key=False)
    assert vllm.status == bundled.status == 200
    assert header_names(bundled) == header_names(vllm)
    assert bundled.headers.get("content-type") == vllm.headers.get("content-type")
    if path == "/health":
        assert vllm.body == bundled.body == b""
    else:
        assert set(bundled.json) == set(vllm.json) == {"version"}
        assert bundled.json == vllm.json  # the vLLM version whose behaviour the bundled server matches


def tokenize(server: Server, **body: Any) -> dict[str, Any]:
    answer = server.ask("POST", "/tokenize", json={"model": MODEL, **body})
    assert answer.status == 200, (server.name, answer.body)
    result: dict[str, Any] = answer.json
    return result


@pytest.mark.parametrize("source", ["prompt", "messages"])
def test_tokenize_answers_count_tokens_and_no_strings_by_default(pair: Pair, source: str) -> None:
    body: dict[str, Any] = {"prompt": PROMPT} if source == "prompt" else {"messages": MESSAGES}
    vllm, bundled = pair.both("POST", "/tokenize", json={"model": MODEL, **body})
    assert vllm.status == bundled.status == 200
    assert list(bundled.json) == list(vllm.json) == ["count", "max_model_len", "tokens", "token_strs"]
    for answer in (vllm, bundled):
        assert answer.json["count"] == len(answer.json["tokens"]) > 0
        assert answer.json["max_model_len"] == 8192
        assert answer.json["token_strs"] is None
    assert header_names(bundled) == header_names(vllm)


@pytest.mark.parametrize("source", ["prompt", "messages"])
def test_tokenize_returns_token_strings_when_asked(pair: Pair, source: str) -> None:
    body: dict[str, Any] = {"prompt": PROMPT} if source == "prompt" else {"messages": MESSAGES}
    for server in (pair.vllm, pair.bundled):
        plain = tokenize(server, **body)
        answer = tokenize(server, **body, return_token_strs=True)
        assert answer["tokens"] == plain["tokens"]
        strings = answer["token_strs"]
        assert isinstance(strings, list) and len(strings) == answer["count"], server.name
        assert all(isinstance(text, str) and text for text in strings), server.name


def test_tokenize_honours_add_generation_prompt(pair: Pair) -> None:
    """Chat messages tokenize with the assistant's turn marker unless told not to: fewer tokens,
    the same leading ones."""
    for server in (pair.vllm, pair.bundled):
        with_prompt = tokenize(server, messages=MESSAGES)
        without = tokenize(server, messages=MESSAGES, add_generation_prompt=False)
        assert without["count"] < with_prompt["count"], server.name
        assert with_prompt["tokens"][: without["count"]] == without["tokens"], server.name


def test_detokenize_turns_tokens_back_into_the_prompt(pair: Pair) -> None:
    for server in (pair.vllm, pair.bundled):
        ids = tokenize(server, prompt="hello world", add_special_tokens=False)["tokens"]
        answer = server.ask("POST", "/detokenize", json={"model": MODEL, "tokens": ids})
        assert answer.status == 200, (server.name, answer.body)
        assert answer.json == {"prompt": "hello world"}, server.name
        assert answer.headers["content-type"] == "application/json"


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
def test_tokenize_and_detokenize_refuse_an_unknown_model_alike(pair: Pair, path: str) -> None:
    body = {"model": "no-such-model", "prompt": PROMPT} if path == "/tokenize" else {"model": "x", "tokens": [5]}
    vllm, bundled = pair.both("POST", path, json=body)
    assert vllm.status == bundled.status == 404
    assert vllm.error is not None and bundled.error is not None
    assert (bundled.error["type"], bundled.error["param"]) == (vllm.error["type"], vllm.error["param"])


def families(answer: Answer) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(answer.body.decode())}


def scraped_names() -> list[str]:
    """The sample names the harness reads (``loadtests.record.server_metrics.CONCEPTS``), the ones vLLM
    0.32 has (``vllm:gpu_cache_usage_perc`` is the name before 0.9)."""
    return [names[0] for names in CONCEPTS.values()]


def test_metrics_have_the_scraped_families_with_vllms_labels(pair: Pair) -> None:
    vllm, bundled = pair.both("GET", "/metrics", key=False)
    assert vllm.status == bundled.status == 200
    assert bundled.headers["content-type"] == vllm.headers["content-type"]
    assert header_names(bundled) == header_names(vllm)
    for answer in (vllm, bundled):
        samples = {sample.name: sample for family in families(answer).values() for sample in family.samples}
        for name in scraped_names():
            assert name in samples, name
            assert set(samples[name].labels) == {"engine", "model_name"}, name
            assert samples[name].labels["model_name"] == pair.vllm.model
    vllm_types = {name: family.type for name, family in families(vllm).items()}
    bundled_types = {name: family.type for name, family in families(bundled).items()}
    for name in scraped_names():
        family = name.removesuffix("_total")
        assert bundled_types[family] == vllm_types[family], name


def metric(server: Server, name: str) -> float:
    answer = server.ask("GET", "/metrics", key=False)
    return sum(sample.value for family in families(answer).values() for sample in family.samples if sample.name == name)


@pytest.mark.parametrize("n", [1, 2])
def test_token_counters_count_each_choices_prefill_and_every_generated_token(pair: Pair, n: int) -> None:
    for server in (pair.vllm, pair.bundled):
        before = metric(server, "vllm:prompt_tokens_total"), metric(server, "vllm:generation_tokens_total")
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True, "n": n}
        answer = server.ask("POST", "/v1/completions", json=body)
        assert answer.status == 200
        after = metric(server, "vllm:prompt_tokens_total"), metric(server, "vllm:generation_tokens_total")
        assert after[0] - before[0] == n * answer.json["usage"]["prompt_tokens"], server.name
        assert after[1] - before[1] == 5 * n == answer.json["usage"]["completion_tokens"], server.name


def test_http_requests_are_counted_by_handler_method_and_status_class(pair: Pair) -> None:
    for server in (pair.vllm, pair.bundled):
        server.ask("GET", "/v1/models")
        server.ask("GET", "/no/such/path")
        answer = server.ask("GET", "/metrics", key=False)
        samples = [s for s in families(answer)["http_requests"].samples if s.name == "http_requests_total"]
        labels = [s.labels for s in samples]
        assert {"handler": "/v1/models", "method": "GET", "status": "2xx"} in labels, server.name
        assert {"handler": "none", "method": "GET", "status": "4xx"} in labels, server.name
        assert all(set(label) == {"handler", "method", "status"} for label in labels), server.name
        assert not any(label["handler"] in ("/metrics", "/health", "/version") for label in labels), server.name


GUARDED = [("GET", "/v1/models"), ("POST", "/v1/completions"), ("GET", "/v1/no-such-path"), ("GET", "/v2/x")]
GUARDED += [("GET", "/inference/x"), ("GET", "/cohere/x")]
OPEN = [("GET", "/health"), ("GET", "/metrics"), ("GET", "/version"), ("POST", "/tokenize"), ("POST", "/detokenize")]


@pytest.mark.parametrize(("method", "path"), GUARDED)
def test_the_api_key_guards_these_prefixes_known_path_or_not(pair: Pair, method: str, path: str) -> None:
    vllm, bundled = pair.both(method, path, key=False)
    assert vllm.status == bundled.status == 401
    assert vllm.json == bundled.json == {"error": "Unauthorized"}
    assert header_names(bundled) == header_names(vllm)


@pytest.mark.parametrize(("method", "path"), OPEN)
def test_these_paths_are_open_without_the_key(pair: Pair, method: str, path: str) -> None:
    body = {"prompt": PROMPT} if path == "/tokenize" else {"tokens": [5, 6]} if path == "/detokenize" else None
    vllm, bundled = pair.both(method, path, key=False, json=body)
    assert vllm.status == bundled.status == 200


@pytest.mark.parametrize(
    ("authorization", "status"),
    [("bearer {key}", 200), ("BEARER {key}", 200), ("Bearer wrong", 401), ("Bearer", 401), ("Basic {key}", 401)],
)
def test_the_authorization_header_is_read_alike(pair: Pair, authorization: str, status: int) -> None:
    value = authorization.format(key=pair.vllm.key)
    vllm, bundled = pair.both("GET", "/v1/models", key=False, headers={"Authorization": value})
    assert vllm.status == bundled.status == status


@pytest.mark.parametrize(("first", "second", "status"), [("{key}", "wrong", 200), ("wrong", "{key}", 401)])
def test_of_two_authorization_headers_the_first_is_read(pair: Pair, first: str, second: str, status: int) -> None:
    headers = [("Authorization", "Bearer " + token.format(key=pair.vllm.key)) for token in (first, second)]
    vllm, bundled = pair.both("GET", "/v1/models", key=False, headers=headers)
    assert vllm.status == bundled.status == status


def test_cors_headers_are_alike(pair: Pair) -> None:
    """vLLM's CORS settings by default: any method and header, no origin allowed; every answer
    varies by Origin, and a preflight from an origin is refused."""
    vllm, bundled = pair.both("GET", "/v1/models", headers={"Origin": "http://example.com"})
    assert vllm.status == bundled.status == 200
    assert {k: v for k, v in bundled.headers.items() if k.startswith(("access-control", "vary"))} == {
        k: v for k, v in vllm.headers.items() if k.startswith(("access-control", "vary"))
    }
    preflight = {"Origin": "http://example.com", "Access-Control-Request-Method": "POST"}
    vllm, bundled = pair.both("OPTIONS", "/v1/completions", key=False, headers=preflight)
    assert vllm.status == bundled.status
    assert vllm.body == bundled.body
    assert {k: v for k, v in bundled.headers.items() if k != "date"} == {
        k: v for k, v in vllm.headers.items() if k != "date"
    }
