"""The fault server's stream formats: each endpoint's events in the shape vLLM 0.32 emits them
(`/v1/chat/completions`, `/v1/completions`, `/v1/responses`), including the faulty ones
(an error event, a line that is not JSON, an event of the wrong shape) that launch/fault_server.py
injects on demand.
"""

from __future__ import annotations

import json


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


class ChatFormat:
    """`/v1/chat/completions`: a role-only chunk, content deltas, a finish chunk, usage, `[DONE]`."""

    def opening(self, role_first: bool) -> bytes:
        return chunk(delta("", role="assistant")) if role_first else b""

    def token(self, text: str) -> bytes:
        return chunk(delta(text))

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
            out += chunk(
                {
                    "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
                }
            )
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
        if done:
            counts = {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 10 + tokens,
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
