"""Request and error shapes of vLLM's OpenAI-compatible API, as pydantic models.

Fields the server does not act on (temperature, top_p, ...) are accepted and ignored, as vLLM
does. Invariant: every error the server answers with is an ``APIError`` rendered by
``error_body``: ``{"error": {"message", "type", "param", "code"}}`` with ``code`` equal to the
HTTP status.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import ErrorDetails

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


class APIError(Exception):
    """An error answered with vLLM's error body; ``status`` is the HTTP status and the ``code``."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """vLLM's ``ErrorResponse`` as a plain dict."""
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 3] + "..."
    message = _encodable(message)  # whatever a message quotes, the body can be sent
    param = None if param is None else _encodable(param)
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "BadRequestError" if status < 500 else "InternalServerError"),
            "param": param,
            "code": status,
        }
    }


def _encodable(text: str) -> str:
    """``text`` with any lone surrogate written as its escape, so UTF-8 can encode it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Request(BaseModel):
    """Unknown fields are accepted and ignored, as vLLM does; known ones are strictly typed (``"yes"``
    is not a bool, ``"16"`` and ``16.5`` are not ints), as vLLM's request models are."""

    model_config = ConfigDict(extra="allow", strict=True)


class StreamOptions(_Request):
    include_usage: bool = False
    continuous_usage_stats: bool = False


TruncatePromptTokens = Annotated[int, Field(ge=-1)]
MAX_N = 16384
"""The most choices a request may ask for: vLLM's default ``VLLM_MAX_N_SEQUENCES``."""


class _GenerationRequest(_Request):
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    truncate_prompt_tokens: TruncatePromptTokens | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


class CompletionRequest(_GenerationRequest):
    """``POST /v1/completions``. One prompt per request: text or token ids."""

    prompt: str | Annotated[list[int], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = 16
    echo: bool = False


class ContentPart(_Request):
    """One part of a message's content: its ``text`` counts when its type is ``text``; other parts
    (images, audio) are accepted and ignored, as by a text-only model."""

    type: str
    text: str | None = None


class ChatMessage(_Request):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text; text parts contribute their ``text``."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return " ".join(part.text or "" for part in self.content if part.type == "text")


class ChatCompletionRequest(_GenerationRequest):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None


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


def validation_message(errors: Sequence[ErrorDetails]) -> tuple[str, str | None]:
    """A one-line message and the offending parameter, from pydantic's error list."""
    first = errors[0]
    location = [str(part) for part in first.get("loc", ()) if part not in ("body",)]
    param = location[0] if location else None
    where = ".".join(location) or "body"
    value = first.get("input")
    shown = quote(value) if not isinstance(value, (dict, list)) else type(value).__name__
    message = f"{where[:QUOTE_CHARS]}: {first.get('msg', 'invalid value')} (got {shown})"
    if len(errors) > 1:
        message += f"; and {len(errors) - 1} more error(s)"
    return message, param
