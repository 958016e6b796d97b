"""The fault server's stream formats: each endpoint's events in the shape vLLM 0.32 emits them
(`/v1/chat/completions`, `/v1/completions`, `/v1/responses`), including the faulty ones
(an error event, a line that is not JSON, an event of the wrong shape) that launch/fault_server.py
injects on demand.

Scripted output (`output_piece`, for --tools and --response-format: docs/workloads/tools.md): with
`json=1` the content chunks carry, in pieces, a JSON answer that matches locustfiles/data/schema.json
(`{"city": "Paris", "days": 3}`), with `json=2` one that is not JSON (cut short), with `json=3` JSON
that does not match it (`{"city": 3, "days": 3}`); with `tool_call=1` the same pieces are the arguments of a
call of `get_weather` (locustfiles/data/tools.json): chat's `tool_calls` deltas, responses'
`response.function_call_arguments.delta` events (completions has no tool calls: answer text).
The answer's `tokens` chunks split the JSON text (at most its length in chunks).
"""

from __future__ import annotations

import asyncio
import json
import os


def chunk(obj: dict | str, event: str | None = None) -> bytes:
    """One SSE event as one HTTP chunk; `event` adds an `event:` line (responses names each)."""
    text = obj if isinstance(obj, str) else json.dumps(obj)
    data = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
    raw = data.encode()
    return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"


def delta(content: str | None = None, role: str | None = None) -> dict:
    d: dict = {}
    if role:
        d["role"] = role
    if content is not None:
        d["content"] = content
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}


ERROR = {"message": "injected stream error", "code": 500}
JSON_OUTPUTS = {1: '{"city": "Paris", "days": 3}', 2: '{"city": "Paris", "days": ', 3: '{"city": 3, "days": 3}'}
TOOL_NAME = "get_weather"
# Ids /v1/models lists besides `default`, comma-separated (LoRA adapters for --adapters: the server
# answers every model name alike, so that a test can name adapters: docs/workloads/adapters.md).
SERVED_MODELS_ENV = "SLOGATE_FAULT_MODELS"


def served_models() -> dict:
    """The fault server's `/v1/models` answer: `default` and the ids in `SERVED_MODELS_ENV`."""
    extra = [name for name in os.environ.get(SERVED_MODELS_ENV, "").split(",") if name]
    return {"object": "list", "data": [{"id": name} for name in ("default", *extra)]}


def image_parts(req: dict) -> int:
    """How many images a request carries: chat `image_url` parts of its `messages`, responses
    `input_image` parts of its `input`."""
    turns = req.get("messages") or req.get("input")
    if not isinstance(turns, list):
        return 0
    parts = [p for t in turns if isinstance(t, dict) and isinstance(t.get("content"), list) for p in t["content"]]
    return sum(1 for p in parts if isinstance(p, dict) and p.get("type") in ("image_url", "input_image"))


def output_piece(fmt: StreamFormat, i: int, b: dict[str, float]) -> bytes:
    """Content chunk `i` of a stream scripted by `b`: ` tok<i>`, or the i-th piece of a scripted JSON
    answer (`json=`) or tool call (`tool_call=1`)."""
    if "json" not in b and not b.get("tool_call"):
        return fmt.token(f" tok{i}")
    text = JSON_OUTPUTS[int(b.get("json", 1))]
    size = -(-len(text) // max(1, int(b["tokens"])))
    piece = text[i * size : (i + 1) * size]
    return fmt.tool_call(i, piece) if b.get("tool_call") else fmt.token(piece)


async def think(writer: asyncio.StreamWriter, fmt: StreamFormat, b: dict[str, float]) -> None:
    """The wait before the first token (`ttft_ms`), then `reasoning_tokens=N` reasoning deltas over
    `reasoning_ms=R` (one every R/N ms): the first content chunk comes R ms after the first reasoning
    delta, so that TTFO = TTFT + R (docs/workloads/reasoning.md). Chat's are `reasoning` deltas,
    responses' `response.reasoning_text.delta` events, both counted in the usage
    (`completion_tokens_details.reasoning_tokens`, responses' `output_tokens_details`); completions'
    are plain text (vLLM has no reasoning parser there), left out of its usage."""
    await asyncio.sleep(b["ttft_ms"] / 1000)
    n = int(b.get("reasoning_tokens", 0))
    for i in range(n):
        writer.write(fmt.reasoning(f" thought{i}"))
        await writer.drain()
        await asyncio.sleep(b.get("reasoning_ms", 0.0) / 1000 / n)


class ChatFormat:
    """`/v1/chat/completions`: a role-only chunk, content deltas, a finish chunk, usage, `[DONE]`."""

    reasoned = 0  # the reasoning chunks sent (`think`), counted in the usage

    def opening(self, role_first: bool) -> bytes:
        return chunk(delta("", role="assistant")) if role_first else b""

    def reasoning(self, text: str) -> bytes:
        """A reasoning delta, as vLLM 0.32's reasoning parsers stream it (`reasoning`, no `content`)."""
        self.reasoned += 1
        choice = {"index": 0, "delta": {"reasoning": text}, "logprobs": None, "finish_reason": None}
        return chunk({"id": "x", "object": "chat.completion.chunk", "choices": [choice]})

    def token(self, text: str) -> bytes:
        return chunk(delta(text))

    def tool_call(self, i: int, arguments: str) -> bytes:
        """A piece of a tool call's arguments, as vLLM's tool parsers stream them: the first carries its
        id, type and function name."""
        call: dict = {"index": 0, "function": {"arguments": arguments}}
        if i == 0:
            call |= {"id": "chatcmpl-tool-x", "type": "function"}
            call["function"]["name"] = TOOL_NAME
        choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}
        return chunk({"id": "x", "object": "chat.completion.chunk", "choices": [choice]})

    def error(self) -> bytes:
        return chunk({"error": ERROR})

    def bad_json(self) -> bytes:
        return chunk('{"choices": [{"index": 0, "delta": {"content": "trunc')

    def bad_shape(self) -> bytes:
        return chunk({"choices": [None]})

    def finish(self) -> bytes:
        return chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})

    def closing(self, tokens: int, usage: bool, done: bool, errored: bool) -> bytes:
        """What ends the stream (after an error event too, as vLLM does)."""
        out = self.finish()
        if usage:
            tokens += self.reasoned
            counts = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
            if self.reasoned:  # vLLM gives the details with a reasoning parser only
                counts["completion_tokens_details"] = {"reasoning_tokens": self.reasoned}
            out += chunk({"choices": [], "usage": counts})
        return out + (chunk("[DONE]") if done else b"")

    def whole(self) -> dict:
        return {"choices": [{"message": {"content": "x"}}]}


class CompletionsFormat(ChatFormat):
    """`/v1/completions`: `text_completion` chunks with `text`, then as chat (no role chunk: an
    empty-text chunk opens instead, as vLLM sends while a character is incomplete)."""

    def opening(self, role_first: bool) -> bytes:
        return self.token("") if role_first else b""

    def token(self, text: str) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
        return chunk({"id": "x", "object": "text_completion", "choices": [choice]})

    def reasoning(self, text: str) -> bytes:
        return self.token(text)  # completions has no reasoning parser: the model's text as it is

    def tool_call(self, i: int, arguments: str) -> bytes:
        return self.token(arguments)  # completions has no tool calls

    def bad_json(self) -> bytes:
        return chunk('{"choices": [{"index": 0, "text": "trunc')

    def finish(self) -> bytes:
        return chunk({"choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}]})

    def whole(self) -> dict:
        return {"choices": [{"text": "x"}]}


class ResponsesFormat:
    """`/v1/responses`: typed events, each with its `event:` line and a `sequence_number`:
    `response.created`, `response.in_progress`, `response.output_item.added`,
    `response.content_part.added`, `response.output_text.delta`s, the `.done` events, and
    `response.completed` (usage in `response.usage`), the end: vLLM 0.32 sends no `[DONE]`.
    An error is OpenAI's `error` event, after which the body ends."""

    def __init__(self) -> None:
        self.sequence = 0
        self.opened = False  # the output item and its content part
        self.text = ""
        self.reasoned = 0  # reasoning deltas sent (`think`)
        self.arguments: str | None = None  # a tool call's, as streamed (`tool_call`)

    def event(self, kind: str, **fields: object) -> bytes:
        obj = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return chunk(obj, event=kind)

    def response(self, status: str, usage: dict | None = None) -> dict:
        return {"id": "resp_x", "object": "response", "model": "x", "status": status, "usage": usage}

    def open_item(self) -> bytes:
        self.opened = True
        item = {"id": "msg_x", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        return self.event("response.output_item.added", output_index=0, item=item) + self.event(
            "response.content_part.added", item_id="msg_x", output_index=0, content_index=0, part=part
        )

    def opening(self, role_first: bool) -> bytes:
        out = self.event("response.created", response=self.response("in_progress"))
        out += self.event("response.in_progress", response=self.response("in_progress"))
        return out + (self.open_item() if role_first else b"")

    def token(self, text: str) -> bytes:
        out = b"" if self.opened else self.open_item()
        self.text += text
        return out + self.event(
            "response.output_text.delta", item_id="msg_x", output_index=0, content_index=0, delta=text, logprobs=[]
        )

    def reasoning(self, text: str) -> bytes:
        """A `response.reasoning_text.delta`, its reasoning item announced before the first."""
        out = b""
        if not self.reasoned:
            item = {"id": "rs_x", "type": "reasoning", "summary": [], "status": "in_progress"}
            out = self.event("response.output_item.added", output_index=0, item=item)
            part = {"text": "", "type": "reasoning_text"}
            out += self.event("response.content_part.added", item_id="rs_x", output_index=0, content_index=0, part=part)
        self.reasoned += 1
        ids = {"item_id": "rs_x", "output_index": 0, "content_index": 0}
        return out + self.event("response.reasoning_text.delta", **ids, delta=text)

    def call_item(self, status: str) -> dict:
        """The function call's output item: announced empty, done with all its arguments."""
        arguments = self.arguments if status == "completed" else ""
        item = {"id": "fc_x", "type": "function_call", "call_id": "call_x", "name": TOOL_NAME}
        return item | {"arguments": arguments, "status": status}

    def tool_call(self, i: int, arguments: str) -> bytes:
        """A function call's arguments delta, its item announced before the first (vLLM 0.32's shape)."""
        out = b""
        if self.arguments is None:
            self.arguments = ""
            out = self.event("response.output_item.added", output_index=0, item=self.call_item("in_progress"))
        self.arguments += arguments
        kind = "response.function_call_arguments.delta"
        return out + self.event(kind, item_id="fc_x", output_index=0, delta=arguments)

    def error(self) -> bytes:
        return self.event("error", code="server_error", message=ERROR["message"], param=None)

    def bad_json(self) -> bytes:
        return chunk('{"type": "response.output_text.delta", "delta": "trunc', event="response.output_text.delta")

    def bad_shape(self) -> bytes:
        return chunk({"type": "response.completed", "response": "x"}, event="response.completed")

    def closing(self, tokens: int, usage: bool, done: bool, errored: bool) -> bytes:
        if errored:
            return b""
        out = b""
        if self.opened:
            part = {"type": "output_text", "text": self.text, "annotations": []}
            item = {"id": "msg_x", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
            ids = {"item_id": "msg_x", "output_index": 0, "content_index": 0}
            out += self.event("response.output_text.done", **ids, text=self.text, logprobs=[])
            out += self.event("response.content_part.done", **ids, part=part)
            out += self.event("response.output_item.done", output_index=0, item=item)
        if self.arguments is not None:  # the call whole, in its `.done` events
            ids = {"item_id": "fc_x", "output_index": 0}
            out += self.event("response.function_call_arguments.done", **ids, arguments=self.arguments, name=TOOL_NAME)
            out += self.event("response.output_item.done", output_index=0, item=self.call_item("completed"))
        if done:
            counts = {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": tokens + self.reasoned,
                "output_tokens_details": {"reasoning_tokens": self.reasoned},
                "total_tokens": 10 + tokens + self.reasoned,
            }
            out += self.event("response.completed", response=self.response("completed", counts if usage else None))
        return out

    def whole(self) -> dict:
        return {
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "x"}]}],
        }


StreamFormat = ChatFormat | ResponsesFormat
FORMATS: dict[str, type[StreamFormat]] = {
    "/v1/chat/completions": ChatFormat,
    "/v1/completions": CompletionsFormat,
    "/v1/responses": ResponsesFormat,
}
