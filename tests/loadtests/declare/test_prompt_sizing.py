"""How prompts are sized: exactly with vLLM's ``/tokenize``, else estimated, once, and never raising.

The bundled server (vLLM's shape and its ``--tokenize-api text``) and tiny real HTTP servers with
foreign ``/tokenize`` answers stand in for "any OpenAI-compatible server".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.declare.workload import (
    CHARS_PER_TOKEN,
    RequestMix,
    RequestSpec,
    discover,
    probe_prompt_sizing,
    sized_text,
)
from loadtests.load.state import RunState
from tests.conftest import StartServer
from tests.loadtests.locust_run import run_locust

pytestmark = pytest.mark.extended

MODEL = "foreign/model"
ESTIMATED_LINE = "sse-soak: prompt sizing estimated: "
Answer = tuple[int, str, bytes]
"""Status, content type and body of one ``/tokenize`` answer."""
Tokenize = Callable[[dict[str, Any]], Answer]


def _json(status: int, body: Any) -> Answer:
    return status, "application/json", json.dumps(body).encode()


def _count_words(body: dict[str, Any]) -> Answer:
    """vLLM's shape for prompts, one token per word."""
    return _json(200, {"count": len(body["prompt"].split()), "max_model_len": 8192})


def _prompt_only(body: dict[str, Any]) -> Answer:
    """Counts prompts, refuses chat messages: sizing fails only on the chat route."""
    if "prompt" not in body:
        return _json(
            400,
            {"error": {"message": "prompt: Field required", "type": "BadRequestError", "param": "prompt", "code": 400}},
        )
    return _count_words(body)


class ForeignServer:
    """A tiny HTTP server on a free loopback port: one model in ``/v1/models``, and ``/tokenize``
    answered by ``tokenize`` (or left hanging until ``release`` when it returns None).
    ``tokenize_authorizations`` holds the ``Authorization`` header of each ``/tokenize`` call."""

    def __init__(self, tokenize: Tokenize | None) -> None:
        self.release = threading.Event()
        self.tokenize_calls = 0
        self.tokenize_authorizations: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._answer(_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
                else:
                    self._answer(_json(404, {"detail": "Not Found"}))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/tokenize":
                    self._answer(_json(404, {"detail": "Not Found"}))
                    return
                owner.tokenize_calls += 1
                owner.tokenize_authorizations.append(self.headers.get("Authorization"))
                if tokenize is None:
                    owner.release.wait(30)  # the client gives up first; teardown releases us
                    return
                self._answer(tokenize(body))

            def _answer(self, answer: Answer) -> None:
                status, content_type, payload = answer
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def foreign() -> Iterator[Callable[[Tokenize | None], ForeignServer]]:
    started: list[ForeignServer] = []

    def start(tokenize: Tokenize | None) -> ForeignServer:
        server = ForeignServer(tokenize)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


NO_COUNT = """/tokenize answered 200 without vLLM's integer "count" (got {})"""
FOREIGN_ANSWERS: dict[str, tuple[Tokenize | None, str]] = {
    "404": (
        lambda _: _json(404, {"detail": "Not Found"}),
        """/tokenize answered 404 to vLLM's request body ({"model", "prompt"})""",
    ),
    "405": (
        lambda _: _json(405, {"detail": "Method Not Allowed"}),
        """/tokenize answered 405 to vLLM's request body ({"model", "prompt"})""",
    ),
    "400 for vLLM's body": (
        lambda _: _json(400, {"error": {"message": "text: Field required", "code": 400}}),
        """/tokenize answered 400 to vLLM's request body ({"model", "prompt"})""",
    ),
    "503": (
        lambda _: (503, "text/plain", b"overloaded"),
        """/tokenize answered 503 to vLLM's request body ({"model", "prompt"})""",
    ),
    "tokens without a count": (lambda _: _json(200, {"tokens": [1, 2, 3]}), NO_COUNT.format("keys ['tokens']")),
    "a count that is not an integer": (lambda _: _json(200, {"count": "3"}), NO_COUNT.format("keys ['count']")),
    "a JSON list": (lambda _: _json(200, [1, 2, 3]), NO_COUNT.format("a JSON list")),
    "not JSON": (
        lambda _: (200, "text/html", b"<html>login</html>"),
        "/tokenize answered 200 with a body that is not JSON (text/html)",
    ),
    "a zero count": (lambda _: _json(200, {"count": 0}), "/tokenize counted 0 tokens for 8 words of filler"),
    "no answer": (None, """/tokenize did not answer vLLM's request body ({"model", "prompt"}) within 0.5 s"""),
}


def test_the_bundled_server_sizes_exactly(default_server: Any, client: httpx.Client) -> None:
    assert discover(client).prompt_sizing == "exact"
    assert probe_prompt_sizing(default_server.url) == "exact"
    assert probe_prompt_sizing(default_server.url, model="sse-soak/tiny-sim") == "exact"


def test_the_probe_sends_the_api_key(start_server: StartServer, foreign: Callable[..., ForeignServer]) -> None:
    server = start_server("--api-key", "sesame")
    assert probe_prompt_sizing(server.url, api_key="sesame") == "exact"
    assert probe_prompt_sizing(server.url).startswith(
        "estimated (no model to probe /tokenize with: HTTPStatusError: Client error '401 Unauthorized'"
    )
    # as in vLLM, the key guards only /v1: /tokenize answers without it
    assert probe_prompt_sizing(server.url, model="sse-soak/tiny-sim") == "exact"
    other = foreign(_count_words)  # a server that may want the key on /tokenize gets it there too
    assert probe_prompt_sizing(other.url, api_key="sesame", model=MODEL) == "exact"
    assert other.tokenize_authorizations == ["Bearer sesame"]


@pytest.mark.fast
def test_the_probe_never_raises_and_says_why_it_could_not_probe() -> None:
    sizing = probe_prompt_sizing("http://127.0.0.1:9", timeout=2)  # discard port: refused
    assert sizing.startswith("estimated (no model to probe /tokenize with: ConnectError")


@pytest.mark.fast
def test_vllms_answer_with_no_model_field_is_still_exact(foreign: Callable[..., ForeignServer]) -> None:
    server = foreign(_count_words)
    assert probe_prompt_sizing(server.url) == "exact"
    with httpx.Client(base_url=server.url, timeout=5) as http:
        facts = discover(http)
        text, counted = sized_text(http, facts, "completions", 300)
    assert (facts.prompt_sizing, counted, len(text.split())) == ("exact", 300, 300)


@pytest.mark.fast
@pytest.mark.parametrize("case", FOREIGN_ANSWERS)
def test_a_foreign_tokenize_turns_sizing_to_estimates_with_the_reason(
    foreign: Callable[..., ForeignServer], case: str
) -> None:
    tokenize, reason = FOREIGN_ANSWERS[case]
    server = foreign(tokenize)
    assert probe_prompt_sizing(server.url, timeout=0.5) == f"estimated ({reason})"
    assert server.tokenize_calls == 1  # one probe


@pytest.mark.fast
@pytest.mark.parametrize("case", ["404", "not JSON", "a zero count", "no answer"])
def test_a_run_against_a_foreign_tokenize_probes_once_prepares_estimates_and_says_so_once(
    foreign: Callable[..., ForeignServer], capsys: pytest.CaptureFixture[str], case: str
) -> None:
    tokenize, reason = FOREIGN_ANSWERS[case]
    server = foreign(tokenize)
    state = RunState(probe_timeout=0.5)
    mixes = [
        RequestMix([RequestSpec("long", route, 1000), RequestSpec("short", route, 10)])
        for route in ("completions", "chat")
    ]
    for mix in mixes * 3:
        prepared = state.prepared_mix(mix, server.url)
        assert [r.prompt_tokens for r in prepared.requests] == [None, None]
        text = prepared.requests[0].body.get("prompt") or prepared.requests[0].body["messages"][0]["content"]
        assert len(text) == 1000 * CHARS_PER_TOKEN
    assert state.prompt_sizing == state.prompt_sizing_for(server.url) == f"estimated ({reason})"
    assert server.tokenize_calls == 1  # the probe, and nothing after it
    assert capsys.readouterr().out == f"{ESTIMATED_LINE}{reason}\n"


@pytest.mark.fast
def test_a_failure_after_the_probe_estimates_the_rest_and_says_so_once(
    foreign: Callable[..., ForeignServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = foreign(_prompt_only)
    state = RunState()
    mix = RequestMix(
        [RequestSpec("p", "completions", 200), RequestSpec("c", "chat", 200), RequestSpec("p2", "completions", 300)]
    )
    prepared = {r.spec.label: r for r in state.prepared_mix(mix, server.url).requests}
    assert prepared["p"].prompt_tokens == 200  # measured before the failure: exact and kept
    assert prepared["c"].prompt_tokens is None and prepared["p2"].prompt_tokens is None
    reason = """/tokenize answered 400 to vLLM's request body ({"model", "messages"})"""
    assert state.prompt_sizing == f"estimated ({reason})"
    assert capsys.readouterr().out == f"{ESTIMATED_LINE}{reason}\n"


@pytest.mark.fast
def test_a_count_that_never_grows_is_caught_while_sizing_not_searched_forever(
    foreign: Callable[..., ForeignServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = foreign(lambda _: _json(200, {"count": 5}))
    assert probe_prompt_sizing(server.url) == "exact"  # one answer looks like vLLM's
    state = RunState()
    prepared = state.prepared_mix(RequestMix([RequestSpec("p", "completions", 10_000)]), server.url)
    assert prepared.requests[0].prompt_tokens is None
    assert len(prepared.requests[0].body["prompt"]) == 10_000 * CHARS_PER_TOKEN
    reason = "/tokenize counted 0 tokens for 100 words of filler"
    assert (state.prompt_sizing, capsys.readouterr().out) == (f"estimated ({reason})", f"{ESTIMATED_LINE}{reason}\n")


def test_an_exact_run_prints_nothing_and_records_counts(
    default_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    state = RunState()
    prepared = state.prepared_mix(RequestMix([RequestSpec("c", "chat", 50)]), default_server.url)
    assert prepared.requests[0].prompt_tokens == 50
    assert state.prompt_sizing == state.prompt_sizing_for(default_server.url) == "exact"
    assert capsys.readouterr().out == ""


@pytest.mark.smoke
def test_mixed_truncate_against_a_text_only_tokenize_sends_and_judges_its_requests(tmp_path: Path) -> None:
    run = run_locust("mixed_truncate", tmp_path, "--server-args=--tokenize-api text", seconds=6)
    assert "Traceback" not in run.output, run.output[-3000:]
    assert run.output.count(ESTIMATED_LINE) == 1, run.output[-3000:]
    assert f"""{ESTIMATED_LINE}/tokenize answered 400 to vLLM's request body ({{"model", "prompt"}})""" in run.output
    requests = run.requests
    assert len(requests) > 0 and run.judged.requests == len(requests)
    assert requests["prompt_tokens"].isna().all()
    assert set(requests["client"]) == {"raw", "openai"}
    finished = requests[requests["outcome"] != "stopped"]
    assert len(finished) > 0 and finished["status"].notna().all()
    assert "verdict: " in run.output
    sizing = run.summary["settings"]["prompt_sizing"]
    assert sizing == """estimated (/tokenize answered 400 to vLLM's request body ({"model", "prompt"}))""", sizing
