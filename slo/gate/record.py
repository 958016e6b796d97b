"""What one streamed request produced, as measured by a load-generating user."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

# Request tags, defined once; an SLO names one as its `class`. Every request is `shared` (its system
# prompt is one of a few prefixes the server's cache can reuse) or `unique`: its request class,
# which partitions the requests (`all` is every class merged). A conversation's turns also carry
# `first_turn` or `follow_up`, and their turn index: `turn_1` .. `turn_8`, then `turn_9+` (a
# bounded set, so memory stays bounded however long a conversation is).
ALL, SHARED, UNIQUE = "all", "shared", "unique"
PREFIX_CLASSES = (SHARED, UNIQUE)
FIRST_TURN, FOLLOW_UP = "first_turn", "follow_up"
TURN_TAGS_UP_TO = 8
# A trace replay's request classes: whether the request's first block was in an earlier request.
PREFIX_HIT, PREFIX_MISS = "prefix_hit", "prefix_miss"
# slogate's own request classes: each request is in exactly one (a dataset's classes are its own).
REQUEST_CLASSES = (*PREFIX_CLASSES, PREFIX_HIT, PREFIX_MISS)


IMAGES_TAG = "images_{}"  # a request whose messages carry this many image parts (--images, datasets)
ADAPTER_TAG_PREFIX = "adapter_"  # a request sent to a LoRA adapter: adapter_<name> (--adapters)


def images_tag(n: int) -> str:
    """The tag of a request with `n` image parts."""
    return IMAGES_TAG.format(n)


def turn_tag(turn: int) -> str:
    """The tag of a conversation's turn `turn` (1-based)."""
    return f"turn_{turn}" if turn <= TURN_TAGS_UP_TO else f"turn_{TURN_TAGS_UP_TO + 1}+"


def conversation_tags(turn: int) -> tuple[str, str]:
    """The tags a conversation's turn carries besides its request class."""
    return (FIRST_TURN if turn == 1 else FOLLOW_UP), turn_tag(turn)


def is_conversation_tag(name: str) -> bool:
    """Whether `name` is a conversation tag (`first_turn`, `follow_up`, `turn_<k>`), not a request class."""
    return name in conversation_tag_names(TURN_TAGS_UP_TO + 1)


def file_class(value: object) -> str | None:
    """A dataset entry's `class` (its request class) or a trace line's (a tag beside its
    `prefix_hit`/`prefix_miss` class), checked: a non-empty string that is none of the names
    slogate gives requests itself (it would merge with them). ValueError, one line, otherwise;
    None when absent."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'class' must be a non-empty string, got {value!r}")
    ours = value in (ALL, *REQUEST_CLASSES) or is_conversation_tag(value) or _is_images_tag(value)
    if ours or value.startswith(ADAPTER_TAG_PREFIX):
        raise ValueError(f"'class' {value!r} is a name slogate gives requests itself; choose another")
    return value


def _is_images_tag(name: str) -> bool:
    prefix = IMAGES_TAG.format("")
    return name.startswith(prefix) and name[len(prefix) :].isdigit()


def conversation_tag_names(max_turns: int) -> list[str]:
    """Every conversation tag that conversations of up to `max_turns` turns can produce."""
    if max_turns < 2:
        return []
    return [FIRST_TURN, FOLLOW_UP, *(turn_tag(t) for t in range(1, min(max_turns, TURN_TAGS_UP_TO + 1) + 1))]


class ErrorKind(StrEnum):
    """Why a request failed; reports count failures per kind."""

    CONNECT = "connect"  # refused, reset before a response, DNS
    TLS = "tls"  # the TLS handshake failed: most often the server's certificate does not verify
    TIMEOUT = "timeout"  # not done within the request timeout (total: a stall or a trickle)
    HTTP_429 = "http_429"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    STREAM_ERROR = "stream_error"  # the server sent an error event mid-stream
    TRUNCATED = "truncated"  # the stream ended without `data: [DONE]`
    NO_CONTENT = "no_content"  # a complete stream that carried no token
    PROTOCOL = "protocol"  # unparseable event, a line over 1 MiB, a 200 that is not an event stream
    DROPPED = "dropped"  # open loop: not sent, every in-flight slot was busy at its scheduled time
    UNFINISHED = "unfinished"  # still in flight when the run stopped (past --stop-timeout)
    # --cancel-fraction: the client hung up mid-stream on purpose (a user pressing stop); not a
    # failure: counted apart, its TTFT kept (slo/gate/metrics.py)
    CANCELLED = "cancelled"
    # --tools / --response-format: the final tool-call arguments or answer are not JSON of the schema
    INVALID_OUTPUT = "invalid_output"


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

    request_class: str  # shared or unique: the tag that partitions the requests
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
    tags: tuple[str, ...] = ()  # the request's other tags (conversation turns), each counted on its own
    # Reasoning (docs/workloads/reasoning.md): the first output (answer or tool call) token after
    # any reasoning (== ttft_us without reasoning; None: none came); from the first reasoning token
    # to the first output token, or to the end (None: no reasoning); the reasoning tokens (usage's
    # `completion_tokens_details.reasoning_tokens`, or the reasoning token events where more).
    ttfo_us: int | None = None
    reasoning_us: int | None = None
    reasoning_tokens: int = 0
    # --tools (docs/workloads/tools.md): the first tool-call token event (None: no tool call came)
    ttftc_us: int | None = None

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
