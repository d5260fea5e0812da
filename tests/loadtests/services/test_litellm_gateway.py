"""LiteLLM as a gateway: its config, its install check, and its timeouts told from the server's
errors by their message (the bodies are LiteLLM 1.108.7's, as measured in front of the bundled server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests.base.ports import free_loopback_port
from loadtests.client.outcome import RequestPlan, StreamTracker
from loadtests.errors import LiteLLMError, ServerStartError
from loadtests.services.proxies.litellm import (
    NO_KEY,
    UPSTREAM_KEY_ENV,
    ensure_installed,
    gateway_config,
    litellm_available,
    upstream_models,
)
from loadtests.services.proxies.real import Upstream

pytestmark = pytest.mark.fast

LITELLM_408 = "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out."
LITELLM_500 = (
    "litellm.APIConnectionError: APIConnectionError: Hosted_vllmException - Timeout on reading data from socket"
    "\n\nLiteLLM: model group 'sse-soak/tiny-sim' failed with the error above. No fallback was attempted."
)


def test_the_config_routes_every_model_to_the_upstream_with_the_read_timeout_and_no_key_in_it() -> None:
    text = gateway_config(Upstream("127.0.0.1", 8000), ["a/b", "c"], 2.5)
    config = json.loads(text)  # JSON, which LiteLLM's YAML reader takes
    entries = config["model_list"]
    assert [entry["model_name"] for entry in entries] == ["a/b", "c"]
    for entry in entries:
        params = entry["litellm_params"]
        assert params["model"] == f"hosted_vllm/{entry['model_name']}"
        assert params["api_base"] == "http://127.0.0.1:8000/v1"
        assert (params["timeout"], params["stream_timeout"], params["max_retries"]) == (2.5, 2.5, 0)
        assert params["api_key"] == f"os.environ/{UPSTREAM_KEY_ENV}"  # the key itself never in a file
    assert config["litellm_settings"]["num_retries"] == config["router_settings"]["num_retries"] == 0
    assert NO_KEY not in text


def test_an_upstream_that_lists_no_models_is_one_line() -> None:
    port = free_loopback_port()  # nothing listens there
    with pytest.raises(ServerStartError, match=rf"^--proxy litellm: http://127.0.0.1:{port}/v1/models did not list"):
        upstream_models(f"http://127.0.0.1:{port}", None, timeout=2)


def test_no_install_says_how_to_make_one(tmp_path: Path) -> None:
    available, reason = litellm_available(tmp_path)
    assert not available and reason.endswith("run 'python -m loadtests litellm setup'")


def answered(status: int, message: str, code: str) -> str:
    stream = StreamTracker(RequestPlan("r", "chat:x", "chat", expected="ok"), 0.0)
    stream.headers(status, 2.2, "application/json")
    stream.error_body(json.dumps({"error": {"message": message, "type": None, "param": None, "code": code}}))
    return stream.finish(2.2).outcome


@pytest.mark.parametrize(
    ("status", "message", "outcome"),
    [
        (408, LITELLM_408, "gateway_timeout"),
        (500, LITELLM_500, "gateway_timeout"),  # LiteLLM's timeout on the chat route
        (500, "litellm.InternalServerError: upstream said: the engine crashed", "http_5xx"),
        (500, "Request timed out in the engine", "http_5xx"),  # a server's own 500 that mentions a timeout
        (503, "LiteLLM: Timeout on reading data from socket", "http_5xx"),  # not the gateway's prefix
    ],
)
def test_a_5xx_is_a_gateway_timeout_only_when_its_message_is_litellms_timeout(
    status: int, message: str, outcome: str
) -> None:
    assert answered(status, message, str(status)) == outcome


def test_litellms_timeout_in_band_is_a_gateway_timeout_whatever_its_code() -> None:
    stream = StreamTracker(RequestPlan("r", "chat:x", "chat", expected="ok"), 0.0)
    stream.headers(200, 0.1, "text/event-stream")
    stream.payload({"error": {"message": LITELLM_500, "code": "500"}}, 2.3)
    assert stream.finish(2.3).outcome == "gateway_timeout"


def test_a_home_that_holds_something_else_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(LiteLLMError, match=rf"^{tmp_path} exists and is no virtual environment: remove it, or set "):
        ensure_installed(tmp_path, say=lambda _line: None)
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]
