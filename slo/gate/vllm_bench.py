"""Read a `vllm bench serve --save-result --save-detailed` JSON into slogate's measurements.

`slogate judge RESULT --slo-file F` judges such a file with the same histograms and SLO
machinery as a live run: every request becomes a `RequestRecord` in a `MetricsStore`.

What the file holds (vLLM 0.32, vllm/benchmarks/serve.py and lib/endpoint_request_func.py), one
entry per request, in send order:

    ttfts        seconds from send to the first chunk that carries `choices` (0.0 when none came)
    itls         seconds between consecutive such chunks (a list per request; [] when none)
    latencies    seconds from send to the last such chunk; 0.0 for every failed request
    input_lens   prompt tokens (the server's `usage.prompt_tokens` where it sent one)
    output_lens  output tokens (`usage.completion_tokens`, else counted by the tokenizer); 0 if failed
    start_times  `time.perf_counter()` at send: a monotonic clock with no fixed origin (on Linux,
                 seconds since boot), neither wall-clock time nor relative to the run's start
    errors       "" for a success; for a failure the HTTP reason phrase of a non-200 answer
                 ("Internal Server Error", "Too Many Requests"), the full traceback of an exception
                 (its last line names it), or "Never received a valid chunk to calculate TTFT..."

Without `--save-detailed` only `latencies` (and `queue_times`) remain, so such a file is refused
with a message that says how to save one. `queue_times` (time spent waiting for a
`--max-concurrency` slot) is not read: it is the client's own throttle, not slogate's open-loop
send lag, and reading it as one would make the self-check blame the load generator.

Request class: every request is recorded under `REQUEST_CLASS`; vllm bench has no notion of
slogate's `shared`/`unique` prompts, so only the aggregate class `all` (which `MetricsStore`
derives by merging the concrete classes) is meaningful.

Failures: a request failed when its error is non-empty or its latency is 0 (a success always has a
positive latency; an HTTP error without a reason phrase has neither). Its kind comes from the
message, see `classify_error`.

Times: `started_at` must be wall-clock seconds. A `start_times` value above 1e9 (2001 onwards) is
taken as epoch seconds as it is; otherwise the values are shifted so that the first send falls
at the file's `date` (local time, whole seconds, written when the run ended) minus its
`duration`: right to about a second, and the gaps between requests stay exact.
"""

from __future__ import annotations

import http
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord, http_error_kind

# The one concrete request class every record goes to; judge only the aggregate class `all`.
REQUEST_CLASS = "vllm_bench"

# The run-level fields worth showing in a report, in this order, where the file has them.
FACT_FIELDS = (
    "model_id",
    "endpoint_type",
    "date",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
)
# Per-request lists: the first five are required (all vllm bench versions with --save-detailed write
# them); vLLM 0.32 also writes `latencies` and `start_times`, which older versions may lack.
REQUIRED_LISTS = ("ttfts", "itls", "errors", "input_lens", "output_lens")
SAVE_DETAILED = "save the result with --save-result --save-detailed"
# `vllm bench serve` backends that time no tokens (embeddings, rerank): nothing here to judge.
POOLING_BACKENDS = frozenset(
    {
        "openai-embeddings",
        "openai-embeddings-chat",
        "openai-embeddings-clip",
        "openai-embeddings-vlm2vec",
        "infinity-embeddings",
        "infinity-embeddings-clip",
        "vllm-pooling",
        "vllm-rerank",
    }
)
CHAT_ENDPOINT_TYPE = "openai-chat"
CHAT_TTFT_NOTE = (
    "vllm bench's openai-chat client stops its TTFT clock at the first chunk of the stream, the "
    "role-only one included (slogate waits for the first content delta): vLLM writes that chunk with "
    "the first token, so against vLLM the two agree, but behind a server or proxy that sends it early "
    "this TTFT can be far below the true time to the first token, which then lands in the first ITL gap"
)
_EPOCH_FLOOR_S = 1e9  # 2001-09-09: a start time above it is wall-clock time, not perf_counter()


class VllmBenchError(ValueError):
    """A malformed vllm bench result; str() is one line naming the file and the field."""


@dataclass(frozen=True)
class VllmBenchRun:
    """One vllm bench result, as measurements (`store`) and the facts around them."""

    store: MetricsStore  # every request under REQUEST_CLASS; judge `all`
    source: str
    model: str | None
    endpoint_type: str | None
    started_at: float | None  # wall clock of the first send (see the module docstring); None if unknown
    duration_s: float | None  # the file's `duration`: the benchmark's own wall time
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def looks_like_vllm_bench(data: object) -> bool:
    """Whether a parsed JSON document is a `vllm bench serve` result (detailed or not).

    A result saved without --save-detailed counts too, so that loading it can say what is
    missing; a slogate report (`"schema": "slogate.report/..."`) never does.
    """
    if not isinstance(data, dict):
        return False
    schema = data.get("schema")
    if isinstance(schema, str) and schema.startswith("slogate."):
        return False
    if isinstance(data.get("ttfts"), list) and isinstance(data.get("itls"), list):
        return True
    has_backend = isinstance(data.get("endpoint_type"), str) or isinstance(data.get("backend"), str)
    return has_backend and all(k in data for k in ("completed", "duration", "request_throughput"))


def classify_error(message: str, got_first_token: bool = False) -> ErrorKind:
    """An `ErrorKind` for one of vllm bench's error strings, first match wins:

    1. an HTTP reason phrase ("Too Many Requests", "Internal Server Error", ...) or an explicit
       status ("HTTP 503", "status 429", a bare "500"): http_429, http_5xx or http_4xx;
    2. vllm bench's own texts: "Never received a valid chunk" (or "token delta") -> no_content,
       "Stream ended without a terminal event" -> truncated; a JSON error object -> stream_error;
    3. for an exception (a traceback's last line, or its bare message): a timeout -> timeout;
       an unfinished body (ClientPayloadError, TransferEncodingError, ...) -> truncated;
       refused, reset or disconnected -> connect, or truncated once a first chunk had come;
    4. anything else (a parse error, an unknown reason phrase, an empty message) -> protocol.
    """
    text = message.strip()
    traceback = text.startswith("Traceback")
    line = text.splitlines()[-1].strip() if text else ""
    low = line.lower()
    if not traceback:
        status = _status_of(line)
        if status is not None:
            return http_error_kind(status)
    if "never received a valid chunk" in low or "never received a token delta" in low:
        return ErrorKind.NO_CONTENT
    if "stream ended without a terminal event" in low:
        return ErrorKind.TRUNCATED
    if not traceback and text.startswith("{"):
        return ErrorKind.STREAM_ERROR
    if "timeout" in low or "timed out" in low:
        return ErrorKind.TIMEOUT
    if any(k in low for k in _UNFINISHED_BODY):
        return ErrorKind.TRUNCATED
    if any(k in low for k in _CONNECTION):
        return ErrorKind.TRUNCATED if got_first_token else ErrorKind.CONNECT
    return ErrorKind.PROTOCOL


_REASON_PHRASES = {s.phrase.lower(): s.value for s in http.HTTPStatus}
_STATUS_RE = re.compile(r"\b(?:http|status(?:[ _]code)?)\b\D{0,3}([1-5]\d\d)\b", re.IGNORECASE)
_UNFINISHED_BODY = ("clientpayloaderror", "payload is not completed", "transferencodingerror", "contentlengtherror")
_CONNECTION = (
    "connect",  # ClientConnectorError, "Cannot connect to host", ConnectionResetError, disconnected, ...
    "clientoserror",
    "broken pipe",
    "name or service not known",
)


def _status_of(line: str) -> int | None:
    low = line.lower().rstrip(".")
    if low in _REASON_PHRASES:
        return _REASON_PHRASES[low]
    if re.fullmatch(r"[1-5]\d\d", low):
        return int(low)
    if "too many requests" in low or "rate limit" in low:
        return 429
    m = _STATUS_RE.search(line)
    return int(m.group(1)) if m else None


def load_vllm_bench(
    data: dict, source: str, goodput_targets_ms: dict[str, dict[str, float]] | None = None
) -> VllmBenchRun:
    """The measurements in a vllm bench result; `source` names the file in error messages.
    `goodput_targets_ms` (slo/gate/spec.py `goodput_targets`): the per-request limits good requests are
    counted against, as each record is added (the store counts them only then).

    Raises VllmBenchError on malformed content: a per-request list missing (the result was saved
    without --save-detailed) or of another length than `ttfts`, or an entry of the wrong type.
    """
    if not isinstance(data, dict):
        raise VllmBenchError(f"{source}: not a JSON object")
    endpoint_type = _text(data.get("endpoint_type")) or _text(data.get("backend"))
    if endpoint_type in POOLING_BACKENDS:
        raise VllmBenchError(
            f"{source}: field 'endpoint_type': {endpoint_type!r} is a pooling benchmark, with no token timings to judge"
        )
    lists = {name: _list(data, name, source) for name in REQUIRED_LISTS}
    notes: list[str] = []
    latencies = _list(data, "latencies", source, required=False)
    if latencies is None:
        notes.append("the file has no 'latencies': E2E is taken as TTFT plus the ITL gaps")
    start_times = _list(data, "start_times", source, required=False)
    if start_times is None:
        notes.append("the file has no 'start_times': every request counts as sent at the run's start")

    n = len(lists["ttfts"])
    for name, values in [*lists.items(), ("latencies", latencies), ("start_times", start_times)]:
        if values is not None and len(values) != n:
            raise VllmBenchError(f"{source}: field {name!r}: {len(values)} items, but 'ttfts' has {n}")

    ttfts = [_number(source, "ttfts", i, v) for i, v in enumerate(lists["ttfts"])]
    itls = [_gaps(source, i, v) for i, v in enumerate(lists["itls"])]
    errors = [_error(source, i, v) for i, v in enumerate(lists["errors"])]
    input_lens = [round(_number(source, "input_lens", i, v)) for i, v in enumerate(lists["input_lens"])]
    output_lens = [round(_number(source, "output_lens", i, v)) for i, v in enumerate(lists["output_lens"])]
    if latencies is None:
        e2es = [t + sum(g) for t, g in zip(ttfts, itls, strict=True)]
    else:
        e2es = [_number(source, "latencies", i, v) for i, v in enumerate(latencies)]
    duration = _float(data.get("duration"))
    if start_times is None:
        starts = [0.0] * n
    else:
        starts = [_number(source, "start_times", i, v, non_negative=False) for i, v in enumerate(start_times)]
    starts, started_at = _on_wall_clock(starts, _text(data.get("date")), duration)

    store = MetricsStore()
    store.set_goodput_targets(goodput_targets_ms)
    for i in range(n):
        failed = bool(errors[i]) or e2es[i] <= 0
        itl_us = [_us(g) for g in itls[i]]
        if failed:
            got_first = ttfts[i] > 0
            store.add(
                RequestRecord(
                    REQUEST_CLASS,
                    started_at=starts[i],
                    e2e_us=_us(e2es[i] if e2es[i] > 0 else ttfts[i] + sum(itls[i])),  # up to the last byte seen
                    ttft_us=_us(ttfts[i]) if got_first else None,
                    itl_us=itl_us,
                    prompt_tokens=input_lens[i],
                    error_kind=classify_error(errors[i], got_first),
                    error_message=_last_line(errors[i]) or None,
                )
            )
        else:
            store.add(
                RequestRecord(
                    REQUEST_CLASS,
                    started_at=starts[i],
                    e2e_us=_us(e2es[i]),
                    ttft_us=_us(ttfts[i]),
                    itl_us=itl_us,
                    prompt_tokens=input_lens[i],
                    completion_tokens=output_lens[i],
                )
            )

    completed = data.get("completed")
    successes = store.get(REQUEST_CLASS).successes
    if isinstance(completed, int) and not isinstance(completed, bool) and completed != successes:
        notes.append(f"the file says {completed} requests completed, its per-request lists show {successes}")
    if endpoint_type == CHAT_ENDPOINT_TYPE:
        notes.insert(0, CHAT_TTFT_NOTE)
    facts = {k: data[k] for k in FACT_FIELDS if k in data}
    if "endpoint_type" not in facts and endpoint_type:
        facts["endpoint_type"] = endpoint_type  # older versions wrote `backend` only
    return VllmBenchRun(
        store=store,
        source=source,
        model=_text(data.get("model_id")),
        endpoint_type=endpoint_type,
        started_at=started_at,
        duration_s=duration,
        facts=facts,
        notes=notes,
    )


def _list(data: dict, name: str, source: str, required: bool = True) -> list | None:
    value = data.get(name)
    if value is None:
        if required:
            raise VllmBenchError(f"{source}: field {name!r}: missing; {SAVE_DETAILED}")
        return None
    if not isinstance(value, list):
        raise VllmBenchError(f"{source}: field {name!r}: a {type(value).__name__}, not a list")
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(source: str, name: str, i: int, value: object, non_negative: bool = True) -> float:
    if not _is_number(value) or (non_negative and value < 0):  # type: ignore[operator]
        want = "a number >= 0" if non_negative else "a number"
        raise VllmBenchError(f"{source}: field {name!r}: item {i} is {_show(value)}, not {want}")
    return float(value)  # type: ignore[arg-type]


def _gaps(source: str, i: int, value: object) -> list[float]:
    if not isinstance(value, list):
        raise VllmBenchError(f"{source}: field 'itls': item {i} is {_show(value)}, not a list of numbers")
    for j, gap in enumerate(value):
        if not _is_number(gap) or gap < 0:
            raise VllmBenchError(f"{source}: field 'itls': item {i}[{j}] is {_show(gap)}, not a number >= 0")
    return [float(g) for g in value]


def _error(source: str, i: int, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise VllmBenchError(f"{source}: field 'errors': item {i} is {_show(value)}, not a string")
    return value.strip()


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _float(value: object) -> float | None:
    return float(value) if _is_number(value) else None  # type: ignore[arg-type]


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _last_line(message: str) -> str:
    return message.strip().splitlines()[-1].strip()[:300] if message.strip() else ""


def _on_wall_clock(starts: list[float], date: str | None, duration: float | None) -> tuple[list[float], float | None]:
    """The send times as wall-clock seconds, and the first of them (None when the clock is unknown)."""
    if not starts:
        return starts, None
    first = min(starts)
    if first > _EPOCH_FLOOR_S:
        return starts, first
    ended = _parse_date(date)
    if ended is None:
        return [s - first for s in starts], None  # relative to the first send; the gaps stay exact
    origin = ended - (duration or 0.0)
    return [origin + (s - first) for s in starts], origin


def _parse_date(date: str | None) -> float | None:
    """vllm bench's `date` ("%Y%m%d-%H%M%S", local time, when the run ended) as epoch seconds."""
    if not date:
        return None
    try:
        return datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()
    except ValueError:
        return None
