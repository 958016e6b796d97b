"""The one SSE reader: bytes in, chat-stream facts out.

`SseParser` follows the WHATWG event-stream rules that matter for OpenAI-compatible servers:
events end at a blank line, several `data:` lines join with a newline, comments (`:`) and other
fields are ignored, CR LF and LF both end a line. It accepts arbitrary chunks: one line, half an
event, or many events at once.

`apply_chat_event` maps one event payload onto a `StreamTimer` and is the per-chunk hot path:
one `json.loads`, a few dict lookups, no allocation it does not need.
"""

from __future__ import annotations

import json

from slogate.locustfiles.timer import StreamTimer

DONE = b"[DONE]"


class StreamErrorEvent(Exception):
    """The server sent an error object inside the stream (vLLM does this before `[DONE]`)."""


class StreamProtocolError(Exception):
    """An event payload that is not JSON."""


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
                data = value if data is None else data + b"\n" + value
        self._data = data
        return events

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (a cut stream leaves some)."""
        return bool(self._tail) or self._data is not None


def apply_chat_event(payload: bytes, timer: StreamTimer, now: float) -> bool:
    """Apply one `chat.completion.chunk` payload; True at `[DONE]`.

    A token event is a delta with non-empty `content`, `reasoning_content`/`reasoning`, or
    `tool_calls`; the role-only first chunk and the finish chunk are not.
    """
    if payload == DONE:
        return True
    try:
        obj = json.loads(payload)
    except ValueError:
        raise StreamProtocolError(f"event is not JSON: {payload[:80]!r}") from None
    choices = obj.get("choices")
    if choices:
        delta = choices[0].get("delta")
        if delta:
            content = delta.get("content")
            if content or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
                timer.token(now, content)
    elif "error" in obj:
        err = obj["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise StreamErrorEvent(str(message)[:200])
    usage = obj.get("usage")
    if usage:
        details = usage.get("prompt_tokens_details") or {}
        timer.usage(usage.get("prompt_tokens"), usage.get("completion_tokens"), details.get("cached_tokens"))
    return False
