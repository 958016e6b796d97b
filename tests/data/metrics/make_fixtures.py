"""Build the SGLang and TGI `/metrics` fixtures next to this file: sglang-0.5.23-{1,2}.prom and
tgi-3.3.7-{1,2}.prom. Neither server runs on these machines (no GPU), so these are built, not
scraped: from each server's metric definitions at that version, in the text each one serves.

    .venv/bin/python tests/data/metrics/make_fixtures.py

- SGLang 0.5.23 (PyPI wheel, sglang/srt/observability/metrics_collector.py): its metrics are
  prometheus_client's, served through a `MultiProcessCollector` (sglang/srt/utils/common.py,
  `add_prometheus_middleware`), so they are made here with prometheus_client in multiprocess mode:
  the same names, help texts, labels and buckets, a subset of its ~160 metrics.
- TGI 3.3.7 (commit dfb3fbe78e0d1d69251bd33065591c61bafdfaa8): its router's `metrics` macros,
  rendered by metrics-exporter-prometheus 0.15.3 (`render` in its recorder.rs): counters, then
  gauges, then histograms; help texts from `describe_*` (the first of each name); buckets set by
  router/src/server.rs (35 geometric ones for every `*duration`); unset ones become summaries.

Each first scrape follows two priming requests; each second one, 40 requests that share a
3,000-token prefix, with the server busy at that moment. `print`ed: the figures each pair gives.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = "Qwen/Qwen2.5-7B-Instruct"
PREFIX, SUFFIX = 3000, 200  # prompt tokens: a shared prefix and each request's own part
TTFTS = (0.05, 0.08, 0.12, 0.15, 0.25)  # seconds, cycled over the loaded requests


def workload(loaded: bool) -> list[dict[str, float]]:
    """The requests finished before a scrape: two unique priming ones, or 40 on one prefix (the
    first computes it, the other 39 find it cached)."""
    if not loaded:
        return [dict(prompt=1200 + 100 * i, cached=0, ttft=0.35 + 0.07 * i, tokens=64, e2e=1.9 + i) for i in (0, 1)]
    return [
        dict(prompt=PREFIX + SUFFIX, cached=PREFIX if i else 0, ttft=0.45 if i == 0 else TTFTS[i % 5], tokens=128,
             e2e=3.1 + 0.01 * i)
        for i in range(40)
    ]  # fmt: skip


# --- SGLang -----------------------------------------------------------------------------------------

SCHEDULER = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
TOKENIZER = {"model_name": MODEL, "engine_type": "unified"}
SGLANG_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
# (name, help) of SchedulerMetricsCollector's gauges used here, and each one's value at either scrape.
SGLANG_GAUGES = {
    ("sglang:num_running_reqs", "The number of running requests."): (0, 12),
    ("sglang:num_used_tokens", "The number of used tokens."): (0, 192_700),
    ("sglang:token_usage", "The token usage."): (0.0, 0.41),
    ("sglang:gen_throughput", "The generation throughput (token/s)."): (0.0, 1834.6),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue."): (0, 5),
    ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."): (0, 0),
    ("sglang:cache_hit_rate", "The prefix cache hit rate."): (0.0, 0.94),
    ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."): (470_000, 470_000),
    ("sglang:num_retracted_reqs", "The number of retracted requests."): (0, 0),
}


def sglang_scrapes() -> list[str]:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()  # before prometheus_client is imported
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

    gauges = {name: Gauge(name, doc, SCHEDULER.keys(), multiprocess_mode="mostrecent") for name, doc in SGLANG_GAUGES}
    retracted = Counter("sglang:num_retracted_requests_total", "Total number of retracted requests.", SCHEDULER.keys())
    stream = [*TOKENIZER, "is_streaming"]
    prompt = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", stream)
    generated = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.", stream)
    cached = Counter(
        "sglang:cached_tokens_total",
        "Number of cached prompt tokens by source (device/host/storage).",
        [*TOKENIZER, "cache_source"],
    )
    requests = Counter("sglang:num_requests_total", "Number of requests processed.", stream)
    ttft = Histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        stream,
        buckets=SGLANG_TTFT_BUCKETS,
    )
    e2e = Histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        stream,
        buckets=SGLANG_E2E_BUCKETS,
    )
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    scrapes = []
    for i, loaded in enumerate((False, True)):
        for r in workload(loaded):
            labels = {**TOKENIZER, "is_streaming": "true"}
            prompt.labels(**labels).inc(r["prompt"])
            generated.labels(**labels).inc(r["tokens"])
            if r["cached"]:  # as observe_one_finished_request: a source's child only once it has tokens
                cached.labels(**TOKENIZER, cache_source="device").inc(r["cached"])
            requests.labels(**labels).inc()
            ttft.labels(**labels).observe(r["ttft"])
            e2e.labels(**labels).observe(r["e2e"])
        for (name, _), values in SGLANG_GAUGES.items():
            gauges[name].labels(**SCHEDULER).set(values[i])
        if loaded:
            retracted.labels(**SCHEDULER).inc(2)
        scrapes.append(generate_latest(registry).decode())
    return scrapes


# --- TGI --------------------------------------------------------------------------------------------

MAX_INPUT_TOKENS, MAX_TOTAL_TOKENS = 8191, 8192  # --max-input-tokens, --max-total-tokens
HELP = {  # router/src/server.rs's describe_* (the first description of a name wins)
    "tgi_request_success": "Number of successful requests",
    "tgi_request_duration": "Request duration",
    "tgi_request_validation_duration": "Request validation duration",
    "tgi_request_queue_duration": "Request queue duration",
    "tgi_request_inference_duration": "Request inference duration",
    "tgi_request_mean_time_per_token_duration": "Mean time per token per request",
    "tgi_request_generated_tokens": "Generated tokens per request",
    "tgi_batch_inference_count": "Inference calls per method (prefill or decode)",
    "tgi_request_count": "Total number of requests",
    "tgi_batch_inference_success": "Number of successful inference calls per method (prefill or decode)",
    "tgi_batch_current_size": "Current batch size",
    "tgi_queue_size": "Current queue size",
    "tgi_batch_current_max_tokens": "Maximum tokens for the current batch",
    "tgi_request_max_new_tokens": "Maximum new tokens per request",
    "tgi_batch_inference_duration": "Batch inference duration",
    "tgi_batch_forward_duration": "Batch forward duration per method (prefill or decode)",
    "tgi_request_skipped_tokens": "Speculated tokens per request",
    "tgi_batch_filter_duration": "Time spent filtering batches and sending generated tokens per method "
                                 "(prefill or decode)",
    "tgi_batch_decode_duration": "Time spent decoding a batch per method (prefill or decode)",
    "tgi_request_input_length": "Input token length per request",
    "tgi_batch_next_size": "Batch size of the next batch",
}  # fmt: skip


def rust_f64(x: float) -> str:
    """Rust's `Display` for f64: the shortest digits that read back, never an exponent, no `.0`."""
    return str(int(x)) if x == int(x) else repr(x)


def tgi_buckets(name: str) -> list[float] | None:
    """router/src/server.rs's `set_buckets_for_metric`; None: rendered as a summary."""
    if name.endswith("duration"):
        out, value = [], 0.0001
        for _ in range(35):  # multiplied as the loop there does, in f64
            value *= 1.5
            out.append(value)
        return out
    lengths = {"tgi_request_input_length": MAX_INPUT_TOKENS, "tgi_request_generated_tokens": MAX_TOTAL_TOKENS,
               "tgi_request_max_new_tokens": MAX_TOTAL_TOKENS}  # fmt: skip
    if name in lengths:
        return [lengths[name] / 100.0 * (x + 1) for x in range(100)]
    return [float(x + 1) for x in range(1024)] if name == "tgi_batch_next_size" else None


def tgi_histogram(name: str, labels: str, values: list[float]) -> list[str]:
    buckets = tgi_buckets(name)
    sep = "," if labels else ""
    total, count = sum(values), len(values)
    if buckets is None:  # a summary: the default quantiles 0, 0.5, 0.9, 0.95, 0.99, 0.999, 1
        ordered = sorted(values)
        lines = [
            f'{name}{{{labels}{sep}quantile="{rust_f64(q)}"}} {rust_f64(ordered[min(count - 1, int(q * count))])}'
            for q in (0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
        ]
    else:
        lines = [f'{name}_bucket{{{labels}{sep}le="{rust_f64(le)}"}} {sum(v <= le for v in values)}' for le in buckets]
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {count}')
    braces = f"{{{labels}}}" if labels else ""
    return [*lines, f"{name}_sum{braces} {rust_f64(total)}", f"{name}_count{braces} {count}"]


def family(name: str, kind: str, lines: list[str]) -> str:
    head = [f"# HELP {name} {HELP[name]}"] if name in HELP else []
    return "\n".join([*head, f"# TYPE {name} {kind}", *lines]) + "\n\n"


def tgi_scrape(done: list[dict[str, float]], queue: int, batch: int, batch_tokens: int) -> str:
    n = len(done)
    prefills, decodes = n, sum(int(r["tokens"]) - 1 for r in done) // 8  # decode steps of batches of ~8
    counters = {
        "tgi_request_count": [f"tgi_request_count {n + queue + batch}"],
        "tgi_request_success": [f"tgi_request_success {n}"],
        "tgi_batch_inference_count": [f'tgi_batch_inference_count{{method="prefill"}} {prefills}',
                                      f'tgi_batch_inference_count{{method="decode"}} {decodes}'],
        "tgi_batch_inference_success": [f'tgi_batch_inference_success{{method="prefill"}} {prefills}',
                                        f'tgi_batch_inference_success{{method="decode"}} {decodes}'],
    }  # fmt: skip
    gauges = {"tgi_batch_max_total_tokens": 180_000, "tgi_queue_size": queue, "tgi_batch_current_size": batch,
              "tgi_batch_current_max_tokens": batch_tokens}  # fmt: skip
    requests = {
        "tgi_request_duration": [r["e2e"] for r in done],
        "tgi_request_validation_duration": [0.0004 for _ in done],
        "tgi_request_queue_duration": [max(0.0, r["ttft"] - 0.04) for r in done],
        "tgi_request_inference_duration": [r["e2e"] - r["ttft"] + 0.04 for r in done],
        "tgi_request_mean_time_per_token_duration": [(r["e2e"] - r["ttft"]) / r["tokens"] for r in done],
        "tgi_request_generated_tokens": [r["tokens"] for r in done],
        "tgi_request_input_length": [r["prompt"] for r in done],
        "tgi_request_max_new_tokens": [r["tokens"] for r in done],
        "tgi_batch_next_size": [1.0] * prefills,
        "tgi_request_skipped_tokens": [0.0] * sum(int(r["tokens"]) for r in done),
    }
    out = [family(name, "counter", lines) for name, lines in counters.items()]
    out += [family(name, "gauge", [f"{name} {rust_f64(value)}"]) for name, value in gauges.items()]
    out += [family(name, "histogram" if tgi_buckets(name) else "summary", tgi_histogram(name, "", values))
            for name, values in requests.items()]  # fmt: skip
    for name in ("tgi_batch_forward_duration", "tgi_batch_decode_duration", "tgi_batch_filter_duration",
                 "tgi_batch_inference_duration"):  # fmt: skip
        per_method = [tgi_histogram(name, 'method="prefill"', [0.03] * prefills),
                      tgi_histogram(name, 'method="decode"', [0.012] * decodes)]  # fmt: skip
        out.append(family(name, "histogram", [line for lines in per_method for line in lines]))
    return "".join(out)


def tgi_scrapes() -> list[str]:
    priming = workload(False)
    return [tgi_scrape(priming, 0, 0, 0), tgi_scrape(priming + workload(True), 7, 16, 70_400)]


def main() -> None:
    for engine, version, scrapes in (("sglang", "0.5.23", sglang_scrapes()), ("tgi", "3.3.7", tgi_scrapes())):
        for i, text in enumerate(scrapes, 1):
            (HERE / f"{engine}-{version}-{i}.prom").write_text(text)
    loaded = workload(True)
    ttft = sum(r["ttft"] for r in loaded)
    print(f"loaded requests: {len(loaded)}, TTFT sum {ttft:.4f} s, mean {ttft / len(loaded) * 1000:.3f} ms")
    print(f"prompt tokens {sum(r['prompt'] for r in loaded)}, cached {sum(r['cached'] for r in loaded)}")


if __name__ == "__main__":
    sys.exit(main())
