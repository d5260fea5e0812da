"""Read a real HTTP stream into timed SSE frames, for tests of the server."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from loadtests.client.outcome import frame_kind
from loadtests.client.sse import Frame, SSEParser


@dataclass
class Streamed:
    response: httpx.Response
    frames: list[Frame]
    headers_at: float
    started_at: float
    complete: bool
    """The server closed the body properly (a dropped connection leaves this False)."""

    def payloads(self) -> list[Any]:
        """JSON payloads of the data frames, ``[DONE]`` as the string itself."""
        return [f.data if f.data == "[DONE]" else json.loads(f.data) for f in self.frames if f.data is not None]

    def kinds(self) -> list[str]:
        return [frame_kind(f) for f in self.frames]


def stream(client: httpx.Client, path: str, body: dict[str, Any], **headers: str) -> Streamed:
    """POST ``body`` with ``stream: true`` and collect every frame with its arrival time."""
    parser = SSEParser()
    frames: list[Frame] = []
    started = time.monotonic()
    request_headers = {"Accept-Encoding": "identity", **headers}
    with client.stream("POST", path, json={**body, "stream": True}, headers=request_headers) as response:
        headers_at = time.monotonic()
        complete = True
        if response.status_code != 200:
            response.read()
        else:
            try:
                for chunk in response.iter_raw():
                    frames.extend(parser.feed(chunk, time.monotonic()))
            except httpx.RemoteProtocolError:
                complete = False
    return Streamed(response, frames, headers_at, started, complete)
