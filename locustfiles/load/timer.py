"""Turns the moments of one streamed request into a `RequestRecord`."""

from __future__ import annotations

from slogate.slo.gate.record import ErrorKind, RequestRecord


class StreamTimer:
    """Started just before the request is sent; `token()` is called once per token event.

    All arguments named `now` are `time.perf_counter()` readings.
    """

    __slots__ = (
        "_first",
        "_itl",
        "_last",
        "_t0",
        "answer",
        "cached",
        "completion",
        "prompt",
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
        self.prompt: int | None = None
        self.completion: int | None = None
        self.cached: int | None = None
        # The answer's text pieces as streamed, kept only where a later request resends them (a
        # conversation's next turn): `capture_answer()` turns it on.
        self.answer: list[str] | None = None

    def capture_answer(self) -> None:
        self.answer = []

    def sent(self, now: float) -> None:
        """Restart the clock as the request leaves: for clients (the openai SDK) that spend
        milliseconds preparing it after the timer was started, and for a request resent because
        the server had closed its kept-alive connection (the first send never reached it)."""
        self._t0 = now

    def token(self, now: float, text: str | None = None) -> None:
        """A token event; `text` is its answer text (content), if any, for `capture_answer`."""
        if self._first is None:
            self._first = now
        else:
            self._itl.append(int((now - self._last) * 1_000_000))
        self._last = now
        if text and self.answer is not None:
            self.answer.append(text)

    def usage(self, prompt: int | None, completion: int | None, cached: int | None) -> None:
        self.prompt, self.completion, self.cached = prompt, completion, cached

    @property
    def token_events(self) -> int:
        return len(self._itl) + (self._first is not None)

    def finish(self, now: float) -> RequestRecord:
        """A stream that ended with `[DONE]`; without any token it is a `no_content` failure."""
        if self._first is None:
            return self.fail(ErrorKind.NO_CONTENT, "stream ended without any content token", now)
        completion = self.completion if self.completion is not None else self.token_events
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
