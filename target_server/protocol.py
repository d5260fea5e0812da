"""Request and error shapes of vLLM's OpenAI-compatible API, as pydantic models.

The models declare vLLM 0.32.0's types for the fields they name (lax, as vLLM's are: ``"stream":
"yes"`` streams, ``"max_tokens": "16"`` is 16) and its checks on the raw body that run before
field validation (``stream_options`` without ``stream``, a missing prompt, logprobs bounds), in
vLLM's order; unknown fields are accepted and ignored, as vLLM does. Fields the server does not act
on (temperature, top_p, ...) are validated as vLLM validates them (``intake``) and otherwise ignored.

Invariant: every error the server answers with, the framework's own aside (``{"detail": ...}``
for an unknown path, a wrong method or a body that cannot be decoded, as FastAPI writes them in
vLLM too), is an ``APIError`` rendered by ``error_body``: ``{"error": {"message", "type",
"param", "code"}}`` with ``code`` equal to the HTTP status. A request validation error has vLLM's
shape (``invalid_request``): type ``"Bad Request"``, param pydantic's location of the first error
(``body.max_tokens``, ``body.prompt.1``, ``body`` for the body itself); a check of vLLM's
engine or of its request models has type ``BadRequestError`` and the parameter vLLM names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
}


QUOTE_CHARS = 100
"""An error message quotes at most this much of a value a client sent."""
MESSAGE_CHARS = 1000
"""No error message is longer: a body that quotes a request whole would be as large as the request."""


def quote(value: object) -> str:
    """``repr(value)``, cut to ``QUOTE_CHARS`` with an ellipsis; ASCII-safe for any string."""
    if isinstance(value, int) and value.bit_length() > 4 * QUOTE_CHARS:  # repr would cost, and be cut anyway
        return f"<{value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


INVALID = "Bad Request"
"""The ``type`` of a request validation error: vLLM writes the status phrase there."""


class APIError(Exception):
    """An error answered with vLLM's error body; ``status`` is the HTTP status and the ``code``,
    ``kind`` the ``type`` when it is not the status's usual one (``INVALID``)."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.kind)


def error_body(status: int, message: str, param: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """vLLM's ``ErrorResponse`` as a plain dict."""
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 3] + "..."
    message = _encodable(message)  # whatever a message quotes, the body can be sent
    param = None if param is None else _encodable(param)
    if kind is None:
        kind = _ERROR_TYPES.get(status, "BadRequestError" if status < 500 else "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _encodable(text: str) -> str:
    """``text`` with any lone surrogate written as its escape, so UTF-8 can encode it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _Request(BaseModel):
    """Unknown fields are accepted and ignored, and known ones coerced the way pydantic's lax mode
    does (``"yes"`` is true, ``"16"`` and ``16.0`` are 16, ``16.5`` is refused), as vLLM's request
    models do."""

    model_config = ConfigDict(extra="allow")


class StreamOptions(_Request):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


TruncatePromptTokens = Annotated[int, Field(ge=-1, le=INT64_MAX)]
TokenId = Annotated[int, Field(ge=0)]
MAX_N = 16384
"""The most choices a request may ask for: vLLM's default ``VLLM_MAX_N_SEQUENCES``."""


def _stream_options_need_stream(data: Any) -> Any:
    """vLLM's check: a truthy ``stream_options`` (``{}`` and null are not) needs a truthy ``stream``."""
    if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
        raise APIError(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    return data


def _logprobs_bounds(data: Any, *names: str) -> Any:
    """vLLM's raw-body checks of each logprobs count in ``names``, in that order: a number, and
    positive or -1. ``data`` is returned as it came (a body that is not an object is left alone)."""
    if isinstance(data, dict):
        for name in names:
            _logprobs_bound(data, name)
    return data


def _logprobs_bound(data: dict[str, Any], name: str) -> None:
    value = data.get(name)
    if value is None:
        return
    if not isinstance(value, (int, float)):
        raise APIError(400, f"`{name}` must be an integer.", name)
    if name == "prompt_logprobs" and data.get("stream") and (value > 0 or value == -1):
        raise APIError(400, "`prompt_logprobs` are not available when `stream=True`.", name)
    if value < 0 and value != -1:
        raise APIError(400, f"`{name}` must be a positive value or -1.", name)


class _GenerationRequest(_Request):
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    truncate_prompt_tokens: TruncatePromptTokens | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    temperature: float | None = None
    top_p: float | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    min_tokens: int = 0
    logit_bias: dict[str, float] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    prompt_logprobs: int | None = None
    user: str | None = None


class CompletionRequest(_GenerationRequest):
    """``POST /v1/completions``. Text or token ids; vLLM's batch forms (a list of either) are
    accepted here and refused later when they hold more than one prompt (one prompt per request)."""

    prompt: list[TokenId] | list[list[TokenId]] | str | list[str] | None = None
    max_tokens: int | None = 16
    echo: bool | None = False
    logprobs: int | None = None

    # vLLM's raw-body checks, in its order of definition (pydantic runs them last to first).
    @model_validator(mode="before")
    @classmethod
    def _null_max_tokens(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_tokens") is None:
            data = {**data, "max_tokens": 16}
        return data

    @model_validator(mode="before")
    @classmethod
    def _logprobs(cls, data: Any) -> Any:
        return _logprobs_bounds(data, "prompt_logprobs", "logprobs")

    @model_validator(mode="before")
    @classmethod
    def _stream_options(cls, data: Any) -> Any:
        return _stream_options_need_stream(data)

    @model_validator(mode="before")
    @classmethod
    def _prompt_given(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("prompt") in (None, ""):
            raise APIError(400, "Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
        return data


TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
"""vLLM's content parts that are text, and the member that holds it."""
MEDIA_PARTS = frozenset(
    {"image_url", "input_image", "image_pil", "image_embeds", "audio_url", "input_audio", "audio_embeds"}
    | {"video_url", "video_embeds", "prompt_embeds"}
)
"""vLLM's content parts that carry media: a text-only model refuses them."""


class ContentPart(_Request):
    """One part of a message's content, checked when the prompt is rendered (``problem``), as vLLM
    checks its parts then: text parts (``TEXT_PARTS``) count their text."""

    type: str
    text: str | None = None

    def body_text(self) -> str | None:
        """The part's text if it is a text part holding one."""
        member = TEXT_PARTS.get(self.type)
        value = self.text if member == "text" else (self.model_extra or {}).get(member or "")
        return value if isinstance(value, str) else None

    def problem(self, model: str) -> str | None:
        """Why vLLM serving the text-only ``model`` refuses this part, or None."""
        if self.type in MEDIA_PARTS:
            return f"{model} is not a multimodal model"
        if self.type == "tool_reference":
            return None
        if self.type not in TEXT_PARTS:
            return f"Unsupported chat content part type: {quote(self.type)}"
        if self.body_text() is None:
            return f"a {quote(self.type)} content part needs its {quote(TEXT_PARTS[self.type])}, a string"
        return None


class ChatMessage(_Request):
    """Any role is accepted, as vLLM accepts custom ones."""

    role: str
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text; text parts contribute theirs."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return " ".join(part.body_text() or "" for part in self.content)


class ChatCompletionRequest(_GenerationRequest):
    """``POST /v1/chat/completions``. An empty ``messages`` passes validation and is refused when
    the chat template would be applied, as in vLLM."""

    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: Annotated[int, BeforeValidator(lambda value: 0 if value is None else value)] = 0

    # vLLM's raw-body checks, in its order of definition (pydantic runs them last to first).
    @model_validator(mode="before")
    @classmethod
    def _stream_options(cls, data: Any) -> Any:
        return _stream_options_need_stream(data)

    @model_validator(mode="before")
    @classmethod
    def _logprobs(cls, data: Any) -> Any:
        if not isinstance(_logprobs_bounds(data, "prompt_logprobs", "top_logprobs"), dict):
            return data
        top = data.get("top_logprobs")
        if top is not None and (top == -1 or top > 0) and not data.get("logprobs"):
            raise APIError(400, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
        return data


class TokenizeCompletionRequest(_Request):
    model: str | None = None
    prompt: str | list[int]
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(_Request):
    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False


class DetokenizeRequest(_Request):
    """``POST /detokenize``."""

    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


MAX_REPORTED_ERRORS = 10
"""A validation error's message lists at most this many of pydantic's errors (vLLM's bound too)."""
_INTERNAL_LOCATIONS = frozenset(
    [
        "function-wrap",
        "function-after",
        "function-before",
        "function-plain",
        "json-or-python",
        "lax-or-strict",
        "chain",
        "default",
        "nullable",
        "tagged-union",
        "union",
        "call",
        "arguments",
        "is-instance",
        "is-subclass",
        "callable",
        "str",
        "int",
        "float",
        "bool",
        "bytes",
        "bytearray",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "complex",
        "none",
        "nonetype",
    ]
)
"""Parts of a pydantic error location that name a schema's kind (a union's branch), not a field."""


def request_param(location: Sequence[int | str]) -> str:
    """The ``param`` of a validation error at ``location`` (relative to the body): the dotted path
    under ``body`` with pydantic's schema-kind parts left out (``body.prompt.1``, not
    ``body.prompt.list[constrained-int].1``), as vLLM writes it."""
    parts = ["body", *(str(part) for part in location)]
    kept = [part for part in parts if not _internal(part)]
    return ".".join(kept or parts)


def _internal(part: str) -> bool:
    return any(mark in part for mark in "[]{}()") or part.lower() in _INTERNAL_LOCATIONS


def invalid_request(errors: Sequence[Any]) -> APIError:
    """vLLM's answer to a body that fails validation: a 400 of type ``INVALID`` whose ``param`` is
    the first error's location and whose message lists the errors (``N validation errors:``, one
    line each, values summarized so a huge input is never echoed). ``errors`` are pydantic's
    error dicts (location relative to the body) or plain strings."""
    first = errors[0] if errors else None
    param = request_param(first.get("loc", ())) if isinstance(first, dict) else None
    count = len(errors)
    label = "error" if count == 1 else "errors"
    lines = [f"  {_describe(error)}" for error in errors[:MAX_REPORTED_ERRORS]]
    if count > MAX_REPORTED_ERRORS:
        lines.append(f"  ...and {count - MAX_REPORTED_ERRORS} more {label}")
    return APIError(400, f"{count} validation {label}:\n" + "\n".join(lines), param, INVALID)


def _describe(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    shown = {key: value for key, value in error.items() if key != "url"}
    if "loc" in shown:
        shown["loc"] = request_param(shown["loc"])
    if "input" in shown:
        shown["input"] = _summary(shown["input"])
    return str(shown)[:MESSAGE_CHARS]


def _summary(value: object) -> object:
    """A bounded stand-in for a value an error quotes: containers are described, not rendered."""
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, (bytes, bytearray)):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, str):
        return value if len(value) <= QUOTE_CHARS else value[:QUOTE_CHARS] + "...[truncated]"
    return quote(value)
