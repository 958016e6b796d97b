"""Exact percentiles: HDR histograms within 0.1% of the truth, merged without loss."""

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from slogate.slo.gate.histogram import LatencyHistogram, _equivalent_range_us, nearest_rank
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord


def true_percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile: the sample of rank ceil(p/100 * n), p read as written in decimal."""
    ordered = sorted(values)
    rank = max(1, math.ceil(Fraction(str(p)) * len(ordered) / 100))
    return ordered[rank - 1]


def histogram_of_ms(values_ms: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    for v in values_ms:
        h.record_ms(v)
    return h


def assert_reports(got: float | None, sample_ms: float) -> None:
    """The reported figure is the sample's highest equivalent value: never below it, at most 0.1% above."""
    assert got is not None
    assert sample_ms <= got <= sample_ms * 1.001, (got, sample_ms)


def test_p95_of_a_known_distribution_is_within_one_percent() -> None:
    rng = random.Random(7)
    samples_ms = [rng.lognormvariate(5.0, 0.35) for _ in range(50_000)]  # median ~148 ms, p95 ~264 ms
    h = LatencyHistogram()
    for v in samples_ms:
        h.record_ms(v)
    for p in (50, 90, 95, 99):
        truth = true_percentile(samples_ms, p)
        got = h.percentile_ms(p)
        assert abs(got - truth) <= max(0.01 * truth, 1.0), (p, got, truth)
    assert h.count == 50_000


def test_value_near_a_200ms_target_is_not_rounded_to_a_bucket() -> None:
    h = LatencyHistogram()
    for _ in range(100):
        h.record_ms(204.6)  # Locust would report this as 200
    assert 204.4 <= h.percentile_ms(95) <= 204.9


def test_merge_of_split_samples_equals_the_whole() -> None:
    rng = random.Random(3)
    values = [rng.uniform(1, 900) for _ in range(9_000)]
    whole, parts = LatencyHistogram(), [LatencyHistogram() for _ in range(3)]
    for i, v in enumerate(values):
        whole.record_ms(v)
        parts[i % 3].record_ms(v)
    merged = LatencyHistogram()
    for part in parts:
        merged.merge(LatencyHistogram.decode(part.encode()))  # through the wire format, as workers send it
    assert merged.count == whole.count
    for p in (50, 95, 99, 99.9):
        assert merged.percentile_ms(p) == whole.percentile_ms(p)


def test_out_of_range_values_are_clamped_not_lost() -> None:
    h = LatencyHistogram()
    h.record_us(0)
    h.record_us(10**13)
    assert h.count == 2


def rec(cls: str, ttft_ms: float, ok: bool = True) -> RequestRecord:
    return RequestRecord(
        cls,
        started_at=1000.0,
        e2e_us=int(ttft_ms * 1000) + 50_000,
        ttft_us=int(ttft_ms * 1000),
        itl_us=[5_000, 6_000],
        completion_tokens=3,
        error_kind=None if ok else ErrorKind.HTTP_5XX,
    )


def test_store_keeps_classes_apart_and_derives_all() -> None:
    store = MetricsStore()
    for _ in range(10):
        store.add(rec("shared", 20))
        store.add(rec("unique", 300))
    store.add(rec("unique", 0, ok=False))
    assert 20.0 <= store.get("shared").latency["ttft"].percentile_ms(50) <= 20.02
    assert 300.0 <= store.get("unique").latency["ttft"].percentile_ms(50) <= 300.3
    total = store.get("all")
    assert total.requests == 21 and total.failures == 1
    assert total.errors_by_kind == {"http_5xx": 1}
    assert total.latency["ttft"].count == 20
    assert total.latency["itl"].count == 40
    assert 25.0 <= total.latency["tpot"].percentile_ms(50) <= 25.03  # (e2e - ttft) / (3 - 1) = 50 / 2


def test_store_round_trips_through_the_wire_format() -> None:
    store = MetricsStore()
    for i in range(100):
        store.add(rec("shared" if i % 2 else "unique", 10 + i))
    store.warmup_excluded = 4
    back = MetricsStore.from_wire(store.to_wire())
    assert back.summary() == store.summary()
    assert back.warmup_excluded == 4


# Nearest rank: the value at rank ceil(p/100 * n), where hdrh's rounding (int(p/100 * n + 0.5)) can
# answer one rank lower. Samples 10, 20, ... ms apart, so a rank off by one is 10 ms off.


def test_p99_of_194_samples_is_the_193rd_not_the_192nd() -> None:
    values = [10.0 * i for i in range(1, 195)]  # 10 .. 1940 ms
    h = histogram_of_ms(values)
    assert nearest_rank(99, 194) == 193
    assert_reports(h.percentile_ms(99), 1930.0)
    assert h._h.get_value_at_percentile(99) / 1000 < 1930.0  # what hdrh alone says: the 192nd


def test_p95_of_20_samples_is_the_19th_exactly() -> None:
    values = [10.0 * i for i in range(1, 21)]
    assert nearest_rank(95, 20) == 19
    assert_reports(histogram_of_ms(values).percentile_ms(95), 190.0)


def test_decimal_percentiles_are_not_pushed_up_by_float_error() -> None:
    assert nearest_rank(7, 100) == 7  # in floats, 7 / 100 * 100 is 7.000000000000001
    assert nearest_rank(55, 100) == 55  # 55 / 100 * 100 is 55.00000000000001
    assert nearest_rank(14, 50) == 7
    assert nearest_rank(99.9, 1000) == 999  # 99.9 / 100 * 1000 is 999.0000000000001 in floats
    assert nearest_rank(99.99, 10_000) == 9999
    assert nearest_rank(0.1, 1000) == 1
    assert nearest_rank(90, 10) == 9
    assert nearest_rank(99.9, 1001) == 1000  # 999.999 -> 1000
    values = [float(i) for i in range(1, 1001)]
    assert_reports(histogram_of_ms(values).percentile_ms(99.9), 999.0)


def test_one_sample_is_every_percentile() -> None:
    h = histogram_of_ms([123.456])
    for p in (0.001, 1, 50, 95, 99, 99.9, 100):
        assert_reports(h.percentile_ms(p), 123.456)


def test_small_n_ranks() -> None:
    h = histogram_of_ms([30.0, 10.0, 20.0])
    assert_reports(h.percentile_ms(50), 20.0)  # ceil(1.5) = 2
    assert_reports(h.percentile_ms(40), 20.0)  # ceil(1.2) = 2; hdrh would say the 1st (10 ms)
    assert_reports(h.percentile_ms(33.33), 10.0)  # ceil(0.9999) = 1
    assert_reports(h.percentile_ms(33.34), 20.0)  # ceil(1.0002) = 2
    assert_reports(h.percentile_ms(66.67), 30.0)  # ceil(2.0001) = 3
    assert h._h.get_value_at_percentile(40) / 1000 < 20.0


def test_p100_is_the_max() -> None:
    rng = random.Random(5)
    h = histogram_of_ms([rng.uniform(1, 5000) for _ in range(777)])
    assert h.percentile_ms(100) == h.max_ms()


@pytest.mark.parametrize("p", [0, -1, 100.0001, 101, float("nan")])
def test_percentile_outside_0_100_is_refused(p: float) -> None:
    with pytest.raises(ValueError):
        histogram_of_ms([1.0]).percentile_ms(p)
    with pytest.raises(ValueError):
        LatencyHistogram().percentile_ms(p)


def test_empty_histogram_gives_none() -> None:
    h = LatencyHistogram()
    assert h.percentile_ms(99) is None
    assert h.percentiles_ms((50, 99)) is None
    assert h.summary_ms() == {"p50": None, "p90": None, "p95": None, "p99": None, "max": None, "mean": None, "count": 0}
    values, counts = h.distinct_values_ms()
    assert len(values) == len(counts) == 0


def test_summary_uses_the_same_nearest_rank_percentiles() -> None:
    rng = random.Random(11)
    values = [rng.lognormvariate(4, 1) for _ in range(194)]
    h = histogram_of_ms(values)
    summary = h.summary_ms()
    for p in (50, 90, 95, 99):
        assert summary[f"p{p:g}"] == round(h.percentile_ms(p), 3)
        assert_reports(h.percentile_ms(p), true_percentile([round(v * 1000) / 1000 for v in values], p))
    assert summary["mean"] == round(h._h.get_mean_value() / 1000, 3)
    assert summary["max"] == round(h._h.get_max_value() / 1000, 3)


def test_nearest_rank_matches_a_sorted_list_for_random_n() -> None:
    rng = random.Random(2024)
    for _ in range(300):
        n = rng.choice([rng.randint(1, 30), rng.randint(1, 3000)])
        scale = rng.choice([0.01, 1.0, 100.0, 10_000.0])  # from microseconds to tens of seconds
        values_us = [max(1, round(rng.expovariate(1.0) * scale * 1000)) for _ in range(n)]
        h = LatencyHistogram()
        for v in values_us:
            h.record_us(v)
        ps = [50, 90, 95, 99, 99.9, 100, round(rng.uniform(0.01, 100), 2) or 0.01, round(rng.uniform(90, 100), 3)]
        got = h.percentiles_ms(ps)
        assert got is not None
        for p, value in zip(ps, got, strict=True):
            assert_reports(value, true_percentile(values_us, p) / 1000)
            assert h.percentile_ms(p) == value


def test_vectorised_bucket_values_match_hdrh() -> None:
    h = LatencyHistogram()._h
    lowest, width = _equivalent_range_us(h, np.arange(h.counts_len))
    for i in range(h.counts_len):
        value = h.get_value_from_index(i)
        assert lowest[i] == h.get_lowest_equivalent_value(value)
        assert lowest[i] + width[i] - 1 == h.get_highest_equivalent_value(value)


def test_distinct_values_mean_and_values_and_counts_match_hdrh() -> None:
    rng = random.Random(9)
    h = LatencyHistogram()
    for _ in range(20_000):
        h.record_us(int(rng.lognormvariate(rng.choice([3, 8, 14, 20]), 1)))
    via_iterator = [(i.value_iterated_to / 1000, i.count_at_value_iterated_to) for i in h._h.get_recorded_iterator()]
    assert h.values_and_counts_ms() == via_iterator
    values, counts = h.distinct_values_ms()
    assert values.tolist() == [v for v, _ in via_iterator]
    assert counts.tolist() == [c for _, c in via_iterator]
    assert int(counts.sum()) == h.count
    assert h.mean_ms() == h._h.get_mean_value() / 1000
    decoded = LatencyHistogram.decode(h.encode())
    assert decoded.percentiles_ms((50, 99, 100)) == h.percentiles_ms((50, 99, 100))
    assert decoded.mean_ms() == h.mean_ms()
