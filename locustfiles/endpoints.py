"""The OpenAI-compatible endpoints a user can stream from, defined once: where each lives, how a
conversation (a list of chat messages) becomes its request body, and how each of its stream events
maps onto a `StreamTimer`.

The workload builds messages; the endpoint turns them into a body; the user sends it to `path`
and feeds every event payload to `apply_event` (the per-chunk hot path) until it returns True.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slogate.locustfiles.sse import apply_chat_event
from slogate.locustfiles.timer import StreamTimer

Messages = list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    path: str  # below the target URL's path
    # (model, messages, max_tokens, temperature, ignore_eos) -> a streaming request body
    body: Callable[[str, Messages, int, float, bool], dict[str, Any]]
    # (payload, timer, now) -> True at the stream's end; raises sse.StreamErrorEvent / StreamProtocolError
    apply_event: Callable[[bytes, StreamTimer, float], bool]


def chat_body(model: str, messages: Messages, max_tokens: int, temperature: float, ignore_eos: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM extension: fixed output length for comparable runs
    return body


CHAT = Endpoint("chat", "/v1/chat/completions", chat_body, apply_chat_event)
ENDPOINTS: dict[str, Endpoint] = {e.name: e for e in (CHAT,)}
