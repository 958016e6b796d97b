"""What one streamed request produced, as measured by a load-generating user."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# Request classes, defined once. Every request is `shared` (its system prompt is one of a few
# prefixes the server's cache can reuse) or `unique`; `all` is every request together.
ALL, SHARED, UNIQUE = "all", "shared", "unique"
PREFIX_CLASSES = (SHARED, UNIQUE)


class ErrorKind(StrEnum):
    """Why a request failed; reports count failures per kind."""

    CONNECT = "connect"  # refused, reset before a response, DNS
    TIMEOUT = "timeout"  # no byte within the request timeout
    HTTP_429 = "http_429"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    STREAM_ERROR = "stream_error"  # the server sent an error event mid-stream
    TRUNCATED = "truncated"  # the stream ended without `data: [DONE]`
    NO_CONTENT = "no_content"  # a complete stream that carried no token
    PROTOCOL = "protocol"  # unparseable event
    DROPPED = "dropped"  # open loop: not sent, every in-flight slot was busy at its scheduled time
    UNFINISHED = "unfinished"  # still in flight when the run stopped (past --stop-timeout)


def http_error_kind(status: int) -> ErrorKind:
    if status == 429:
        return ErrorKind.HTTP_429
    return ErrorKind.HTTP_5XX if status >= 500 else ErrorKind.HTTP_4XX


@dataclass(slots=True)
class RequestRecord:
    """Timings in microseconds from just before the request was sent.

    `ttft_us` is the first event that carries content, reasoning or a tool call; a role-only
    first chunk does not count. `itl_us` holds the gaps between consecutive token events.
    """

    request_class: str
    started_at: float  # wall clock (time.time()) at send, for warm-up and the run window
    e2e_us: int
    ttft_us: int | None = None
    itl_us: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    send_lag_us: int | None = None  # open loop: actual send time minus scheduled send time

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def tpot_us(self) -> int | None:
        """vLLM's definition: (e2e - ttft) / (output tokens - 1)."""
        n = self.completion_tokens
        if self.ttft_us is None or not n or n < 2:
            return None
        return round((self.e2e_us - self.ttft_us) / (n - 1))
