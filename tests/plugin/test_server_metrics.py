"""Parsing vLLM's /metrics and turning two scrapes into the report's server figures."""

import pytest
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.facts import utc_iso
from slogate.slo.gate.judge import with_ttft_gap
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.server_figures import ServerFigures, ServerMetrics, ServerTtft, parse
from slogate.slo.gate.spec import parse_spec
from slogate.slo.gate.verdict import Verdict
from slogate.slo.outputs.html import render_html
from slogate.slo.outputs.render import render_markdown

T0 = 1_764_662_400.0


def exposition(
    queries: float, hits: float, waiting: float, ttft_counts: list[float], ttft_sum: float, preemptions: float = 2.0
) -> str:
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
vllm:num_preemptions_total{{engine="0",model_name="tiny"}} {preemptions}
vllm:num_preemptions_created{{engine="0",model_name="tiny"}} {T0 + preemptions}
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


def restarted_server() -> ServerMetrics:
    """A run whose server restarts between its second and third scrape: 1,000 tokens queried and
    60 requests before, 700 tokens and 10 requests after (the new server counts from zero; its hits,
    200, are already past the old server's 100, which must not hide the restart)."""
    m = ServerMetrics()
    m.add(parse(exposition(0, 0, 0, [0, 0, 0, 0, 0], 0.0, preemptions=0)), at=T0)
    m.add(parse(exposition(1000, 100, 0, [10, 30, 50, 60, 60], 1.5, preemptions=3)), at=T0 + 5)
    m.add(parse(exposition(300, 200, 0, [0, 5, 5, 5, 5], 0.15, preemptions=0)), at=T0 + 10)
    m.add(parse(exposition(700, 500, 0, [0, 5, 10, 10, 10], 0.3, preemptions=1)), at=T0 + 15)
    return m


def test_counters_of_a_restarted_server_are_summed_over_its_segments() -> None:
    m = restarted_server()
    s = m.summary()
    assert s.prefix_cache_queried_tokens == 1700 and s.prefix_cache_hit_rate == round(600 / 1700, 4)
    assert s.preemptions == 4  # 3 before, 1 after; the reset to 0 is not -3
    assert s.server_ttft.count == 70 and s.server_ttft.mean == round(1.8 / 70 * 1000, 3)
    assert m.ttft_buckets() == [(0.01, 10), (0.02, 35), (0.04, 60), (0.1, 70), (float("inf"), 70)]
    assert s.restarts == (utc_iso(T0 + 10),)
    # Per scrape: across the restart, the new server's own hits over its own queries.
    assert s.series["prefix_cache_hit_rate"] == [None, 0.1, round(200 / 300, 4), 0.75]


def test_a_counter_missing_from_one_scrape_is_neither_a_restart_nor_counted_twice() -> None:
    m = ServerMetrics()
    m.add({"vllm:prefix_cache_queries_total": 100.0, "vllm:prefix_cache_hits_total": 10.0}, at=T0)
    m.add({"vllm:prefix_cache_queries_total": 200.0}, at=T0 + 1)
    m.add({"vllm:prefix_cache_queries_total": 300.0, "vllm:prefix_cache_hits_total": 70.0}, at=T0 + 2)
    s = m.summary()
    assert s.prefix_cache_queried_tokens == 200 and s.prefix_cache_hit_rate == 0.3 and s.restarts == ()


def test_one_counter_going_down_is_that_series_reset_not_a_restart_of_the_server() -> None:
    """A label set that went away, one odd exporter counter: Prometheus's rule for that series only;
    the other counters are not counted again from zero (that would inflate them)."""
    m = ServerMetrics()
    odd = "some_exporter_events_total"
    m.add({"vllm:prefix_cache_queries_total": 1000.0, "vllm:prefix_cache_hits_total": 300.0, odd: 50.0}, at=T0)
    m.add({"vllm:prefix_cache_queries_total": 1100.0, "vllm:prefix_cache_hits_total": 330.0, odd: 5.0}, at=T0 + 1)
    m.add({"vllm:prefix_cache_queries_total": 1200.0, "vllm:prefix_cache_hits_total": 360.0, odd: 9.0}, at=T0 + 2)
    s = m.summary()
    assert s.restarts == () and s.prefix_cache_queried_tokens == 200 and s.prefix_cache_hit_rate == 0.3
    assert m.totals[odd] == 9.0  # reset to 5, then +4


def test_a_new_process_start_time_is_a_restart_even_when_counters_have_caught_up() -> None:
    m = ServerMetrics()
    start = "process_start_time_seconds"
    m.add({start: T0 - 100, "vllm:prefix_cache_queries_total": 100.0}, at=T0)
    m.add({start: T0 - 100, "vllm:prefix_cache_queries_total": 200.0}, at=T0 + 1)
    m.add({start: T0 + 1.5, "vllm:prefix_cache_queries_total": 250.0}, at=T0 + 2)  # a new server, already past 200
    s = m.summary()
    assert s.restarts == (utc_iso(T0 + 2),) and s.prefix_cache_queried_tokens == 100 + 250


def test_gauges_and_creation_times_going_down_are_no_restart() -> None:
    m = ServerMetrics()
    created = "vllm:prefix_cache_queries_created"
    m.add({"vllm:num_requests_waiting": 5.0, created: T0, "vllm:prefix_cache_queries_total": 100.0}, at=T0)
    m.add({"vllm:num_requests_waiting": 0.0, created: T0 - 9, "vllm:prefix_cache_queries_total": 200.0}, at=T0 + 1)
    s = m.summary()
    assert s.restarts == () and s.prefix_cache_queried_tokens == 100 and s.num_requests_waiting_max == 5


def test_a_restart_during_priming_is_not_the_runs() -> None:
    m = ServerMetrics()
    m.add(parse(exposition(5000, 0, 0, [0, 0, 0, 0, 2], 4.0)), at=T0)
    m.add(parse(exposition(0, 0, 0, [0, 0, 0, 0, 0], 0.0)), at=T0 + 1)  # restarted while priming
    m.restart_from(parse(exposition(100, 0, 0, [0, 0, 0, 0, 1], 2.0)), at=T0 + 2)
    m.add(parse(exposition(1100, 500, 0, [10, 10, 10, 10, 11], 2.1)), at=T0 + 3)
    s = m.summary()
    assert s.restarts == () and s.prefix_cache_queried_tokens == 1000 and s.server_ttft.count == 10


def test_restarts_travel_in_the_json_and_only_when_there_was_one() -> None:
    s = restarted_server().summary()
    assert s.to_json()["restarts"] == [utc_iso(T0 + 10)]
    assert ServerFigures.from_json(s.to_json()) == s
    quiet = ServerMetrics()
    quiet.add(parse(exposition(0, 0, 0, [0, 0, 0, 0, 0], 0.0)), at=T0)
    quiet.add(parse(exposition(10, 5, 0, [1, 1, 1, 1, 1], 0.01)), at=T0 + 1)
    assert "restarts" not in quiet.summary().to_json()
    assert ServerFigures.from_json(quiet.summary().to_json()).restarts == ()


def test_the_reports_say_when_the_server_restarted() -> None:
    run = RunInfo(target="http://127.0.0.1:8000", started_at=utc_iso(T0), ended_at=utc_iso(T0 + 20))
    report = Report(Verdict.UNGATED, [], run, MetricsStore(), server=restarted_server().summary())
    clock = utc_iso(T0 + 10).rpartition("T")[2]
    said = f"The server restarted during the run (up again at {clock}, 10 s in): its /metrics counters are summed"
    assert said in render_markdown(report)
    assert said in render_html(report)
