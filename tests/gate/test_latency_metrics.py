"""The latency metrics' registry (slo/gate/latency_metrics.py): each metric defined once, and what
measurement and the outputs make of its fields."""

import pytest
from slogate.slo.gate.intervals import IntervalSeries
from slogate.slo.gate.judge import judge
from slogate.slo.gate.latency_metrics import (
    BY_NAME,
    GOODPUT_METRICS,
    INTERVAL_METRICS,
    LATENCY,
    LATENCY_METRICS,
    TTFT,
    LatencyMetric,
    batches,
)
from slogate.slo.gate.metrics import ClassMetrics, MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.outputs.render import render_markdown


def record(**kw: object) -> RequestRecord:
    fields = {"request_class": "shared", "started_at": 100.0, "e2e_us": 90_000, "ttft_us": 30_000}
    fields |= {"itl_us": [20_000, 20_000, 20_000], "completion_tokens": 4, "send_lag_us": 700}
    fields |= {"ttfo_us": 50_000, "reasoning_us": 20_000}
    fields |= {"ttftc_us": 40_000}
    return RequestRecord(**(fields | kw))  # type: ignore[arg-type]


def test_the_registry_keeps_the_names_and_order_the_reports_have() -> None:
    # The report's `metrics.<class>` keys follow this order: saved reports must read and write the same.
    assert LATENCY_METRICS == ("ttft", "ttfo", "reasoning", "ttftc", "itl", "tpot", "e2e", "send_lag")
    assert INTERVAL_METRICS == ("ttft", "ttfo", "itl", "e2e")
    early = ("ttft", "ttfo", "reasoning", "ttftc", "tpot", "e2e")
    assert tuple(m.name for m in LATENCY if m.early_stop) == early  # one sample a request
    assert list(GOODPUT_METRICS) == ["ttft", "tpot", "e2e"]  # vLLM's --goodput metrics
    assert len(BY_NAME) == len(LATENCY) and BY_NAME["ttft"] is TTFT  # names are unique


def test_a_metric_has_exactly_one_way_to_read_a_record() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        LatencyMetric("x", "X", "x")
    with pytest.raises(ValueError, match="exactly one"):
        LatencyMetric("x", "X", "x", value_us=lambda r: r.e2e_us, values_us=lambda r: r.itl_us)
    with pytest.raises(ValueError, match="early_stop needs one value per request"):
        LatencyMetric("x", "X", "x", values_us=lambda r: r.itl_us, early_stop=True)


def test_each_metric_records_what_its_definition_reads_from_the_record() -> None:
    rec = record()
    cm = ClassMetrics()
    cm.add(rec)
    expected = {"ttft": [30_000], "itl": [20_000] * 3, "tpot": [20_000], "e2e": [90_000], "send_lag": [700]}
    expected |= {"ttfo": [50_000], "reasoning": [20_000]}
    expected |= {"ttftc": [40_000]}
    for m in LATENCY:
        h = cm.latency[m.name]
        assert h.count == len(expected[m.name]), m.name
        assert h.max_ms() == pytest.approx(max(expected[m.name]) / 1000, rel=1e-3), m.name
    # Absent values are left out, not counted as 0: no first token, one token, closed loop.
    cm = ClassMetrics()
    absent = {"ttfo_us": None, "reasoning_us": None, "ttftc_us": None}
    cm.add(record(ttft_us=None, itl_us=[], completion_tokens=1, send_lag_us=None, **absent))
    counts = {m: h.count for m, h in cm.latency.items()}
    assert counts == {"ttft": 0, "ttfo": 0, "reasoning": 0, "ttftc": 0, "itl": 0, "tpot": 0, "e2e": 1, "send_lag": 0}


def test_a_store_computes_a_records_values_once_for_its_class_tags_and_interval() -> None:
    recs = [record(started_at=100.0 + i, ttft_us=10_000 + 997 * i, itl_us=[5_000 + i] * (i % 70), tags=("follow_up",))
            for i in range(60)]  # fmt: skip
    store = MetricsStore(interval_s=10.0)
    alone = ClassMetrics()
    for rec in recs:
        store.add(rec)
        alone.add(rec)  # indexes its own batches
    for tag in ("shared", "follow_up"):
        got = store.get(tag)
        assert {m: h.encode() for m, h in got.latency.items()} == {m: h.encode() for m, h in alone.latency.items()}
    # The intervals hold the metrics kept in intervals, and together their totals.
    for m in LATENCY:
        totals = store.intervals.totals(m.name)
        assert totals.get("shared", 0) == (alone.latency[m.name].count if m.in_intervals else 0), m.name


def test_a_request_in_flight_at_the_stop_counts_only_in_ttft_with_what_it_had_waited() -> None:
    store = MetricsStore(interval_s=5.0)
    store.add(record(ttft_us=None, e2e_us=4_000_000, error_kind=ErrorKind.UNFINISHED))
    cm = store.get("shared")
    counts = {m: h.count for m, h in cm.latency.items()}
    assert counts == {"ttft": 1, "ttfo": 0, "reasoning": 0, "ttftc": 0, "itl": 0, "tpot": 0, "e2e": 0, "send_lag": 0}
    assert cm.latency["ttft"].max_ms() == pytest.approx(4000, rel=1e-3) and cm.unfinished_ttft is not None
    assert cm.unfinished_ttft.count == 1 and store.intervals.totals("ttft") == {"all": 1, "shared": 1}
    assert not any(store.intervals.totals("e2e").values())


def test_a_failed_request_is_in_no_latency_histogram() -> None:
    series = IntervalSeries(5.0)
    store = MetricsStore()
    rec = record(error_kind=ErrorKind.HTTP_5XX)
    store.add(rec)
    series.add(rec)
    assert all(h.count == 0 for h in store.get("shared").latency.values())
    assert not any(c for m in INTERVAL_METRICS for c in series.totals(m).values())


def test_a_metric_of_many_values_is_indexed_once_a_record_and_left_out_when_empty() -> None:
    assert batches(record(itl_us=[])) == []
    (name, batch), *rest = batches(record())
    assert name == "itl" and batch.n == 3 and not rest


def test_goodput_reads_a_one_token_answers_tpot_as_zero_as_vllm_does() -> None:
    one_token = record(itl_us=[], completion_tokens=1)
    assert one_token.tpot_us is None and GOODPUT_METRICS["tpot"](one_token) == 0
    assert GOODPUT_METRICS["ttft"](one_token) == 30_000 and GOODPUT_METRICS["e2e"](one_token) == 90_000


def test_the_summary_table_has_the_columns_the_registry_names() -> None:
    store = MetricsStore()
    store.add(record())
    md = render_markdown(judge(None, store, RunInfo()))
    assert (
        "| class | requests | failed | TTFT p50 | TTFT p95 | TTFT p99 | TTFO p95 | reasoning p50 | TTFTC p95 | ITL p50 "
        "| TPOT p50 | E2E p95 | out tok/s | prompt tok | cached |\n|---|---|---|---|---|---|---|---|---|---|---|---|---"
        "|---|---|\n| all | 1 | 0 | 30.0 | 30.0 | 30.0 | 50.0 | 20.0 | 40.0 | 20.0 | 20.0 | 90.0 | " in md
    )
