"""The same request to real vLLM and to the bundled server, and their answers side by side.

``Answer`` is what a test compares: the status, the headers (lower-cased names), the body as
parsed JSON when it is JSON, and, for an event stream, its data payloads (parsed) and comment
count in order. ``Pair.both`` sends one request to each server (each with the shared API key
unless told otherwise) and returns ``(vllm, bundled)``. Prompts that must have a given size are
sized by each server's own ``/tokenize``: the two tokenizers differ, the rules must not. In a body,
``MODEL`` stands for each server's model name, and ``SIZED(n)`` as the ``prompt`` (or as the
``messages``) for a prompt (or one user message) of exactly ``n`` tokens on that server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    json: Any = None
    events: list[Any] = field(default_factory=list)
    """An event stream's data payloads in order: parsed JSON, or the text (``[DONE]``)."""
    comments: int = 0

    @property
    def error(self) -> dict[str, Any] | None:
        """The vLLM error envelope's inner object (``{"error": {...}}``), if the body is one."""
        if isinstance(self.json, dict) and isinstance(self.json.get("error"), dict):
            return self.json["error"]
        return None

    @property
    def inband_error(self) -> dict[str, Any] | None:
        """The first in-band ``data: {"error": {...}}`` of an event stream, if any."""
        for event in self.events:
            if isinstance(event, dict) and isinstance(event.get("error"), dict):
                return event["error"]
        return None


def parse(response: httpx.Response) -> Answer:
    headers = {name.lower(): value for name, value in response.headers.items()}
    answer = Answer(response.status_code, headers, response.content)
    if headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.split("\n"):
            if line.startswith(":"):
                answer.comments += 1
            elif line.startswith("data: "):
                data = line[len("data: ") :]
                try:
                    answer.events.append(json.loads(data))
                except ValueError:
                    answer.events.append(data)
        return answer
    try:
        answer.json = response.json()
    except ValueError:
        answer.json = None
    return answer


@dataclass(frozen=True)
class Sized:
    """A prompt of exactly ``tokens`` tokens, as the server it is sent to counts them."""

    tokens: int


def SIZED(tokens: int) -> Sized:
    """A prompt of ``tokens`` tokens in a body given to ``Pair.both`` (named like ``MODEL``)."""
    return Sized(tokens)


FILLER = "w "
"""One filler word: each server's tokenizer counts a run of them as one token a word (plus its
own fixed overhead, such as a BOS token or a chat template), which is what makes sizing converge."""


@dataclass
class Server:
    """One side of the pair: its base URL, model name and API key."""

    name: str
    url: str
    model: str
    key: str | None
    _sized: dict[tuple[int, bool], str] = field(default_factory=dict, repr=False)

    def count(self, text: str, chat: bool = False) -> int:
        """The tokens ``text`` makes on this server, as a prompt or as one user message (its
        chat template included), by its own ``/tokenize``."""
        body: dict[str, Any] = {"model": self.model}
        body.update({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})
        with self.client() as client:
            response = client.post("/tokenize", json=body)
        response.raise_for_status()
        return int(response.json()["count"])

    def sized_prompt(self, tokens: int, chat: bool = False) -> str:
        """Filler text of exactly ``tokens`` tokens on this server (as one user message when
        ``chat``), found with a few ``/tokenize`` calls and remembered."""
        if (tokens, chat) not in self._sized:
            words = tokens
            for _ in range(8):
                text = FILLER * max(words, 0)
                counted = self.count(text, chat)
                if counted == tokens:
                    self._sized[tokens, chat] = text
                    break
                words += tokens - counted
            else:
                raise AssertionError(f"{self.name}: no filler prompt of exactly {tokens} tokens (chat={chat})")
        return self._sized[tokens, chat]

    def _substituted(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with ``MODEL`` and ``SIZED(n)`` made this server's."""
        body = dict(body)
        if body.get("model") is MODEL:
            body["model"] = self.model
        if isinstance(body.get("prompt"), Sized):
            body["prompt"] = self.sized_prompt(body["prompt"].tokens)
        if isinstance(body.get("messages"), Sized):
            body["messages"] = [{"role": "user", "content": self.sized_prompt(body["messages"].tokens, chat=True)}]
        return body

    def client(self, key: bool = True, timeout: float = 60.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key}"} if key and self.key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, trust_env=False)

    def ask(self, method: str, path: str, *, key: bool = True, **kwargs: Any) -> Answer:
        """One request; in a JSON ``json=`` body, ``MODEL`` and ``SIZED(n)`` become this server's."""
        body = kwargs.get("json")
        if isinstance(body, dict):
            kwargs["json"] = self._substituted(body)
        with self.client(key) as client:
            return parse(client.request(method, path, **kwargs))


MODEL: Any = object()
"""Stands for each server's own model name in a request body given to ``Pair.both``."""


@dataclass
class Pair:
    vllm: Server
    bundled: Server

    def both(self, method: str, path: str, **kwargs: Any) -> tuple[Answer, Answer]:
        """The same request to each server: ``(vllm, bundled)``."""
        return self.vllm.ask(method, path, **kwargs), self.bundled.ask(method, path, **kwargs)
