"""Turns the moments of one streamed request into a `RequestRecord`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slogate.slo.gate.record import ErrorKind, RequestRecord

if TYPE_CHECKING:
    from slogate.locustfiles.load.output_check import OutputCapture


class StreamTimer:
    """Started just before the request is sent; `token()` is called once per token event.

    All arguments named `now` are `time.perf_counter()` readings.
    """

    __slots__ = (
        "_first",
        "_first_output",
        "_itl",
        "_last",
        "_reasoning",
        "_reasoning_events",
        "_t0",
        "answer",
        "cached",
        "cancel_after_tokens",
        "completion",
        "output",
        "prompt",
        "reasoning_tokens",
        "request_class",
        "started_at",
        "tags",
    )

    def __init__(self, request_class: str, started_at: float, t0: float, tags: tuple[str, ...] = ()) -> None:
        self.request_class = request_class
        self.tags = tags
        self.started_at = started_at  # time.time(), for warm-up and the run window
        self._t0 = t0
        self._first: float | None = None
        self._last = 0.0
        self._itl: list[int] = []
        self._first_output: float | None = None  # the first output (answer, tool call) token event
        self._reasoning: float | None = None  # the first reasoning token event
        self._reasoning_events = 0
        self.prompt: int | None = None
        self.completion: int | None = None
        self.cached: int | None = None
        self.reasoning_tokens: int | None = None  # usage's, where the server gives them
        # The answer's text pieces as streamed, kept only where a later request resends them (a
        # conversation's next turn): `capture_answer()` turns it on.
        self.answer: list[str] | None = None
        # --tools / --response-format: the tool calls as streamed, checked at the end with the
        # answer (locustfiles/load/output_check.py); None without them.
        self.output: OutputCapture | None = None
        # --cancel-after-tokens: the client hangs up after this many token events (0: it reads to the end)
        self.cancel_after_tokens = 0

    def capture_answer(self) -> None:
        self.answer = []

    def sent(self, now: float) -> None:
        """Restart the clock as the request leaves: for clients (the openai SDK) that spend
        milliseconds preparing it after the timer was started, and for a request resent because
        the server had closed its kept-alive connection (the first send never reached it)."""
        self._t0 = now

    def token(self, now: float, text: str | None = None) -> None:
        """An output token event (answer text or a tool call); `text` is its answer text (content),
        if any, for `capture_answer`."""
        if self._first is None:
            self._first = self._first_output = now
        else:
            self._itl.append(int((now - self._last) * 1_000_000))
            if self._first_output is None:
                self._first_output = now
        self._last = now
        if text and self.answer is not None:
            self.answer.append(text)

    def reasoning(self, now: float) -> None:
        """A token event that carries reasoning only."""
        self.reasoned(now)
        if self._first is None:
            self._first = now
        else:
            self._itl.append(int((now - self._last) * 1_000_000))
        self._last = now

    def reasoned(self, now: float) -> None:
        """Reasoning text at `now`, also in an event that carries answer text (then called before
        `token()`): not a token event of its own."""
        if self._reasoning is None:
            self._reasoning = now
        self._reasoning_events += 1

    def usage(
        self, prompt: int | None, completion: int | None, cached: int | None, reasoning: int | None = None
    ) -> None:
        self.prompt, self.completion, self.cached = prompt, completion, cached
        self.reasoning_tokens = reasoning

    @property
    def token_events(self) -> int:
        return len(self._itl) + (self._first is not None)

    def finish(self, now: float) -> RequestRecord:
        """A stream that ended with `[DONE]`; without any token it is a `no_content` failure."""
        if self._first is None:
            return self.fail(ErrorKind.NO_CONTENT, "stream ended without any content token", now)
        completion = self.completion if self.completion is not None else self.token_events
        output, reasoning = self._first_output, self._reasoning
        ttftc = None
        if self.output is not None:
            problem = self.output.problem("".join(self.answer or ()))
            if problem is not None:
                return self.fail(ErrorKind.INVALID_OUTPUT, problem, now)
            ttftc = self.output.first_call_at(self._first_output)  # a call streamed as text: its first output
        return RequestRecord(
            self.request_class,
            self.started_at,
            e2e_us=int((now - self._t0) * 1_000_000),
            ttft_us=int((self._first - self._t0) * 1_000_000),
            itl_us=self._itl,
            prompt_tokens=self.prompt,
            completion_tokens=completion,
            cached_tokens=self.cached,
            tags=self.tags,
            ttfo_us=None if output is None else int((output - self._t0) * 1_000_000),
            reasoning_us=None if reasoning is None else _reasoning_us(reasoning, output, now),
            reasoning_tokens=_reasoning_tokens(self.reasoning_tokens, self._reasoning_events, completion, output),
            ttftc_us=None if ttftc is None else int((ttftc - self._t0) * 1_000_000),
        )

    def fail(self, kind: ErrorKind, message: str, now: float) -> RequestRecord:
        return RequestRecord(
            self.request_class,
            self.started_at,
            e2e_us=int((now - self._t0) * 1_000_000),
            ttft_us=None if self._first is None else int((self._first - self._t0) * 1_000_000),
            error_kind=kind,
            error_message=message,
            tags=self.tags,
        )

    def cancel(self, now: float) -> RequestRecord:
        """The client hung up at `now` (--cancel-fraction): `cancelled`, its TTFT kept if it had a
        first token, its token events so far as its output tokens."""
        record = self.fail(ErrorKind.CANCELLED, f"the client hung up after {self.token_events} token events", now)
        record.completion_tokens = self.token_events
        return record


def _reasoning_tokens(usage: int | None, events: int, completion: int, output: float | None) -> int:
    """Usage's count, or the reasoning token events where more: vLLM 0.32 counts only the tokens
    inside <think>...</think> of the output, 0 where the chat template opened the thinking
    (DeepSeek-R1, Qwen3). A stream that reasoned and gave no output at all reasoned all its tokens."""
    if events and output is None:
        return completion
    return max(usage or 0, events)


def _reasoning_us(reasoning: float, output: float | None, end: float) -> int:
    """From the first reasoning token to the first output token after it, else to the end."""
    stop = output if output is not None and output >= reasoning else end
    return int((stop - reasoning) * 1_000_000)
