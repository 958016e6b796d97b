"""The OpenAI-compatible endpoints a user can stream from, defined once: where each lives, how a
conversation (a list of chat messages) becomes its request body, and how each of its stream events
maps onto a `StreamTimer`.

The workload builds messages; the endpoint turns them into a body; the user sends it to `path`
and feeds every event payload to `apply_event` (the per-chunk hot path) until it returns True.

- `chat`: `/v1/chat/completions`, the messages as they are.
- `completions`: `/v1/completions`, the conversation as text (`completion_prompt`).
- `responses`: `/v1/responses`, the messages as `input` items (system included, so vLLM renders
  the same chat template as for chat, and the same prompt tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slogate.locustfiles.load.sse import apply_chat_event, apply_completions_event, apply_responses_event
from slogate.locustfiles.load.timer import StreamTimer

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


# Role labels of `completion_prompt`; an assistant's text follows its label with no space, as it
# was streamed after the prompt's closing cue.
COMPLETION_LABELS = {
    "system": "System: ",
    "developer": "Developer: ",
    "user": "User: ",
    "tool": "Tool: ",
    "assistant": "Assistant:",
}
COMPLETION_CUE = "Assistant:"


def completion_prompt(messages: Messages) -> str:
    """The conversation as one text prompt: each message as a role-labelled paragraph
    (`System: ...`, `User: ...`, `Assistant:...`, each followed by a blank line), then the cue
    `Assistant:` for the answer.

    Prefix-preserving: the answer streamed after turn k's prompt continues its closing cue, so
    turn k+1's prompt starts with turn k's prompt + answer, byte for byte, and a server with
    prefix caching reuses the whole history.
    """
    return "".join(f"{COMPLETION_LABELS[m['role']]}{_text(m['content'])}\n\n" for m in messages) + COMPLETION_CUE


def _text(content: str | list[dict[str, Any]]) -> str:
    """A message's text; a dataset's list of content parts (`{"type": "text", "text": ...}`, as the
    chat API takes them) as its text parts joined: a text prompt has no place for the others."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def completions_body(
    model: str, messages: Messages, max_tokens: int, temperature: float, ignore_eos: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": completion_prompt(messages),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def responses_input(messages: Messages) -> Messages:
    """Chat messages as the Responses API's `input`: text content as it is; content parts (images,
    a dataset's parts) as its own kinds, `input_text` and `input_image` (a URL or a data URI)."""
    return [m if isinstance(m["content"], str) else {**m, "content": _input_parts(m["content"])} for m in messages]


def _input_parts(parts: Any) -> list[Any]:
    out = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            part = {"type": "input_text", "text": part.get("text", "")}
        elif kind == "image_url":
            image = part.get("image_url")
            part = {"type": "input_image", "image_url": image.get("url") if isinstance(image, dict) else image}
        out.append(part)
    return out


def responses_body(
    model: str, messages: Messages, max_tokens: int, temperature: float, ignore_eos: bool
) -> dict[str, Any]:
    """Usage comes with `response.completed` on its own: responses has no `stream_options`.
    `store: false`: a load test must not leave every answer stored on the server (a vLLM started
    with VLLM_ENABLE_RESPONSES_API_STORE=1 keeps each stored response in memory)."""
    body: dict[str, Any] = {
        "model": model,
        "input": responses_input(messages),
        "max_output_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "store": False,
    }
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM 0.32 takes it here too (ResponsesRequest.ignore_eos)
    return body


CHAT = Endpoint("chat", "/v1/chat/completions", chat_body, apply_chat_event)
COMPLETIONS = Endpoint("completions", "/v1/completions", completions_body, apply_completions_event)
RESPONSES = Endpoint("responses", "/v1/responses", responses_body, apply_responses_event)
ENDPOINTS: dict[str, Endpoint] = {e.name: e for e in (CHAT, COMPLETIONS, RESPONSES)}
