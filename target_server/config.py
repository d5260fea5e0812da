"""Every knob of the target server, in one dataclass that is also its command line.

Option names follow vLLM (``--max-model-len``, ``--max-num-seqs``, ``--sse-keep-alive-interval``)
and llm-d-inference-sim (``--time-to-first-token``, ``--inter-token-latency``,
``--prefill-time-per-token``, ``--failure-injection-rate``, ``--failure-types``), with their
units: latencies in milliseconds, the keep-alive interval in seconds, the failure rate in percent.
Options vLLM does not have, or takes otherwise, say so in their help ("extension"): the server
answers as vLLM 0.32.0 does only where it was measured against it (``tests/differential``).
Invariant: a ``ServerConfig`` that exists has passed ``validate()``; the CLI and ``create_app``
both go through it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from sse_soak_lifeline import announce_refusal

API_KEY_ENV = "VLLM_API_KEY"
FAILURE_TYPES = ("server_error", "inband_error", "stall", "disconnect", "rate_limit")
TOKENIZE_APIS = ("vllm", "text", "none")


_T = TypeVar("_T")


def _opt(
    default: _T,
    help: str,
    *,
    nargs: str | None = None,
    choices: Sequence[str] | None = None,
    type: Callable[[str], Any] | None = None,
) -> _T:
    """A field whose metadata holds its option's help and argparse settings; None is argparse's default."""
    return field(default=default, metadata={"help": help, "nargs": nargs, "choices": choices, "type": type})


class _Parser(argparse.ArgumentParser):
    """argparse whose refusals also reach a harness that launched the server (``announce_refusal``)."""

    def error(self, message: str) -> NoReturn:
        announce_refusal(message)
        super().error(message)


@dataclass(frozen=True)
class ServerConfig:
    """Settings of one target server (of all its processes, with ``--api-server-count``; each
    process's part is ``share.ProcessShare``). Field ``foo_bar`` is the option ``--foo-bar``."""

    host: str = _opt("127.0.0.1", "address to listen on")
    port: int = _opt(0, "port to listen on; 0 picks a free one (the ready line prints it)")
    model: str = _opt("sse-soak/tiny-sim", "model name served and listed by /v1/models")
    max_model_len: int = _opt(
        8192,
        "context length: a longer prompt is a 400 (param input_tokens) and max_tokens is clamped to what the "
        "prompt leaves, as in vLLM",
    )
    max_num_seqs: int = _opt(
        16,
        "sequences generating at once, in total: with --api-server-count N each process gets an even share "
        "(at least 1) and queues further requests FIFO on its own",
    )
    api_server_count: int = _opt(
        1,
        "server processes sharing the one listening socket, as vLLM's API servers do; here each has its own "
        "scheduler with a share of --max-num-seqs and its fault draws seeded --seed + its index; whichever "
        "answers /metrics answers for the whole server (each scheduler labelled engine=INDEX, request counters "
        "summed, as vLLM's API servers do); all append to the one --trace-file",
    )
    sse_keep_alive_interval: float = _opt(
        0.0,
        "seconds of stream silence before a ': keep-alive' comment is sent; 0 disables (extension: fractions "
        "of a second are taken, vLLM takes whole seconds)",
    )
    time_to_first_token: float = _opt(0.0, "extension: fixed part of prefill, in milliseconds")
    prefill_time_per_token: float = _opt(0.0, "extension: prefill time per prompt token, in milliseconds")
    inter_token_latency: float = _opt(0.0, "extension: time between generated tokens, in milliseconds")
    default_chat_max_tokens: int = _opt(
        128,
        "extension: tokens a chat request generates when it sets neither max_tokens nor max_completion_tokens, "
        "at most what the context leaves (vLLM generates until its end-of-sequence token; this server has none)",
    )
    failure_injection_rate: float = _opt(0.0, "extension: percent of requests that get an injected fault (0-100)")
    failure_types: tuple[str, ...] = _opt(
        FAILURE_TYPES,
        "extension: faults to draw from, uniformly: " + ", ".join(FAILURE_TYPES),
        nargs="+",
        choices=FAILURE_TYPES,
    )
    stall_seconds: float = _opt(
        90.0, "extension: length of the mid-stream silence of the 'stall' fault (longer than nginx's 60 s default)"
    )
    slowdown_after: float | None = _opt(
        None,
        "extension: seconds after the first generation request at which prefill and decode slow down by "
        "--slowdown-factor (None: never)",
        type=float,
    )
    slowdown_factor: float = _opt(
        1.0,
        "extension: how much slower prefill and decode become after --slowdown-after (a server degrading mid-run)",
    )
    seed: int = _opt(0, "extension: seed of the fault draws and of the generated text")
    api_key: str | None = _opt(
        None,
        f"require 'Authorization: Bearer KEY' (the first such header) on paths under /v1, /v2, /inference and "
        f"/cohere, as vLLM does (/tokenize, /detokenize, /version, /health, /metrics are open); also read from "
        f"${API_KEY_ENV} (as vLLM does), which keeps the key out of the process list; this option wins if both "
        "are given",
    )
    trace_file: str | None = _opt(
        None, "extension: append one JSON line per SSE frame written: request id, kind, time.monotonic(), bytes"
    )
    tokenize_api: str = _opt(
        "vllm",
        "extension: what POST /tokenize takes: vllm ({model, prompt} or {model, messages}, answers with a count), "
        "text (only {text}, answers {tokens}; vLLM's body gets a 400, like a non-vLLM server) or none (no route); "
        "/detokenize is there only with vllm",
        choices=TOKENIZE_APIS,
    )
    log_level: str = _opt("warning", "uvicorn log level")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting and what it accepts."""
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {self.port}")
        if self.max_model_len < 1:
            raise ValueError(f"--max-model-len must be at least 1, got {self.max_model_len}")
        if self.max_num_seqs < 1:
            raise ValueError(f"--max-num-seqs must be at least 1, got {self.max_num_seqs}")
        if self.api_server_count < 1:
            raise ValueError(f"--api-server-count must be at least 1, got {self.api_server_count}")
        if self.max_num_seqs < self.api_server_count:
            raise ValueError(
                f"--max-num-seqs {self.max_num_seqs} is the total across processes: give each of the "
                f"--api-server-count {self.api_server_count} at least one"
            )
        for name in ("time_to_first_token", "prefill_time_per_token", "inter_token_latency", "stall_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
        if self.slowdown_after is not None and not (math.isfinite(self.slowdown_after) and self.slowdown_after >= 0):
            raise ValueError(f"--slowdown-after must be a finite number of seconds >= 0, got {self.slowdown_after}")
        if not (math.isfinite(self.slowdown_factor) and self.slowdown_factor > 0):
            raise ValueError(f"--slowdown-factor must be a finite number > 0, got {self.slowdown_factor}")
        if not 0 <= self.failure_injection_rate <= 100:
            raise ValueError(f"--failure-injection-rate is a percentage in 0..100, got {self.failure_injection_rate}")
        unknown = [kind for kind in self.failure_types if kind not in FAILURE_TYPES]
        if unknown or not self.failure_types:
            raise ValueError(
                f"--failure-types got {', '.join(unknown) or 'nothing'}; choose from {', '.join(FAILURE_TYPES)}"
            )
        if self.tokenize_api not in TOKENIZE_APIS:
            raise ValueError(f"--tokenize-api got {self.tokenize_api!r}; choose from {', '.join(TOKENIZE_APIS)}")
        if self.default_chat_max_tokens < 1:
            raise ValueError(f"--default-chat-max-tokens must be at least 1, got {self.default_chat_max_tokens}")

    @classmethod
    def parser(cls) -> argparse.ArgumentParser:
        parser = _Parser(
            prog="target-server",
            description="OpenAI-compatible streaming server for load and soak tests (no GPU). It answers as "
            "vLLM 0.32.0 does where it was measured against it (errors, request validation, truncation); "
            "options marked 'extension' have no vLLM counterpart or differ from vLLM's on purpose.",
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        for spec in dataclasses.fields(cls):
            flag = "--" + spec.name.replace("_", "-")
            meta = spec.metadata
            convert = meta["type"]
            if convert is None and meta["nargs"] is None and spec.default is not None:
                convert = type(spec.default)  # a single value parses as its default's type
            parser.add_argument(
                flag,
                default=spec.default,
                help=meta["help"],
                nargs=meta["nargs"],
                choices=meta["choices"],
                type=convert,
            )
        return parser

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None) -> ServerConfig:
        """Parse a command line; a bad value exits 2 with a one-line message, as argparse does.
        Without ``--api-key`` (or with an empty one), ``$VLLM_API_KEY`` is the key; empty means none,
        as in vLLM (``args.api_key or envs.VLLM_API_KEY``)."""
        parser = cls.parser()
        namespace = parser.parse_args(argv)
        values = vars(namespace)
        values["failure_types"] = tuple(values["failure_types"])
        values["api_key"] = values["api_key"] or os.environ.get(API_KEY_ENV) or None
        try:
            return cls(**values)
        except ValueError as exc:
            parser.error(str(exc))
            raise  # unreachable: parser.error exits
