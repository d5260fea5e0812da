"""Streams and generation answers: the same requests to real vLLM and to the bundled server.

Compared by structure (``shapes``): vLLM's random model makes the text, and its tokenizer is not
ours, so token counts are checked against each server's own ``/tokenize``, never against each
other. Every request sets ``ignore_eos`` so that vLLM's model cannot end a choice early.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from loadtests.client.outcome import frame_kind
from loadtests.client.sse import Frame, SSEParser
from tests.conftest import VLLM_KEEP_ALIVE
from tests.differential import shapes
from tests.differential.parity import MODEL, Answer, Pair, Server

pytestmark = pytest.mark.vllm  # every test here compares real vLLM with the bundled server

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
PREFIXES = {"completions": "cmpl-", "chat": "chatcmpl-"}
TEXT = "hello there, how long is this prompt?"
TOKENS = 6
FINGERPRINT = re.compile(r"vllm-(?P<version>[0-9][0-9a-z.+]*)-[0-9a-f]{8}")


def request(route: str, **extra: Any) -> dict[str, Any]:
    """A generation request of ``TOKENS`` tokens on ``route`` that cannot stop early."""
    source: dict[str, Any] = (
        {"prompt": TEXT} if route == "completions" else {"messages": [{"role": "user", "content": TEXT}]}
    )
    return {"model": MODEL, **source, "max_tokens": TOKENS, "ignore_eos": True, **extra}


def prompt_count(server: Server, route: str) -> int:
    """The prompt's token count by the server's own ``/tokenize`` (a chat prompt as templated)."""
    body = request(route)
    source = {"prompt": body["prompt"]} if route == "completions" else {"messages": body["messages"]}
    answer = server.ask("POST", "/tokenize", json={"model": MODEL, **source})
    assert answer.status == 200, answer.body
    count: int = answer.json["count"]
    return count


def both_stream(pair: Pair, route: str, **extra: Any) -> tuple[Answer, Answer]:
    vllm, bundled = pair.both("POST", PATHS[route], json=request(route, stream=True, **extra))
    assert vllm.status == bundled.status == 200, (vllm.body[:300], bundled.body[:300])
    assert vllm.events[-1] == bundled.events[-1] == "[DONE]"
    return vllm, bundled


def assert_same_structure(vllm: Answer, bundled: Answer) -> None:
    assert shapes.skeleton(bundled.events) == shapes.skeleton(vllm.events)
    assert shapes.middles(vllm.events), "vLLM sent no middle chunk: nothing to compare them with"
    assert shapes.middles(bundled.events) == shapes.middles(vllm.events)


@pytest.mark.parametrize("usage", [False, True], ids=["plain", "include_usage"])
@pytest.mark.parametrize("route", ["completions", "chat"])
def test_a_streams_chunks_have_vllms_shape(pair: Pair, route: str, usage: bool) -> None:
    """Object types, keys per chunk and per choice, the chat role chunk first, finish_reason on the
    last content chunk only, the usage chunk with ``choices: []`` and ``system_fingerprint`` on the
    final chunk, then ``[DONE]``."""
    extra = {"stream_options": {"include_usage": True}} if usage else {}
    vllm, bundled = both_stream(pair, route, **extra)
    assert_same_structure(vllm, bundled)
    for answer in (vllm, bundled):
        chunks = shapes.chunks(answer.events)
        finished = [chunk for chunk in chunks if any(c["finish_reason"] for c in chunk["choices"])]
        assert len(finished) == 1
        if usage:
            assert chunks[-1]["choices"] == [] and set(chunks[-1]["usage"]) == {
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
            }
        if route == "chat":
            assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_usage_counts_the_prompt_by_each_servers_own_tokenizer(pair: Pair, route: str) -> None:
    """The usage chunk's numbers: the prompt as that server's ``/tokenize`` counts it (chat: as
    templated, generation prompt included), every token asked for, and their sum."""
    for server, answer in zip(
        (pair.vllm, pair.bundled), both_stream(pair, route, stream_options={"include_usage": True}), strict=True
    ):
        prompt = prompt_count(server, route)
        usage = shapes.chunks(answer.events)[-1]["usage"]
        assert usage == {"prompt_tokens": prompt, "completion_tokens": TOKENS, "total_tokens": prompt + TOKENS}, (
            server.name
        )


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_continuous_usage_stats_put_usage_on_every_chunk(pair: Pair, route: str) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    vllm, bundled = both_stream(pair, route, stream_options=options)
    assert_same_structure(vllm, bundled)
    for server, answer in ((pair.vllm, vllm), (pair.bundled, bundled)):
        prompt = prompt_count(server, route)
        chunks = shapes.chunks(answer.events)
        assert all(chunk.get("usage") for chunk in chunks), server.name
        assert {chunk["usage"]["prompt_tokens"] for chunk in chunks} == {prompt}
        generated = [chunk["usage"]["completion_tokens"] for chunk in chunks[:-1]]
        assert generated == sorted(generated) and generated[-1] == TOKENS, (server.name, generated)
        assert all(chunk["usage"]["total_tokens"] == prompt + chunk["usage"]["completion_tokens"] for chunk in chunks)
        if route == "chat":
            assert chunks[0]["usage"]["completion_tokens"] == 0  # the role chunk's


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_continuous_usage_stats_without_include_usage_add_nothing(pair: Pair, route: str) -> None:
    vllm, bundled = both_stream(pair, route, stream_options={"continuous_usage_stats": True})
    assert_same_structure(vllm, bundled)
    for answer in (vllm, bundled):
        assert not any("usage" in chunk for chunk in shapes.chunks(answer.events))


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_n_2_streams_both_choices_by_index(pair: Pair, route: str) -> None:
    """Two choices in one stream, each with its own index, role chunk (chat: both before any
    content), finish and tokens; with one slot, choice 1 queues behind choice 0."""
    vllm, bundled = both_stream(pair, route, n=2, stream_options={"include_usage": True})
    assert shapes.skeleton(bundled.events) == shapes.skeleton(vllm.events)
    assert shapes.middles(bundled.events) == shapes.middles(vllm.events)
    assert shapes.indexes(bundled.events) == shapes.indexes(vllm.events) == [0, 1]
    for answer in (vllm, bundled):
        assert shapes.chunks(answer.events)[-1]["usage"]["completion_tokens"] == 2 * TOKENS


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_ids_created_and_model_are_alike_on_every_chunk(pair: Pair, route: str) -> None:
    for answer in both_stream(pair, route, stream_options={"include_usage": True}):
        chunks = shapes.chunks(answer.events)
        ids = {chunk["id"] for chunk in chunks}
        assert len(ids) == 1
        (chunk_id,) = ids
        assert chunk_id.startswith(PREFIXES[route])
        assert shapes.ID_SUFFIX.fullmatch(chunk_id.removeprefix(PREFIXES[route])), chunk_id
        assert len({chunk["created"] for chunk in chunks}) == 1 and isinstance(chunks[0]["created"], int)
        assert {chunk["model"] for chunk in chunks} == {pair.vllm.model}
        objects = {chunk["object"] for chunk in chunks}
        assert objects == {"text_completion" if route == "completions" else "chat.completion.chunk"}


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("route", ["completions", "chat"])
def test_an_incoming_x_request_id_becomes_the_id_and_is_not_echoed(pair: Pair, route: str, streamed: bool) -> None:
    given = f"parity-{route}-{int(streamed)}"
    vllm, bundled = pair.both(
        "POST", PATHS[route], json=request(route, stream=streamed), headers={"X-Request-Id": given}
    )
    for answer in (vllm, bundled):
        assert answer.status == 200
        ids = {chunk["id"] for chunk in shapes.chunks(answer.events)} if streamed else {answer.json["id"]}
        assert ids == {PREFIXES[route] + given}
        assert "x-request-id" not in answer.headers


def header_names(answer: Answer) -> set[str]:
    return set(answer.headers) - {"date"}


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("route", ["completions", "chat"])
def test_response_headers_are_alike(pair: Pair, route: str, streamed: bool) -> None:
    vllm, bundled = pair.both("POST", PATHS[route], json=request(route, stream=streamed))
    assert header_names(bundled) == header_names(vllm)
    for name in ("content-type", "vary", "server", "transfer-encoding"):
        assert bundled.headers.get(name) == vllm.headers.get(name), name


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("route", ["completions", "chat"])
def test_a_whole_answer_has_vllms_shape(pair: Pair, route: str, n: int) -> None:
    vllm, bundled = pair.both("POST", PATHS[route], json=request(route, n=n))
    assert vllm.status == bundled.status == 200
    assert shapes.chunk_shape(bundled.json) == shapes.chunk_shape(vllm.json)
    for server, answer in ((pair.vllm, vllm), (pair.bundled, bundled)):
        prompt = prompt_count(server, route)
        assert answer.json["usage"]["prompt_tokens"] == prompt
        assert answer.json["usage"]["completion_tokens"] == n * TOKENS
        assert [choice["index"] for choice in answer.json["choices"]] == list(range(n))
        assert answer.json["id"].startswith(PREFIXES[route])


def test_the_system_fingerprint_names_the_version_and_stays_the_same(pair: Pair) -> None:
    """On a whole answer, on a stream's finishing chunk, and on its usage chunk when it has one."""
    versions = []
    for server in (pair.vllm, pair.bundled):
        whole = server.ask("POST", "/v1/completions", json=request("completions")).json["system_fingerprint"]
        plain = server.ask("POST", "/v1/completions", json=request("completions", stream=True))
        usage = server.ask(
            "POST", "/v1/chat/completions", json=request("chat", stream=True, stream_options={"include_usage": True})
        )
        assert [chunk.get("system_fingerprint") for chunk in shapes.chunks(plain.events)][-1] == whole
        assert [chunk.get("system_fingerprint") for chunk in shapes.chunks(usage.events)][-1] == whole
        match = FINGERPRINT.fullmatch(whole)
        assert match, (server.name, whole)
        versions.append(match["version"])
        assert server.ask("GET", "/version").json == {"version": match["version"]}
    assert versions[0] == versions[1]


def test_min_tokens_is_accepted_and_generates_every_token(pair: Pair) -> None:
    body = request("completions", stream=True, stream_options={"include_usage": True}, min_tokens=TOKENS)
    del body["ignore_eos"]
    vllm, bundled = pair.both("POST", "/v1/completions", json=body)
    for answer in (vllm, bundled):
        assert answer.status == 200
        assert shapes.chunks(answer.events)[-1]["usage"]["completion_tokens"] == TOKENS


def test_stream_options_without_stream_are_refused_alike(pair: Pair) -> None:
    body = request("completions", stream_options={"include_usage": True})
    vllm, bundled = pair.both("POST", "/v1/completions", json=body)
    assert vllm.status == bundled.status == 400
    assert vllm.error is not None and bundled.error is not None
    assert bundled.error["param"] == vllm.error["param"] == "stream_options"


QUEUE_S = 3.5
"""How long the queued stream waits: the request holding the slot is cut (the server aborts it)
this long after the queued stream's headers arrived."""
HOLD_TOKENS = 8000
HOLD_CHOICES = 3
"""The holder's size: three choices of ``HOLD_TOKENS`` each, one after the other in the one slot
(vLLM decodes 8000 tokens in 3 to 11 s here, as the machine is idle or busy; the twin in 12.8 s).
While the holder's first choice runs, its other two wait, and so does the queued stream."""
ADMITTED_WITHIN_S = 60.0
"""How long the holder may take to start generating (its tokens counted in ``GENERATED``) before
the measurement fails: the queued stream is sent only once the holder has the slot. A fixed
half-second wait was not enough in CI, where vLLM once scheduled the queued stream first."""
GAUGE_EVERY_S = 0.5
"""How often the gauges are read while the stream queues (a vLLM scrape is 60 KB of text)."""
RUNNING, WAITING, GENERATED = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total"
ATTEMPTS = 4
"""Measurements of one server before its queueing is given up as unmeasurable. On a busy machine
vLLM's API server can go silent while its engine generates (measured here under a load average
of 15 to 35: ``/health`` and ``/metrics`` unanswered for 7 to 34 s, its event loop idle; or
``/metrics`` answered with the gauges still at 0 while a request ran), so the holder may have
ended before it was cut, or the gauges may not be the queue's."""


@dataclass
class Queued:
    """What a stream queued behind a held slot saw, on the test's clock."""

    frames: list[Frame] = field(default_factory=list)
    status: int = 0
    headers_at: float = 0.0
    released_at: float = 0.0
    generated_before: float = 0.0
    """The server's ``GENERATED`` before the holder was sent."""
    readings: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    """The server's ``RUNNING``, ``WAITING`` and ``GENERATED``, read every ``GAUGE_EVERY_S`` from
    the queued stream's headers until the holder was cut, each with the time its answer came."""

    @property
    def first_data(self) -> int:
        kinds = [frame_kind(frame) for frame in self.frames]
        return kinds.index("data") if "data" in kinds else len(kinds)

    @property
    def held_until_cut(self) -> bool:
        """The queued stream got its first token only after the holder was cut: it did queue."""
        return self.first_data < len(self.frames) and self.frames[self.first_data].t > self.released_at

    @property
    def gauges(self) -> dict[str, float] | None:
        """The last reading that came before the queued stream's first token and is current: it
        shows the holder running (which it was, until it was cut). vLLM's gauges are updated from
        the engine's outputs, and a busy API server read them as 0 while a request ran."""
        if not self.held_until_cut:
            return None
        first_token = self.frames[self.first_data].t
        current = [gauges for at, gauges in self.readings if at < first_token and gauges[RUNNING] == 1]
        return current[-1] if current else None

    def waiting_expected(self, reading: dict[str, float]) -> float:
        """What ``WAITING`` should read then: the queued stream and the holder's choices not yet
        started, by the tokens generated since the holder was sent (all the holder's, then)."""
        finished = int(reading[GENERATED] - self.generated_before) // HOLD_TOKENS
        return 1.0 + (HOLD_CHOICES - 1 - finished)


def gauges(server: Server) -> dict[str, float]:
    text = httpx.get(server.url + "/metrics", timeout=60, trust_env=False).text
    names = (RUNNING, WAITING, GENERATED)
    return {
        name: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))
        for name in names
    }


def hold_the_slot(server: Server) -> socket.socket:
    """A non-streaming request of ``HOLD_CHOICES`` choices of ``HOLD_TOKENS`` tokens sent on a bare
    socket (cheap for both sides while it runs); closing the socket cuts it, and the server
    aborts it."""
    body = {**request("completions", max_tokens=HOLD_TOKENS, n=HOLD_CHOICES), "model": server.model}
    raw = json.dumps(body).encode()
    where = urlsplit(server.url)
    assert where.hostname is not None and where.port is not None
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {server.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    )
    holder = socket.create_connection((where.hostname, where.port), timeout=30)
    holder.sendall(head.encode() + raw)
    return holder


def wait_until_generating(server: Server, generated_before: float) -> None:
    """Return once the server has generated a token since ``generated_before``: the holder, the
    only request, has the slot."""
    deadline = time.monotonic() + ADMITTED_WITHIN_S
    while gauges(server)[GENERATED] <= generated_before:
        assert time.monotonic() < deadline, f"{server.name}: the holder generated nothing in {ADMITTED_WITHIN_S} s"
        time.sleep(0.05)


def queue_behind_a_held_slot(server: Server) -> Queued:
    """A long request takes the one slot; then a chat stream is sent, which has to queue; once it
    has its headers the server's gauges are read, in the background (a server may be slow to
    answer), until ``QUEUE_S`` after those headers the holder is cut; the queued stream then runs
    to its end."""
    seen = Queued()
    headers, released = threading.Event(), threading.Event()
    failures: list[BaseException] = []
    queued_body = {**request("chat", stream=True), "model": server.model}

    def wait_in_queue() -> None:
        parser = SSEParser()
        try:
            with (
                server.client(timeout=120) as client,
                client.stream("POST", "/v1/chat/completions", json=queued_body) as response,
            ):
                seen.headers_at, seen.status = time.monotonic(), response.status_code
                headers.set()
                for chunk in response.iter_raw():
                    seen.frames.extend(parser.feed(chunk, time.monotonic()))
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)
        finally:
            headers.set()

    def read_gauges() -> None:
        try:
            while not released.is_set():
                reading = gauges(server)
                seen.readings.append((time.monotonic(), reading))
                released.wait(GAUGE_EVERY_S)
        except BaseException as exc:
            failures.append(exc)

    queued = threading.Thread(target=wait_in_queue)
    reader = threading.Thread(target=read_gauges)
    seen.generated_before = gauges(server)[GENERATED]
    holder = hold_the_slot(server)
    try:
        wait_until_generating(server, seen.generated_before)
        queued.start()
        assert headers.wait(60), "the queued stream got no headers"
        reader.start()
        time.sleep(max(0.0, seen.headers_at + QUEUE_S - time.monotonic()))
    finally:
        seen.released_at = time.monotonic()
        released.set()
        holder.close()
        for thread in (queued, reader):
            if thread.ident is not None:
                thread.join()
    assert not failures, failures
    return seen


def measure_queueing(server: Server, enough: Callable[[Queued], bool]) -> Queued:
    """The first of ``ATTEMPTS`` measurements that is ``enough``, else the last."""
    for _ in range(ATTEMPTS):
        seen = queue_behind_a_held_slot(server)
        if enough(seen):
            break
    return seen


def test_a_queued_stream_gets_its_headers_then_keep_alive_until_the_slot_frees(pair: Pair) -> None:
    """One slot, held by a long request: a stream sent then gets 200 and its headers while it
    waits, a ``: keep-alive`` comment for each interval of silence, and, once the holder is cut,
    its chat role chunk with its first token."""
    for server in (pair.vllm, pair.bundled):
        seen = measure_queueing(server, lambda seen: seen.held_until_cut)
        assert seen.held_until_cut, (server.name, f"the holder did not hold until it was cut, {ATTEMPTS} times", seen)
        assert seen.status == 200
        first_data = seen.first_data
        kinds = [frame_kind(frame) for frame in seen.frames]
        assert kinds[:first_data] == ["keepalive"] * first_data, (server.name, kinds)
        silence = seen.frames[first_data].t - seen.headers_at
        ticks = int(silence / VLLM_KEEP_ALIVE)
        assert max(2, ticks - 1) <= first_data <= ticks + 1, (server.name, silence, first_data)
        role, content = seen.frames[first_data], seen.frames[first_data + 1]
        assert role.data is not None and '"role":"assistant"' in role.data, server.name
        assert content.t - role.t < 0.5, server.name


def test_a_queued_stream_and_the_holders_other_choices_are_counted_waiting(pair: Pair) -> None:
    """While one choice of the holder runs, its choices not yet started and the stream queued
    behind them are ``vllm:num_requests_waiting``; the one running is ``vllm:num_requests_running``.
    (Which choice runs when the gauges are read is told by ``vllm:generation_tokens_total``: a busy
    vLLM answered its first reading only once two of the holder's three choices were done.)"""
    for server in (pair.vllm, pair.bundled):
        seen = measure_queueing(server, lambda seen: seen.gauges is not None)
        assert seen.gauges is not None, (server.name, f"no current gauges read while queued, {ATTEMPTS} times", seen)
        reading = seen.gauges
        assert reading[WAITING] == seen.waiting_expected(reading), (server.name, seen.generated_before, seen.readings)
