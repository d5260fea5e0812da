"""The HTTP surface: vLLM's OpenAI-compatible routes over the simulated engine.

Order of work for a generation request, as in vLLM: decode and validate, look up the model,
tokenize, apply ``truncate_prompt_tokens`` and the ``max_model_len`` checks, check the sampling
parameters (all in ``intake``), and only then answer. A streaming request gets its ``200`` and
headers at that point, BEFORE it queues for a slot or prefills, so time-to-first-byte is not
time-to-first-token; the engine's own checks then arrive in-band (``data: {"error": {..., "code":
400}}`` and ``[DONE]``), as vLLM's do. Every error is vLLM's error body with a 4xx for bad input,
never a 500; the framework's own errors (unknown path, wrong method, a body that cannot be
decoded) are FastAPI's ``{"detail": ...}``, as in vLLM.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from target_server import intake, metrics
from target_server.config import ServerConfig
from target_server.engine import Engine, Generation
from target_server.faults import Fault, FaultInjector, InjectedDisconnect
from target_server.keep_alive import with_keep_alive
from target_server.protocol import (
    APIError,
    invalid_request,
)
from target_server.share import SOLE, ProcessShare
from target_server.streaming import (
    DONE_FRAME,
    VLLM_VERSION,
    Reply,
    Route,
    choice_tokens,
    data_frame,
    full_body,
    random_request_id,
    sse_frames,
    system_fingerprint,
)
from target_server.trace import FrameTracer

SSE_MEDIA_TYPE = "text/event-stream"  # Starlette appends "; charset=utf-8"
ID_SLICE = 10_000
"""Token ids rendered per call in a /tokenize answer (2 ms each; 50,000 took 10 ms)."""


class TargetServer:
    """The state behind the routes of one server process: config, engine, fault draws, counters and
    the trace; ``share`` is which process of ``--api-server-count`` this is, and its part."""

    def __init__(self, config: ServerConfig, share: ProcessShare = SOLE) -> None:
        self.config = config
        self.engine = Engine(config, share.slots(config.max_num_seqs))
        self.faults = FaultInjector(config, share.fault_seed(config.seed))
        self.stats = metrics.ServerStats()
        shared = (
            None if share.metrics_dir is None else metrics.SharedMetrics(share.metrics_dir, share.index, share.count)
        )
        self.metrics = metrics.Exposition(self.engine, self.stats, config.model, share.engine_label, shared)
        self.tracer = FrameTracer(config.trace_file) if config.trace_file else None
        self.fingerprint = system_fingerprint(config.model, config.max_model_len)

    def check_model(self, model: str | None) -> None:
        intake.check_model(model, self.config.model)

    async def generate(self, request: Request, route: Route, admitted: intake.Admitted) -> Response:
        """Answer an admitted request: the engine's rejection (in-band on a stream), else draw a
        fault and answer with a stream, a full body, or an error."""
        body, prompt_tokens, max_tokens = admitted.body, admitted.prompt_tokens, admitted.max_tokens
        given = request.headers.get("x-request-id")  # vLLM's id when given, even empty; never echoed as a header
        request_id = random_request_id() if given is None else given
        if admitted.rejection is not None:
            return self._reject(admitted.rejection, bool(body.stream))
        fault = self.faults.draw()
        if fault is Fault.SERVER_ERROR:
            raise APIError(500, "injected fault: internal server error")
        if fault is Fault.RATE_LIMIT:
            raise APIError(429, "injected fault: too many requests, retry later")
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        continuous = include_usage and bool(body.stream_options and body.stream_options.continuous_usage_stats)
        reply = Reply(
            route, request_id, self.config.model, prompt_tokens, max_tokens, self.fingerprint, body.n, include_usage,
            continuous,
        )  # fmt: skip
        job = Generation(prompt_tokens, max_tokens, fault)
        tokens = choice_tokens([self.engine.generate(job) for _ in range(body.n)])
        if body.stream:
            return StreamingResponse(self._sse(reply, tokens), media_type=SSE_MEDIA_TYPE)
        return await self._whole(request, reply, tokens)

    def _reject(self, error: APIError, stream: bool) -> Response:
        """The engine refused the request: a 400 body, or on a stream (whose headers vLLM has sent
        by then) the error as its one data frame, then ``[DONE]``."""
        if not stream:
            raise error
        self.stats.errors_by_status[error.status] += 1

        async def frames() -> AsyncIterator[bytes]:
            yield data_frame(error.body())
            yield DONE_FRAME

        return StreamingResponse(frames(), media_type=SSE_MEDIA_TYPE)

    def _sse(self, reply: Reply, tokens: AsyncIterator[tuple[int, str]]) -> AsyncIterator[bytes]:
        frames = sse_frames(reply, tokens, on_error=self._count_inband_error)
        frames = with_keep_alive(frames, self.config.sse_keep_alive_interval, self.stats.count_keepalive)
        if self.tracer is not None:
            frames = self.tracer.traced(reply.request_id, frames)
        return frames

    def _count_inband_error(self) -> None:
        self.stats.errors_by_status[500] += 1

    async def _whole(self, request: Request, reply: Reply, tokens: AsyncIterator[tuple[int, str]]) -> Response:
        """The non-streaming answer. Invariant: when the client leaves first, the generation is
        cancelled then and there, so its slot is free before this returns (vLLM aborts such a
        request too); the response then goes to nobody."""
        generation = asyncio.create_task(full_body(reply, tokens))
        departure = asyncio.create_task(_client_left(request))
        try:
            await asyncio.wait((generation, departure), return_when=asyncio.FIRST_COMPLETED)
        finally:
            generation.cancel()  # no-op once it is done
            departure.cancel()
            await asyncio.wait((generation, departure))  # the engine's slot is released by now
        if generation.cancelled():
            departure.result()  # raises if watching for the client failed; else the client has gone
            return Response()
        try:
            content = generation.result()
        except InjectedDisconnect:
            return _truncated_json()
        except Exception as exc:
            raise APIError(500, f"{type(exc).__name__}: {exc}") from exc
        return JSONResponse(content)


async def _client_left(request: Request) -> None:
    """Return when the client has disconnected. Call only once the body has been read: the server
    then has nothing to deliver but ``http.disconnect`` (uvicorn sends it when the connection
    closes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _truncated_json() -> Response:
    """A response that promises a body and dies half-way: the non-streaming ``disconnect`` fault."""
    promised = b'{"error": "this body is cut off by the disconnect fault"}'

    async def half_then_drop() -> AsyncIterator[bytes]:
        yield promised[: len(promised) // 2]
        raise InjectedDisconnect("injected fault: connection dropped mid-body")

    headers = {"Content-Length": str(len(promised))}
    return StreamingResponse(half_then_drop(), media_type="application/json", headers=headers)


def create_app(config: ServerConfig, share: ProcessShare = SOLE) -> FastAPI:
    """The ASGI app of process ``share`` for ``config``; ``app.state.server`` holds its
    ``TargetServer``, which every route and error handler below reads from there (none closes over it)."""
    app = FastAPI(title="sse-soak target server", lifespan=_lifespan, exception_handlers=_error_handlers())
    app.state.server = server = TargetServer(config, share)
    for path, endpoint, method in _routes(config):
        app.add_api_route(path, endpoint, methods=[method])
    # vLLM's layers, innermost first (the last added is outermost): its request counter, CORS with
    # its defaults (any method and header, no origin allowed: every answer varies by Origin, a
    # preflight from an origin is refused), then the API key check.
    app.add_middleware(metrics.CountRequests, stats=server.stats, routes=app.router.routes)
    app.add_middleware(CORSMiddleware, allow_origins=[], allow_methods=["*"], allow_headers=["*"])
    _install_auth(app, config)
    return app


def _server(request: Request) -> TargetServer:
    """The ``TargetServer`` of the app serving ``request``."""
    server: TargetServer = request.app.state.server
    return server


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """While one of several processes serves, publishes its metrics for the others every
    ``metrics.PUBLISH_INTERVAL_S``; closes the frame trace, if any, when the server shuts down."""
    server: TargetServer = app.state.server
    publisher = None if server.metrics.shared is None else asyncio.create_task(_publish_metrics(server))
    yield
    if publisher is not None:
        publisher.cancel()
        assert server.metrics.shared is not None
        server.metrics.shared.withdraw()
    if server.tracer is not None:
        server.tracer.close()


async def _publish_metrics(server: TargetServer) -> None:
    while True:
        try:
            server.metrics.publish()
        except OSError:
            return  # the parent removed the directory: it is stopping every process
        await asyncio.sleep(metrics.PUBLISH_INTERVAL_S)


def _routes(config: ServerConfig) -> list[tuple[str, Callable[..., Any], str]]:
    """Path, handler and method of every route, in registration order. ``POST /tokenize`` is as
    ``--tokenize-api`` says: vLLM's (a prompt or chat messages, answered with a ``count``), a
    foreign one that takes only ``{"text"}`` and answers bare ``tokens`` (as non-vLLM servers
    do), or none at all (the framework's 404 for an unknown path)."""
    vllm_tokenize = [("/tokenize", tokenize, "POST"), ("/detokenize", detokenize, "POST")]
    tokenize_routes = {"vllm": vllm_tokenize, "text": [("/tokenize", tokenize_text, "POST")]}
    return [
        ("/health", health, "GET"),
        ("/version", version, "GET"),
        ("/v1/models", models, "GET"),
        ("/metrics", prometheus, "GET"),
        *tokenize_routes.get(config.tokenize_api, []),
        ("/v1/completions", completions, "POST"),
        ("/v1/chat/completions", chat_completions, "POST"),
    ]


async def health() -> Response:
    return Response(status_code=200)


async def version() -> dict[str, str]:
    """The vLLM version whose API this server answers as."""
    return {"version": VLLM_VERSION}


async def models(request: Request) -> dict[str, Any]:
    """vLLM's card: ``root`` is the model's path there, its name here (served under its own name)."""
    config = _server(request).config
    created = int(time.time())
    permission = {
        "id": f"modelperm-{random_request_id()}",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    card = {
        "id": config.model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": config.model,
        "parent": None,
        "max_model_len": config.max_model_len,
        "permission": [permission],
    }
    return {"object": "list", "data": [card]}


async def prometheus(request: Request) -> Response:
    return Response(_server(request).metrics.render(), media_type=metrics.CONTENT_TYPE)


async def completions(request: Request) -> Response:
    server = _server(request)
    admitted = await intake.prepare(request, functools.partial(intake.completion, server.config))
    return await server.generate(request, "completions", admitted)


async def chat_completions(request: Request) -> Response:
    server = _server(request)
    admitted = await intake.prepare(request, functools.partial(intake.chat_completion, server.config))
    return await server.generate(request, "chat", admitted)


async def tokenize(request: Request) -> Response:
    """vLLM's ``/tokenize``; decoding, checks and rendering run off the loop, in ``intake.prepare``."""
    answer = functools.partial(_vllm_tokenize_answer, _server(request))
    return json_pieces_response(await intake.prepare(request, answer))


def _vllm_tokenize_answer(server: TargetServer, raw: bytes) -> list[bytes]:
    body, ids, strings = intake.tokenize(raw)
    server.check_model(body.model)
    head = {"count": len(ids), "max_model_len": server.config.max_model_len}
    return json_with_ids(head, "tokens", ids, strings)


async def detokenize(request: Request) -> Response:
    """vLLM's ``/detokenize``: ``{"tokens"}`` in, ``{"prompt"}`` out."""
    server = _server(request)
    body, text = await intake.prepare(request, intake.detokenize)
    server.check_model(body.model)
    return JSONResponse({"prompt": text})


async def tokenize_text(request: Request) -> Response:
    """The foreign ``/tokenize``: ``{"text"}`` in, bare ``tokens`` out."""
    return json_pieces_response(await intake.prepare(request, _text_tokenize_answer))


def _text_tokenize_answer(raw: bytes) -> list[bytes]:
    return json_with_ids({}, "tokens", intake.tokenize_text(raw))


def json_with_ids(head: dict[str, Any], key: str, ids: list[int], strings: list[str] | None = None) -> list[bytes]:
    """``head`` with ``key: ids`` (then, for vLLM's ``/tokenize``, ``token_strs: strings``) as compact
    JSON, vLLM's, in pieces of ``ID_SLICE`` items each rendered by one short call: a 5-million-id
    list as one ``json.dumps`` call held the interpreter, loop included, for half a second, and as
    one 30 MB body the event loop copied it whole on its way out. Consumes ``ids``: it is emptied a
    slice at a time, since freeing 5 million ids in one call held the interpreter 45 ms."""
    vllm = bool(head)
    parts = [(_compact(head)[:-1] + ("," if head else "") + json.dumps(key) + ":[").encode()]
    parts.extend(
        (("," if start else "") + ",".join(map(str, ids[start : start + ID_SLICE]))).encode()
        for start in range(0, len(ids), ID_SLICE)
    )
    parts.append(b"]")
    while ids:
        del ids[-ID_SLICE:]
    if vllm and strings is None:
        parts.append(b',"token_strs":null')
    elif strings is not None:
        parts.append(b',"token_strs":[')
        parts.extend(
            (("," if start else "") + _compact(strings[start : start + ID_SLICE])[1:-1]).encode()
            for start in range(0, len(strings), ID_SLICE)
        )
        parts.append(b"]")
    parts.append(b"}")
    return parts


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def json_pieces_response(pieces: list[bytes]) -> Response:
    """The pieces as one JSON body of known length, written a piece at a time (each written waits
    for the client to take it, so the loop never holds or copies the whole body)."""
    length = str(sum(len(piece) for piece in pieces))
    return StreamingResponse(iter(pieces), media_type="application/json", headers={"Content-Length": length})


def _error_handlers() -> dict[int | type[Exception], Callable[[Request, Any], Coroutine[Any, Any, Response]]]:
    """Every error answers as vLLM does and is counted by status.
    Given to ``FastAPI()``, whose parameter types each handler by the exception class it is keyed
    by; ``add_exception_handler``'s stub wants handlers of any ``Exception`` instead."""
    return {
        APIError: api_error,
        StarletteHTTPException: framework_error,
        RequestValidationError: validation_error,
        Exception: internal_error,
    }


def _error_response(request: Request, error: APIError) -> JSONResponse:
    _server(request).stats.errors_by_status[error.status] += 1
    return JSONResponse(error.body(), status_code=error.status)


async def api_error(request: Request, exc: APIError) -> JSONResponse:
    return _error_response(request, exc)


async def framework_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """404, 405 and a body that cannot be decoded: FastAPI's own ``{"detail": ...}`` (with the
    ``allow`` header of a 405), not vLLM's error body: vLLM 0.32.0 answers these so (measured)."""
    _server(request).stats.errors_by_status[exc.status_code] += 1
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's own validation (the routes validate their bodies themselves), in vLLM's shape."""
    errors = [{**error, "loc": tuple(error.get("loc", ()))[1:]} for error in exc.errors()]
    return _error_response(request, invalid_request(errors))


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    return _error_response(request, APIError(500, f"{type(exc).__name__}: {exc}"))


def _install_auth(app: FastAPI, config: ServerConfig) -> None:
    if config.api_key is not None:
        app.add_middleware(_RequireAPIKey, key=config.api_key)


GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
"""The paths vLLM's API key guards, route or no route."""


class _RequireAPIKey:
    """vLLM's API key check, as pure ASGI (not ``BaseHTTPMiddleware``, which would buffer and delay
    streams). Guarded: every request whose path starts with one of ``GUARDED_PREFIXES``, except
    ``OPTIONS`` (CORS preflight); every other path (``/health``, ``/metrics``, ``/tokenize``) is
    open. As vLLM reads it: the first ``Authorization`` header, ``<scheme> <token>`` split at the
    first space, the scheme ``bearer`` in any case and the token (its bytes read as Latin-1, then
    written as UTF-8, as Starlette and vLLM do) exactly the key. Token and key are compared as
    sha256 digests with ``secrets.compare_digest``, so the time taken does not tell how much of a
    guess was right. Anything else: 401 with vLLM's body, which names neither key nor token."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self._key_digest = hashlib.sha256(key.encode()).digest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guarded = (
            scope["type"] == "http" and scope["method"] != "OPTIONS" and scope["path"].startswith(GUARDED_PREFIXES)
        )
        if guarded and not self._authorized(scope["headers"]):
            await JSONResponse({"error": "Unauthorized"}, status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        value = next((value for name, value in headers if name.lower() == b"authorization"), b"")
        scheme, _, token = value.decode("latin-1").partition(" ")
        digest = hashlib.sha256(token.encode()).digest()
        return scheme.lower() == "bearer" and secrets.compare_digest(digest, self._key_digest)
