"""Trace replay's Locust-free glue: the `--trace*` options as a schedule, the facts the
report records under `run.workload.trace`, and each trace request as a chat request (the user that
sends them is in trace_user.py, the loading and prompts in trace.py)."""

from __future__ import annotations

from dataclasses import dataclass

from slogate.locustfiles.load import trace, trace_prompts
from slogate.locustfiles.load.workload import ChatRequest, Workload
from slogate.slo.gate.facts import TraceFacts
from slogate.slo.gate.record import PREFIX_HIT, PREFIX_MISS


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """The `--trace*` options (read in options.py)."""

    path: str
    block_tokens: int
    speedup: float
    start_s: float
    limit: int | None


def load_schedule(options: TraceOptions) -> list[trace.ScheduledRequest]:
    """The whole trace's schedule; raises `trace.TraceError` (one line, file:line) or ValueError."""
    requests = trace.load_trace(options.path, options.block_tokens)
    scheduled = trace.schedule(requests, options.speedup, options.start_s, options.limit)
    if not scheduled:
        raise ValueError(f"{options.path}: no request at or after --trace-start-s {options.start_s:g}")
    return scheduled


def trace_facts(options: TraceOptions, scheduled: list[trace.ScheduledRequest], exact: bool) -> TraceFacts:
    """What the report records under `run.workload.trace` (the implied hit rate: an unbounded cache)."""
    implied = trace.implied_prefix_cache(scheduled, options.block_tokens)
    return TraceFacts(
        file=options.path,
        requests=len(scheduled),
        block_tokens=options.block_tokens,
        speedup=options.speedup,
        implied_token_hit_rate=round(implied.token_hit_rate, 4),
        implied_block_hit_rate=round(implied.block_hit_rate, 4),
        exact=exact,
    )


def trace_tags(scheduled: list[trace.ScheduledRequest]) -> list[str]:
    """Every tag (SLO `class`) a replay of `scheduled` can produce."""
    classes = sorted({s.request.request_class for s in scheduled if s.request.request_class})
    return [PREFIX_HIT, PREFIX_MISS, *classes]


def trace_request(
    workload: Workload, builder: trace_prompts.PromptBuilder, scheduled: trace.ScheduledRequest
) -> ChatRequest:
    """One trace request as a chat request: its blocks as the user message, `output_length` tokens
    out (ignore_eos). Whether its first block was seen before partitions the requests; `class` is a tag."""
    request = scheduled.request
    messages = [{"role": "user", "content": builder.prompt(request)}]
    cfg = workload.config
    body = workload.endpoint.body(workload.model, messages, request.output_length, cfg.temperature, True)
    request_class = PREFIX_HIT if scheduled.prefix_hit else PREFIX_MISS
    tags = (request.request_class,) if request.request_class else ()
    return ChatRequest(request_class, body, messages, tags)
