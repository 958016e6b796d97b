"""`--export vllm-bench FILE`: slogate's figures under `vllm bench serve`'s result keys.

Tools that read `vllm bench serve --save-result` JSON files (dashboards, regression scripts,
vLLM's own `vllm bench sweep`) read this file the same way. The keys are those vLLM 0.32 writes
(vllm/benchmarks/serve.py, `benchmark()` and `main`): `date`, `endpoint_type`, `backend`,
`label`, `model_id`, `tokenizer_id`, `num_prompts`, `request_rate`, `burstiness`,
`max_concurrency`, `duration`, `completed`, `failed`, `total_input_tokens`,
`total_output_tokens`, `request_throughput`, `request_goodput`, `output_throughput`,
`total_token_throughput`, and for each latency metric with an `export` name
(slo/gate/latency_metrics.py: `ttft`, `itl`, `tpot` and `e2el`, vLLM's name for E2E) `mean_<m>_ms`,
`median_<m>_ms`, `std_<m>_ms` and `p<N>_<m>_ms` (`p50`, `p90`, `p95`, `p99`,
as `--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99` would write).

What the figures are: slogate's, from its HdrHistograms of every measured request (all classes):
percentiles and the median are nearest-rank (the top of the sample's 0.1% bucket; vLLM's
`np.percentile` interpolates between two samples), the mean is hdrh's (each sample at the middle of
its bucket), the standard deviation is over the bucket values. TTFT is slogate's (the first
content token, not vLLM's first chunk). `duration` is from the first measured request's start to the
last one's end, and the throughputs are over it, as in slogate's report. `request_goodput` is the
rate of successful requests that met every per-request limit of the SLO file (its goodput
objectives' limits, else its `ttft`, `tpot` and `e2e` objectives' `max_ms`: slo/gate/spec.py
`goodput_targets`, as `--goodput ttft:X tpot:Y e2el:Z` would count them), and None without one,
as vLLM writes it without `--goodput`. Per-request lists (`ttfts`, ...) are not written: slogate
keeps histograms, not requests. Slogate's own facts are under `slogate`.
"""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slogate.slo.gate.facts import OpenLoopFacts
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.latency_metrics import EXPORTED
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import Report
from slogate.slo.outputs.files import write_atomically

EXPORT_FORMATS = ("vllm-bench",)
PERCENTILES = (50, 90, 95, 99)


class ExportError(ValueError):
    """An --export that cannot be honoured; str() is one line."""


def _std_ms(h: LatencyHistogram) -> float | None:
    if not h.count:
        return None
    values, counts = h.distinct_values_ms()
    n = counts.sum()
    mean = float((values * counts).sum() / n)
    return math.sqrt(float((counts * (values - mean) ** 2).sum() / n))


def _latency_keys(name: str, h: LatencyHistogram) -> dict[str, float | None]:
    # vLLM writes 0.0 where a list was empty (np.mean(0) * 1000); slogate writes None: no data.
    pct = h.percentiles_ms(PERCENTILES)
    out: dict[str, float | None] = {
        f"mean_{name}_ms": h.mean_ms(),
        f"median_{name}_ms": h.percentile_ms(50),
        f"std_{name}_ms": _std_ms(h),
    }
    for i, p in enumerate(PERCENTILES):
        out[f"p{p:g}_{name}_ms"] = None if pct is None else pct[i]
    return out


def _date(report: Report) -> str:
    """vLLM's `date` format (%Y%m%d-%H%M%S); from the run's end (UTC here; vLLM writes local time)."""
    stamp = report.run.ended_at or report.generated_at
    try:
        when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        when = datetime.fromtimestamp(time.time(), UTC)
    return when.strftime("%Y%m%d-%H%M%S")


def vllm_bench_result(report: Report) -> dict[str, Any]:
    """The report's figures as a `vllm bench serve` result dict."""
    store = report.measurements
    total = store.get(ALL)
    open_loop = report.run.workload.open_loop or OpenLoopFacts()
    users = report.run.users
    duration = total.duration_s
    completed, failed = total.successes, total.failures
    # Closed loop: as many requests in flight as users, sent back to back (vLLM: rate inf,
    # max_concurrency = users); open loop: the offered rate, users x the per-user rate.
    per_user = open_loop.rate_per_user
    rate = per_user * users if per_user and users else None
    in_flight = open_loop.max_in_flight
    out: dict[str, Any] = {
        "date": _date(report),
        "endpoint_type": "openai-chat",
        "backend": "openai-chat",
        "label": "slogate",
        "model_id": report.run.model,
        "tokenizer_id": report.run.model,
        "num_prompts": total.requests + total.unfinished,
        "request_rate": "inf" if rate is None else rate,
        "burstiness": 1.0 if open_loop.burstiness is None else open_loop.burstiness,
        "max_concurrency": in_flight * users if in_flight and users else users,
        "duration": duration,
        "completed": completed,
        "failed": failed,
        "total_input_tokens": total.prompt_tokens,
        "total_output_tokens": total.output_tokens,
        "request_throughput": completed / duration if duration else None,
        "request_goodput": (total.good / duration if duration and store.goodput_targets_ms is not None else None),
        "output_throughput": total.output_tokens / duration if duration else None,
        "total_token_throughput": (total.prompt_tokens + total.output_tokens) / duration if duration else None,
    }
    for metric in EXPORTED:
        out.update(_latency_keys(str(metric.export), total.latency[metric.name]))
    out["slogate"] = {
        "verdict": str(report.verdict),
        "exit_code": report.exit_code,
        "target": report.run.target,
        "goodput_targets_ms": store.goodput_targets_ms,
        "unfinished": total.unfinished,
        "dropped": total.dropped,
        "errors_by_kind": dict(sorted(total.errors_by_kind.items())),
        "percentiles": "nearest-rank, from HdrHistograms (3 significant digits)",
        "ttft": "to the first content token (a role-only first chunk does not count)",
    }
    return out


def write_export(report: Report, fmt: str, path: str | Path) -> Path:
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"--export: unknown format {fmt!r} (choose one of {', '.join(EXPORT_FORMATS)})")
    p = Path(path)
    if p.parent != Path():
        p.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(p, json.dumps(vllm_bench_result(report), indent=2) + "\n")
    return p


def parse_exports(value: Any) -> list[tuple[str, str]]:
    """`--export FORMAT FILE` (argparse gives [FORMAT, FILE]; a config file may give a string)."""
    if not value:
        return []
    parts = value.split() if isinstance(value, str) else [str(v) for v in value]
    if len(parts) != 2:
        raise ExportError(f"--export: expected FORMAT FILE, got {' '.join(parts)!r}")
    fmt, path = parts
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"--export: unknown format {fmt!r} (choose one of {', '.join(EXPORT_FORMATS)})")
    return [(fmt, path)]
