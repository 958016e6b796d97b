"""Parsing vLLM's /metrics and turning two scrapes into the report's server figures."""

import pytest
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.judge import with_ttft_gap
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.server_figures import ServerFigures, ServerMetrics, ServerTtft, parse
from slogate.slo.gate.spec import parse_spec


def exposition(queries: float, hits: float, waiting: float, ttft_counts: list[float], ttft_sum: float) -> str:
    """The shape of vLLM 0.32's exposition (two engines' labels are summed)."""
    les = ["0.01", "0.02", "0.04", "0.1", "+Inf"]
    buckets = "\n".join(
        f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="tiny"}} {c}'
        for le, c in zip(les, ttft_counts, strict=True)
    )
    return f"""# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {queries}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {hits}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="tiny"}} {waiting}
vllm:num_requests_waiting{{engine="1",model_name="tiny"}} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} 0.25
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="tiny"}} 2.0
# TYPE vllm:time_to_first_token_seconds histogram
{buckets}
vllm:time_to_first_token_seconds_count{{engine="0",model_name="tiny"}} {ttft_counts[-1]}
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="tiny"}} {ttft_sum}
"""


def test_parse_sums_labels_and_keeps_buckets() -> None:
    sample = parse(exposition(100, 40, 3, [1, 2, 3, 4, 4], 0.1))
    assert sample["vllm:prefix_cache_queries_total"] == 100
    assert sample["vllm:num_requests_waiting"] == 4  # two engines
    assert sample["vllm:time_to_first_token_seconds_bucket|0.04"] == 3


def test_figures_cover_the_change_between_first_and_last_scrape() -> None:
    m = ServerMetrics()
    m.add(parse(exposition(1000, 100, 0, [10, 10, 10, 10, 10], 0.1)))  # before the run: ignored by deltas
    m.add(parse(exposition(1500, 400, 5, [10, 30, 50, 60, 60], 1.6)))
    s = m.summary().to_json()
    assert s["available"] and s["prefix_cache_hit_rate"] == 0.6  # (400-100) / (1500-1000)
    assert s["num_requests_waiting_max"] == 6 and s["kv_cache_usage_max"] == 0.25
    assert s["preemptions"] == 0
    ttft = s["server_ttft_ms"]
    assert ttft["count"] == 50 and ttft["mean"] == 30.0  # (1.6 - 0.1) / 50
    assert ttft["p50"] == 25.0  # rank 25 of 50 lies in (20 ms, 40 ms], 5 of its 20 in: 20 + 20 * 5/20


def test_one_scrape_or_none_means_no_figures() -> None:
    m = ServerMetrics(error="http://x/metrics unavailable: refused")
    assert m.summary().to_json() == {"available": False, "scrapes": 0, "error": "http://x/metrics unavailable: refused"}


def test_server_slos_judge_the_figures() -> None:
    m = ServerMetrics()
    m.add(parse(exposition(0, 0, 0, [0, 0, 0, 0, 0], 0)))
    m.add(parse(exposition(1000, 700, 2, [0, 0, 0, 0, 0], 0)))
    spec = parse_spec(
        {"slos": [{"metric": "prefix_cache_hit_rate", "min": 0.5}, {"metric": "num_requests_waiting", "max": 2}]}
    )
    verdict = evaluate(spec, MetricsStore(), server=m.summary())
    assert [r.result for r in verdict.results] == ["pass", "fail"]  # 3 waiting (2 + 1) > 2
    assert verdict.status == "fail"


def test_counters_restart_after_priming_so_the_server_ttft_is_the_runs() -> None:
    """Priming prefills (slow, not judged by the client) must not enter the server's TTFT mean or
    the hit rate: the run counts from the restart on."""
    m = ServerMetrics()
    m.add(parse(exposition(0, 0, 0, [0, 0, 0, 0, 0], 0.0)))
    m.add(parse(exposition(3000, 0, 0, [0, 0, 0, 0, 2], 4.0)))  # two priming prefills of 2 s
    m.restart_from(parse(exposition(3000, 0, 0, [0, 0, 0, 0, 2], 4.0)))
    m.add(parse(exposition(6000, 2900, 0, [10, 10, 10, 10, 12], 4.1)))  # ten 10 ms requests
    s = m.summary().to_json()
    assert s["server_ttft_ms"]["count"] == 10 and s["server_ttft_ms"]["mean"] == 10.0
    assert s["prefix_cache_hit_rate"] == round(2900 / 3000, 4) and s["scrapes"] == 2


def test_the_client_server_gap_leaves_out_requests_unfinished_at_the_stop() -> None:
    """Ten finished requests at 110 ms against a server mean of 100 ms: a 10 ms gap, whatever
    waited 5 ms when the run stopped (a lower bound the server does not share)."""

    store = MetricsStore()
    for i in range(10):
        store.add(RequestRecord("shared", 1.0 + i, e2e_us=200_000, ttft_us=110_000))
    server = ServerFigures(True, 2, server_ttft=ServerTtft(mean=100.0, count=10))
    assert with_ttft_gap(server, store).client_server_ttft_gap_ms == pytest.approx(10.0, abs=0.1)
    for i in range(5):
        store.add(RequestRecord("unique", 20.0 + i, e2e_us=5_000, error_kind=ErrorKind.UNFINISHED))
    assert with_ttft_gap(server, store).client_server_ttft_gap_ms == pytest.approx(10.0, abs=0.1)
