"""Latency percentiles decided on batches as long as the requests' measured correlation
(slo/gate/correlation.py): the estimator, the batch length, and the look every second of a run's
early stop (`--slo-correlated-requests`)."""

import numpy as np
import pytest
from slogate.slo.gate import correlation
from slogate.slo.gate.correlation import batch_length_of, batchable, integrated_autocorrelation_time, pooled_counts
from slogate.slo.gate.early_stop import look
from slogate.slo.gate.intervals import ClassInterval
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.objective_kinds import Objective
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.spec import parse_spec

SPEC = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 200}]})


def batch_requests(runs: list[MetricsStore], o: Objective) -> tuple[float, int, int]:
    """(k, requests over the target, requests) of `runs` at one rate, as decide_adaptive counts them."""
    over, totals = pooled_counts(runs, o)
    return batch_length_of(over, totals), sum(over), sum(totals)


def per_second(ttfts_ms: list[float], per_s: int = 10, request_class: str = "shared") -> MetricsStore:
    """Requests sent `per_s` a second from t = 1000 s, in 1 s intervals, with these TTFTs."""
    store = MetricsStore(interval_s=1.0)
    for i, ms in enumerate(ttfts_ms):
        us = int(ms * 1000)
        store.add(RequestRecord(request_class, 1000.0 + i / per_s, e2e_us=us + 5000, ttft_us=us))
    return store


def clustered(batches: int, busy_every: int) -> list[float]:
    """Seconds of 10 requests: every `busy_every`-th all over the 200 ms target (a busy period), the others under."""
    return [400.0 if b % busy_every == busy_every - 1 else 100.0 for b in range(batches) for _ in range(10)]


def ar1(rho: float, n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=n)
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = rho * x[i - 1] + e[i]
    return x


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_the_estimator_finds_an_ar1_series_integrated_autocorrelation_time(rho: float) -> None:
    expected = 1 + 2 * rho / (1 - rho)  # 3 and 9
    assert integrated_autocorrelation_time(ar1(rho, 20_000)) == pytest.approx(expected, rel=0.2)


def test_an_independent_series_has_a_time_of_about_one_and_a_constant_one_exactly_one() -> None:
    assert integrated_autocorrelation_time(np.random.default_rng(2).normal(size=20_000)) == pytest.approx(1, abs=0.2)
    assert integrated_autocorrelation_time([3.0] * 100) == 1.0
    assert integrated_autocorrelation_time([1.0, 2.0]) == 1.0  # too short to say


def test_busy_periods_of_ten_requests_are_counted_in_batches_of_about_twice_ten() -> None:
    o = SPEC.objectives[0]
    k, over, n = batch_requests([per_second(clustered(300, busy_every=30))], o)
    assert (over, n) == (100, 3000) and 15 <= k <= 22
    independent = np.where(np.random.default_rng(3).random(3000) < 0.03, 400.0, 100.0).tolist()
    k, _, _ = batch_requests([per_second(independent)], o)
    assert 1.6 <= k <= 2.6  # about one request, times the safety factor
    assert batch_requests([per_second([100.0] * 300)], o)[0] == 2  # nothing over: tau taken as 1


def test_an_exceedance_in_fewer_than_ten_intervals_is_decided_on_one_sample_per_interval() -> None:
    busy = per_second([400.0] + [100.0] * 899, per_s=100)  # 9 s of 100 requests, one over: tau not measured
    assert [lk.state for lk in look(SPEC, busy, 0.99)] == ["pass"]
    assert [lk.state for lk in look(SPEC, busy, 0.99, correlated=True)] == ["undecided"]  # 9 samples
    clean = per_second([100.0] * 900, per_s=100)  # nothing over: tau 1, batches of 2
    assert [lk.state for lk in look(SPEC, clean, 0.99, correlated=True)] == ["pass"]
    slow = per_second([400.0] * 30)  # 3 s, all over (a probe far above a knee): 3 samples, all over
    assert [lk.state for lk in look(SPEC, slow, 0.99, correlated=True)] == ["fail"]
    burst = per_second([100.0] * 8 + [400.0] * 6 + [100.0] * 2 + [400.0] * 4)  # a step's first 2 s: 10 of 20 over
    assert [lk.state for lk in look(SPEC, burst, 0.99)] == ["fail"]
    assert [lk.state for lk in look(SPEC, burst, 0.99, correlated=True)] == ["undecided"]  # 2 samples, not 10


def test_few_over_the_target_near_it_the_requests_over_the_runs_own_percentile_show_the_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A calm minute near the knee: one request of 600 over the 200 ms target (nothing to measure a
    correlation by: batches of 2, a pass), its p95 185 ms, the 5 % over 180 ms (its p95 rounded down to 5 %
    of the target) in 3 busy seconds of 10
    requests each: batches of ~20 requests, 30 samples, undecided. Far below the target the own
    percentile is not looked at (under 75 % of it: 140 ms)."""
    o = SPEC.objectives[0]
    calm = [185.0 if second % 20 == 19 else 100.0 for second in range(60) for _ in range(10)]
    calm[305] = 400.0
    store = per_second(calm)
    assert correlation.near_target_batch_length(o, [store]) >= 15
    assert correlation.decide_adaptive(o, [store], 0.01, 0.01) == "undecided"
    monkeypatch.setattr(correlation, "NEAR", 1.0)  # the over-target requests alone
    assert correlation.decide_adaptive(o, [store], 0.01, 0.01) == "pass"
    far = per_second([140.0 if second % 10 == 9 else 100.0 for second in range(60) for _ in range(10)])
    assert far.get("shared").latency["ttft"].percentile_ms(95) == pytest.approx(140, rel=0.01)
    assert correlation.near_target_batch_length(o, [far]) == 1.0  # 70 % of the target


def test_an_objective_on_a_tag_is_not_batched_its_percentile_decided_per_request() -> None:
    on_tag = parse_spec({"slos": [{"metric": "ttft", "percentile": 95, "max_ms": 200, "class": "follow_up"}]})
    store = per_second([30.0] * 400)
    store.tags["follow_up"] = store.classes["shared"]  # a tag: kept in the totals, not in the time series
    assert not batchable(on_tag.objectives[0], store) and batchable(SPEC.objectives[0], store)
    assert [lk.state for lk in look(on_tag, store, 0.99, correlated=True)] == ["pass"]


def test_a_look_every_second_recounts_only_the_intervals_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    store = per_second([30.0] * 600, per_s=1)  # ten minutes of 1 s intervals
    look(SPEC, store, 0.99, correlated=True)
    reads: list[str] = []
    real = ClassInterval.read
    monkeypatch.setattr(ClassInterval, "read", lambda self, metric: reads.append(metric) or real(self, metric))
    look(SPEC, store, 0.99, correlated=True)
    assert reads == []
    store.add(RequestRecord("shared", 1000.0 + 599.5, e2e_us=405_000, ttft_us=400_000))  # the last second changes
    look(SPEC, store, 0.99, correlated=True)
    assert reads == ["ttft"]
    assert correlation.exceedance_counts(SPEC.objectives[0], store)[1599] == (1, 2)


def test_counts_stay_exact_when_another_process_adds_to_an_interval_already_counted() -> None:
    o = SPEC.objectives[0]
    store = per_second([30.0] * 300)  # 30 s: the first intervals long closed
    correlation.exceedance_counts(o, store)  # counted, and cached
    late = MetricsStore(interval_s=1.0)  # a worker's requests, in the first second and a new class
    late.add(RequestRecord("shared", 1000.2, e2e_us=405_000, ttft_us=400_000))
    late.add(RequestRecord("unique", 1001.5, e2e_us=405_000, ttft_us=400_000))
    store.merge(late)
    counts = correlation.exceedance_counts(o, store)
    assert (counts[1000], counts[1001]) == ((1, 11), (1, 11))
    correlation._COUNTED.pop(store.intervals)  # a fresh count agrees
    assert correlation.exceedance_counts(o, store) == counts
