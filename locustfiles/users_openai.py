"""A user built on the official `openai` SDK (streaming), for teams that want their app's client.

It measures the same things as `ChatStreamUser` with the SDK's own HTTP stack and parsing, which
costs several times more CPU per chunk (pydantic objects per event): give it more processes.
`max_retries=0`: the SDK would otherwise retry failures silently and hide them from the gate.
"""

from __future__ import annotations

import time
from typing import Any

import openai
from locust import task

from locustfiles import options
from locustfiles.timer import StreamTimer
from locustfiles.users import _ChatUser
from slo.record import ErrorKind, RequestRecord, http_error_kind

_NON_STANDARD_FIELDS = ("ignore_eos",)  # vLLM extensions the SDK only sends through extra_body


class OpenAIChatUser(_ChatUser):
    def on_start(self) -> None:
        super().on_start()
        self.connect()

    def connect(self) -> None:
        """(Re)create the SDK client for `base_url`."""
        self.client = openai.OpenAI(
            base_url=self.base_url + "/v1",
            api_key=options.api_key() or "EMPTY",
            max_retries=0,
            timeout=self.workload.config.request_timeout_s,
        )

    def on_stop(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()

    @task
    def chat(self) -> None:
        req = self.workload.next_request(self.rng)
        body = dict(req.body)
        extra = {k: body.pop(k) for k in _NON_STANDARD_FIELDS if k in body}
        timer = StreamTimer(req.request_class, time.time(), time.perf_counter())
        self._report(timer, lambda: self._stream(body, extra, timer))

    def _stream(self, body: dict[str, Any], extra: dict[str, Any], timer: StreamTimer) -> RequestRecord:
        perf = time.perf_counter
        saw_usage = False
        try:
            for chunk in self.client.chat.completions.create(**body, extra_body=extra or None):
                now = perf()
                if chunk.choices:
                    d = chunk.choices[0].delta
                    if d is not None and (
                        d.content
                        or d.tool_calls
                        or getattr(d, "reasoning_content", None)
                        or getattr(d, "reasoning", None)
                    ):
                        timer.token(now)
                usage = chunk.usage
                if usage:
                    saw_usage = True
                    details = usage.prompt_tokens_details
                    timer.usage(
                        usage.prompt_tokens, usage.completion_tokens, details.cached_tokens if details else None
                    )
        except openai.APIStatusError as e:
            return timer.fail(http_error_kind(e.status_code), f"HTTP {e.status_code}: {e.message}"[:200], perf())
        except openai.APITimeoutError:
            return timer.fail(ErrorKind.TIMEOUT, "no byte within the request timeout", perf())
        except openai.APIConnectionError as e:
            kind = ErrorKind.TRUNCATED if timer.token_events else ErrorKind.CONNECT
            return timer.fail(kind, f"{e.message}: {e.__cause__ or ''}"[:200], perf())
        except openai.APIError as e:
            return timer.fail(ErrorKind.STREAM_ERROR, e.message[:200], perf())
        end = perf()
        if not saw_usage and timer.token_events:
            # We always ask for include_usage; the SDK ends quietly when a stream stops early.
            return timer.fail(ErrorKind.TRUNCATED, "stream ended without its usage chunk", end)
        return timer.finish(end)
