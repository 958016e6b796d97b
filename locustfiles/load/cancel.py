"""Cancellation: a share of requests whose client hangs up mid-stream, as people press stop.

`--cancel-fraction P` picks that share of requests with a seeded RNG of each user's own (the same
seed picks the same requests, and the prompts are those of a run without cancellation); each
picked request hangs up after `--cancel-after-tokens N` token events or `--cancel-after-ms T` from
its send. Hanging up closes the connection, so the server sees the disconnect and can stop
generating (vLLM aborts the request): the raw SSE users release a response whose body was not
read to the end, which closes its socket; the SDK user leaves its stream's `with` block, which
closes it. The request is `cancelled` (slo/gate/metrics.py): not a failure, its TTFT kept.

Nothing of this runs per chunk for a request that is not picked: `SseChatUser._stream` takes the
plain read loop, and `read_until_cancelled` (the same loop with a count) only for a request that
hangs up after N tokens. A hang-up after T ms is a gevent timer (`hang_up_clock`) that raises
`StreamCancelled` in the request's greenlet, wherever it waits: a `BaseException`, so that no
client maps it to a timeout or a connection failure, and each releases the connection as for
any exception that passes through it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from locust import events
from slogate.locustfiles.load.sse import SHAPE_ERRORS, SseParser, unexpected_shape
from slogate.locustfiles.load.timer import StreamTimer
from slogate.slo.gate.record import RequestRecord
from slogate.slo.plugin.parser import group


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    cancel = group(parser, "slogate: cancellation")
    cancel(
        "--cancel-fraction",
        type=float,
        default=0.0,
        help="Share of requests (0-1, picked with --seed) whose client hangs up mid-stream, counted as `cancelled` "
        "(not failures); with --cancel-after-tokens or --cancel-after-ms",
    )
    cancel("--cancel-after-tokens", type=int, default=0, help="A cancelled request hangs up after N token events")
    cancel("--cancel-after-ms", type=float, default=0.0, help="A cancelled request hangs up T ms after its send")


class StreamCancelled(BaseException):
    """Raised by `hang_up_clock` in a request's greenlet: the client hangs up now."""


@dataclass(frozen=True)
class CancelPlan:
    """Which requests hang up, and when (options checked by `read`)."""

    fraction: float = 0.0
    after_tokens: int = 0
    after_ms: float = 0.0

    @classmethod
    def read(cls, get: Callable[[str, Any], Any], trace: bool = False) -> CancelPlan:
        """The plan of parsed options (`get(name, default)`); ValueError (one line) for a bad one."""
        plan = cls(get("cancel_fraction", 0.0), get("cancel_after_tokens", 0), get("cancel_after_ms", 0.0))
        plan.check(trace)
        return plan

    def check(self, trace: bool = False) -> None:
        fraction, tokens, ms = self.fraction, self.after_tokens, self.after_ms
        if not 0.0 <= fraction <= 1.0:  # NaN fails too
            raise ValueError(f"--cancel-fraction {fraction:g}: must be a share between 0 and 1")
        if tokens < 0:
            raise ValueError(f"--cancel-after-tokens {tokens}: must be a count of token events, 1 or more")
        if not ms >= 0.0 or ms == float("inf"):
            raise ValueError(f"--cancel-after-ms {ms:g}: must be a finite number of milliseconds above 0")
        if fraction == 0.0:
            if tokens or ms:
                given = "--cancel-after-tokens" if tokens else "--cancel-after-ms"
                raise ValueError(f"{given} needs --cancel-fraction P (0 < P <= 1): the share of requests that hang up")
            return
        if bool(tokens) == bool(ms):
            raise ValueError(
                f"--cancel-fraction {fraction:g} needs exactly one of --cancel-after-tokens N or --cancel-after-ms T"
            )
        if trace:
            raise ValueError("--cancel-fraction does not apply to --trace: a trace replays its requests as recorded")

    @property
    def active(self) -> bool:
        return self.fraction > 0.0

    def rng(self, seed: str) -> random.Random | None:
        """A user's RNG for picking (its own: the prompts' RNG draws as without cancellation); None when off."""
        return random.Random(f"{seed}:cancel") if self.active else None

    def picks(self, rng: random.Random | None) -> bool:
        """Whether the next request hangs up."""
        return rng is not None and rng.random() < self.fraction


def hang_up_clock(plan: CancelPlan, timer: StreamTimer) -> gevent.Timeout | None:
    """Arm a picked request: a started timer raising `StreamCancelled` after `--cancel-after-ms`
    (close it when the request is over), or the token count on `timer` (None returned)."""
    if plan.after_ms:
        return gevent.Timeout.start_new(plan.after_ms / 1000, StreamCancelled())
    timer.cancel_after_tokens = plan.after_tokens
    return None


def read_until_cancelled(
    readline: Callable[[bytes], bytes],
    parser: SseParser,
    apply_event: Callable[[bytes, StreamTimer, float], bool],
    arrived: Callable[[], float],
    timer: StreamTimer,
    drain: Callable[[], None],
) -> RequestRecord | None:
    """`SseChatUser._stream`'s read loop for a request that hangs up after `timer.cancel_after_tokens`
    token events: its `cancelled` record then (the caller's release of the unread response closes
    the connection), its finished record if the stream ends first, None if it breaks off."""
    stop_at = timer.cancel_after_tokens
    while line := readline(b"\n"):
        now = arrived()
        for payload in parser.feed(line):
            try:
                ended = apply_event(payload, timer, now)
            except SHAPE_ERRORS as e:
                raise unexpected_shape(e) from None
            if ended:
                record = timer.finish(now)
                drain()
                return record
            if timer.token_events >= stop_at:
                return timer.cancel(now)
    return None
