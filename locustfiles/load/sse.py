"""The one SSE reader: bytes in, stream facts out, for each endpoint's event format.

`SseParser` follows the WHATWG event-stream rules that matter for OpenAI-compatible servers:
events end at a blank line, several `data:` lines join with a newline, comments (`:`) and other
fields are ignored, CR LF and LF both end a line. It accepts arbitrary chunks: one line, half an
event, or many events at once. Its memory is bounded: a line or an event's data over
`MAX_LINE_BYTES` is a `StreamProtocolError` (no event is near that: a vLLM token event is a few
hundred bytes, a few KiB with logprobs), however long the server's line.

`apply_chat_event`, `apply_completions_event` and `apply_responses_event` each map one event
payload of their endpoint onto a `StreamTimer` and are the per-chunk hot path: one `json.loads`,
a few dict lookups, no allocation they do not need. They return True at the stream's end and
raise `StreamErrorEvent` / `StreamProtocolError`, so every endpoint's failures count by the same
kinds.
"""

from __future__ import annotations

import json

from slogate.locustfiles.load.timer import StreamTimer

DONE = b"[DONE]"
MAX_LINE_BYTES = 1 << 20  # 1 MiB: the longest line, or event data, a stream may send
EVENT_STREAM = "text/event-stream"


class StreamErrorEvent(Exception):
    """The server sent an error object inside the stream (vLLM does this before `[DONE]`)."""


class StreamProtocolError(Exception):
    """An event payload the client cannot read: not JSON, not an object, not of its endpoint's
    shape, with token text that is not a string or a usage count that is not a count."""


class SseParser:
    __slots__ = ("_data", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """The `data` payloads of every event completed by `chunk`, in order."""
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        if len(chunk) > MAX_LINE_BYTES:  # one comparison per chunk; the lines are measured only past it
            _check_lengths([self._tail, *lines])
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data is not None:
                    events.append(data)
                    data = None
            elif line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                if data is None:
                    data = value
                else:  # an event of several data lines: rare, so measured here
                    data = data + b"\n" + value
                    _check_lengths([data])
        self._data = data
        return events

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (a cut stream leaves some)."""
        return bool(self._tail) or self._data is not None


def _check_lengths(pieces: list[bytes]) -> None:
    for piece in pieces:
        if len(piece) > MAX_LINE_BYTES:
            raise line_too_long()


def line_too_long() -> StreamProtocolError:
    return StreamProtocolError(f"an SSE line or event longer than {MAX_LINE_BYTES >> 20} MiB (memory stays bounded)")


def not_an_event_stream(content_type: object) -> StreamProtocolError | None:
    """The failure of a 200 answer to a stream request whose Content-Type is not
    `text/event-stream` (a server or proxy that ignored `stream: true`, an HTML error page), or
    None. Without a Content-Type the body is read as events: it fails as what it turns out to be."""
    if not content_type:
        return None
    media = str(content_type).split(";", 1)[0].strip().lower()
    if media == EVENT_STREAM:
        return None
    shown = " ".join(str(content_type).split())[:80]
    return StreamProtocolError(f"HTTP 200 with Content-Type {shown}, not {EVENT_STREAM}")


def apply_chat_event(payload: bytes, timer: StreamTimer, now: float) -> bool:
    """Apply one `chat.completion.chunk` payload; True at `[DONE]`.

    A token event is a delta with non-empty `content`, `reasoning_content`/`reasoning`, or
    `tool_calls`; the role-only first chunk and the finish chunk are not. Reasoning (vLLM 0.32:
    `reasoning`; before it and other servers: `reasoning_content`) is timed apart from the output.
    """
    if payload == DONE:
        return True
    obj = _loads(payload)
    choices = obj.get("choices")
    if choices:
        delta = choices[0].get("delta")
        if delta:
            content = delta.get("content")
            if content:
                if len(delta) > 1 and (delta.get("reasoning") or delta.get("reasoning_content")):
                    timer.reasoned(now)  # the event that ends the reasoning may carry its last piece
                timer.token(now, checked_text(content))
            elif delta.get("reasoning") or delta.get("reasoning_content"):
                if delta.get("tool_calls"):
                    timer.reasoned(now)
                    timer.token(now)
                else:
                    timer.reasoning(now)
            elif delta.get("tool_calls"):
                timer.token(now)
            if timer.output is not None:  # --tools: the calls' names and arguments, as streamed
                timer.output.tool_calls(now, delta.get("tool_calls"))
    elif "error" in obj:
        raise _stream_error(obj["error"])
    usage = obj.get("usage")
    if usage:
        _apply_usage(usage, timer)
    return False


def apply_completions_event(payload: bytes, timer: StreamTimer, now: float) -> bool:
    """Apply one `text_completion` chunk of `/v1/completions`; True at `[DONE]`.

    A token event is a choice with non-empty `text`; usage and errors come as in chat.
    """
    if payload == DONE:
        return True
    obj = _loads(payload)
    choices = obj.get("choices")
    if choices:
        text = choices[0].get("text")
        if text:
            timer.token(now, checked_text(text))
    elif "error" in obj:
        raise _stream_error(obj["error"])
    usage = obj.get("usage")
    if usage:
        _apply_usage(usage, timer)
    return False


# Responses events whose non-empty `delta` is a token: the answer text, reasoning, a tool call.
RESPONSES_OUTPUT_TEXT = "response.output_text.delta"
RESPONSES_CALL_ARGUMENTS = "response.function_call_arguments.delta"
RESPONSES_ITEM_DONE = "response.output_item.done"  # a function call's, whole: its name and arguments
RESPONSES_REASONING_EVENTS = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
RESPONSES_TOKEN_EVENTS = frozenset(
    {
        RESPONSES_OUTPUT_TEXT,
        *RESPONSES_REASONING_EVENTS,
        RESPONSES_CALL_ARGUMENTS,
        "response.custom_tool_call_input.delta",
    }
)
# The events that end a responses stream: vLLM 0.32 always ends with `response.completed` (status
# "incomplete" at max_output_tokens) and sends no `[DONE]`; OpenAI ends a cut-short answer with
# `response.incomplete`.
RESPONSES_END_EVENTS = frozenset({"response.completed", "response.incomplete"})


def apply_responses_event(payload: bytes, timer: StreamTimer, now: float) -> bool:
    """Apply one `/v1/responses` stream event (its `type` is in the JSON); True at its end event.

    A token event is one of `RESPONSES_TOKEN_EVENTS` with a non-empty `delta`; `response.created`,
    `output_item.added`, `content_part.added` and the `.done` events are not. Usage comes with the
    end event (`response.usage`). An `error` event or `response.failed` is a stream error. With
    `--tools`, a function call's arguments deltas time it and its `output_item.done` gives it whole.
    """
    obj = _loads(payload)
    kind = obj.get("type")
    if kind in RESPONSES_TOKEN_EVENTS:
        delta = obj.get("delta")
        if delta:
            if kind == RESPONSES_OUTPUT_TEXT:
                timer.token(now, checked_text(delta))
            elif kind in RESPONSES_REASONING_EVENTS:
                timer.reasoning(now)
            else:
                timer.token(now)
                if kind == RESPONSES_CALL_ARGUMENTS and timer.output is not None:
                    timer.output.arguments_delta(now, obj.get("item_id"))
        return False
    if kind in RESPONSES_END_EVENTS:
        usage = (obj.get("response") or {}).get("usage")
        if usage:
            _apply_usage(usage, timer, "input_tokens", "output_tokens", "input_tokens_details", "output_tokens_details")
        return True
    if kind == RESPONSES_ITEM_DONE and timer.output is not None and obj["item"].get("type") == "function_call":
        timer.output.whole_call(obj["item"])
        return False
    if kind == "error":
        raise _stream_error(obj)
    if kind == "response.failed":
        raise _stream_error((obj.get("response") or {}).get("error") or "response.failed")
    if kind is None and "error" in obj:
        # vLLM's error object, as its chat and completions streams send it; its responses stream
        # means to send it on a generation error too (0.32 fails to, and cuts the stream instead).
        raise _stream_error(obj["error"])
    return False


# What an event applier raises, besides `StreamProtocolError`, for a JSON object of another shape
# than its endpoint's (`{"choices": [null]}`, `{"choices": {}}`). The read loop catches these
# around `apply_event` alone (a try block costs nothing until it raises) and turns them into
# `StreamProtocolError` with `unexpected_shape`, so a bug elsewhere in the loop is not miscounted.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError)


def unexpected_shape(e: Exception) -> StreamProtocolError:
    return StreamProtocolError(f"event of unexpected shape: {type(e).__name__}: {e}")


def _loads(payload: bytes) -> dict:
    try:
        event = json.loads(payload)
    except ValueError:
        raise StreamProtocolError(f"event is not JSON: {payload[:80]!r}") from None
    if not isinstance(event, dict):
        raise StreamProtocolError(f"event is not a JSON object: {payload[:80]!r}")
    return event


def _stream_error(err: object) -> StreamErrorEvent:
    message = err.get("message") if isinstance(err, dict) else err
    return StreamErrorEvent(str(message)[:200])


def _apply_usage(
    usage: dict,
    timer: StreamTimer,
    prompt_key: str = "prompt_tokens",
    completion_key: str = "completion_tokens",
    details_key: str = "prompt_tokens_details",
    output_details_key: str = "completion_tokens_details",
) -> None:
    """A `usage` object: chat and completions name its fields as the defaults, responses as
    `input_tokens`, `output_tokens`, `input_tokens_details`, `output_tokens_details`. A count that
    is not a non-negative integer (`"5"`, `-1`, `2.5`) is a protocol error, not a figure carried
    into the report."""
    details = usage.get(details_key) or {}
    reasoning = (usage.get(output_details_key) or {}).get("reasoning_tokens")
    timer.usage(
        *checked_counts(usage.get(prompt_key), usage.get(completion_key), details.get("cached_tokens"), reasoning)
    )


def checked_counts(*counts: object) -> tuple[int | None, ...]:
    """Token counts as the server reported them; StreamProtocolError for one that is not a
    non-negative integer (or absent)."""
    for value in counts:
        if value is not None and (type(value) is not int or value < 0):
            raise StreamProtocolError(f"usage count is not a non-negative integer: {value!r}")
    return counts  # type: ignore[return-value]


def checked_text(value: object) -> str | None:
    """A token event's text (`content`, `text`, `delta`); StreamProtocolError when it is not a string."""
    if value is not None and type(value) is not str:
        raise StreamProtocolError(f"token text is not a string: {value!r:.80}")
    return value
