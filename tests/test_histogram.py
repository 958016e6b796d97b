"""Exact percentiles: HDR histograms within 0.1% of the truth, merged without loss."""

import random

from slogate.slo.histogram import LatencyHistogram
from slogate.slo.metrics import MetricsStore
from slogate.slo.record import ErrorKind, RequestRecord


def true_percentile(values: list[float], p: float) -> float:
    """The nearest-rank percentile, the definition HdrHistogram uses."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


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
