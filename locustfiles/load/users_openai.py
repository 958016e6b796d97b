"""A user built on the official `openai` SDK (streaming), for teams that want their app's client.

It measures the same things as `ChatStreamUser` with the SDK's own HTTP stack and parsing, which
costs several times more CPU per chunk (pydantic objects per event): give it more processes.
`max_retries=0`: the SDK would otherwise retry failures silently and hide them from the gate.
Failures count by the same kinds as the raw user's: the SDK's TLS context is the process's
(--ca-bundle) and a failed handshake is `tls`; its lines are bounded (`bounds.bounded_bytes`), a
200 that is not an event stream and an event that is not JSON are `protocol`, and
`--request-timeout` bounds the whole request (`ChatUser._report`).
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import openai
from locust import task
from openai.types.chat import ChatCompletionChunk
from slogate.locustfiles.load.bounds import bounded_bytes
from slogate.locustfiles.load.sse import (
    SHAPE_ERRORS,
    StreamProtocolError,
    checked_counts,
    checked_text,
    not_an_event_stream,
    unexpected_shape,
)
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.users import ChatUser, start_timer
from slogate.slo.gate.record import ErrorKind, RequestRecord, http_error_kind
from slogate.slo.plugin import target

_NON_STANDARD_FIELDS = ("ignore_eos",)  # vLLM extensions the SDK only sends through extra_body


_SAMPLE_CHUNK = {
    "id": "warm-up",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}],
}


@functools.cache
def _warm_sdk() -> None:
    """Once per process, off the clock: the SDK builds its chunk models' pydantic schemas on the
    first chunk it parses (~10 ms), which would land in the first stream's TTFT or ITL."""
    ChatCompletionChunk.model_validate(_SAMPLE_CHUNK)


class OpenAIChatUser(ChatUser):
    def on_start(self) -> None:
        super().on_start()
        self.connect()

    def connect(self) -> None:
        """(Re)create the SDK client for `base_url`."""
        self.client = openai.OpenAI(
            base_url=self.base_url + "/v1",
            api_key=target.api_key() or "EMPTY",
            default_headers=self.auth_headers,  # overrides the SDK's Bearer header when the URL had credentials
            max_retries=0,
            timeout=self.workload.config.request_timeout_s,
            # The process's one TLS context (--ca-bundle): each SDK client loading its own CA bundle
            # (~40 ms of CPU) stalls every stream in flight while users start (1.4 s with 30 users).
            http_client=openai.DefaultHttpxClient(
                verify=target.tls_context(), event_hooks={"request": [self._on_send]}
            ),
        )
        self.client.chat.completions  # noqa: B018  (the SDK imports its resources on first use: not on the clock)
        _warm_sdk()

    def on_stop(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()

    @task
    def chat(self) -> None:
        req = self.turn_to_send()
        body = dict(req.body)
        extra = {k: body.pop(k) for k in _NON_STANDARD_FIELDS if k in body}
        timer = self._timer = start_timer(req, time.time(), time.perf_counter())
        record = self._report(timer, lambda: self._stream(body, extra, timer))
        self.after_turn(req, record, timer)

    def _on_send(self, _request: Any) -> None:
        """httpx's request hook, called as the request goes out: the SDK's ~4 ms of request
        building and validation before it are the client's, not the server's TTFT."""
        self._timer.sent(time.perf_counter())

    def _stream(self, body: dict[str, Any], extra: dict[str, Any], timer: StreamTimer) -> RequestRecord:
        perf = time.perf_counter
        saw_usage = False
        try:
            with self.client.chat.completions.create(**body, extra_body=extra or None) as chunks:
                _check_body(chunks.response)
                stop_at = timer.cancel_after_tokens  # --cancel-after-tokens on a request picked to hang up
                for chunk in chunks:
                    try:
                        saw_usage = _apply_chunk(chunk, timer, perf()) or saw_usage
                    except SHAPE_ERRORS as e:  # the SDK does not validate chunks: `{"choices": [null]}` passes
                        raise unexpected_shape(e) from None
                    if stop_at and timer.token_events >= stop_at:
                        chunks.close()  # hang up: closes the connection, so the server sees the client leave
                        return timer.cancel(perf())
        except StreamProtocolError as e:
            return timer.fail(ErrorKind.PROTOCOL, str(e)[:200], perf())
        except json.JSONDecodeError as e:  # the SDK parses each event's data itself
            return timer.fail(ErrorKind.PROTOCOL, f"event is not JSON: {e}"[:200], perf())
        except openai.APIStatusError as e:
            return timer.fail(http_error_kind(e.status_code), f"HTTP {e.status_code}: {e.message}"[:200], perf())
        except openai.APITimeoutError as e:
            message = f"stalled or trickling: {e.__cause__ or e.message}"  # the deadline's, or httpx's own
            return timer.fail(ErrorKind.TIMEOUT, message[:200], perf())
        except openai.APIConnectionError as e:
            tls = _tls_failure(e)
            if tls is not None:
                return timer.fail(ErrorKind.TLS, tls[:200], perf())
            kind = ErrorKind.TRUNCATED if timer.token_events else ErrorKind.CONNECT
            return timer.fail(kind, f"{e.message}: {e.__cause__ or ''}"[:200], perf())
        except openai.APIError as e:
            return timer.fail(ErrorKind.STREAM_ERROR, e.message[:200], perf())
        end = perf()
        if not saw_usage and timer.token_events:
            # We always ask for include_usage; the SDK ends quietly when a stream stops early.
            return timer.fail(ErrorKind.TRUNCATED, "stream ended without its usage chunk", end)
        return timer.finish(end)


def _check_body(response: Any) -> None:
    """Before the first event: a 200 that is not an event stream fails as `protocol` (the SDK
    would read it as a stream without events), and the body's lines are bounded from here on."""
    not_sse = not_an_event_stream(response.headers.get("content-type"))
    if not_sse is not None:
        raise not_sse
    read = response.iter_bytes
    response.iter_bytes = lambda *args, **kwargs: bounded_bytes(read(*args, **kwargs))


def _tls_failure(error: BaseException) -> str | None:
    """The one-line TLS failure behind an SDK connection error (it wraps httpx's, which wraps the
    `ssl` module's), or None."""
    seen: BaseException | None = error
    for _ in range(8):  # a short chain; never a cycle's endless walk
        if seen is None:
            return None
        tls = target.tls_failure(seen)
        if tls is not None:
            return tls
        seen = seen.__cause__ or seen.__context__
    return None


def _apply_chunk(chunk: Any, timer: StreamTimer, now: float) -> bool:
    """One `ChatCompletionChunk` onto the timer, as `sse.apply_chat_event` does for raw SSE; True
    when it carried the usage. (The SDK itself turns numeric strings and floats into ints, and an
    empty `usage` into one whose fields are None: that one is absent, as in raw SSE.)"""
    if chunk.choices:
        d = chunk.choices[0].delta
        if d is not None:
            # The SDK keeps fields it does not know (vLLM's `reasoning`) as extra attributes.
            reasoning = getattr(d, "reasoning", None) or getattr(d, "reasoning_content", None)
            if d.content or d.tool_calls:
                if reasoning:
                    timer.reasoned(now)
                timer.token(now, checked_text(d.content))
            elif reasoning:
                timer.reasoning(now)
            if timer.output is not None and d.tool_calls:  # --tools: the SDK's objects, as raw SSE's dicts
                timer.output.tool_calls(now, [call.model_dump() for call in d.tool_calls])
    usage = chunk.usage
    if not usage or (usage.prompt_tokens is None and usage.completion_tokens is None):
        return False
    details, output_details = usage.prompt_tokens_details, usage.completion_tokens_details
    timer.usage(
        *checked_counts(
            usage.prompt_tokens,
            usage.completion_tokens,
            details.cached_tokens if details else None,
            output_details.reasoning_tokens if output_details else None,
        )
    )
    return True
