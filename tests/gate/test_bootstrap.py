"""The regression judge's bootstrap on histogram buckets: right answers, and the same as resampling values."""

import numpy as np
import pytest
from slogate.slo.gate.bootstrap import change_interval_pct, histogram_arrays, resampled_percentiles_ms
from slogate.slo.gate.histogram import LatencyHistogram, nearest_rank


def lognormal_histogram(n: int, median_ms: float, sigma: float = 0.5, seed: int = 0, scale: float = 1.0):
    h = LatencyHistogram()
    for v in np.random.default_rng(seed).lognormal(np.log(median_ms), sigma, n):
        h.record_ms(float(v) * scale)
    return h


def per_value_interval(
    base: LatencyHistogram, cur: LatencyHistogram, p: float, rounds: int = 400, seed: int = 0
) -> tuple[float, float]:
    """The straightforward bootstrap: draw n values per round, take the nearest-rank sample (numpy's
    per-value draws and partial sort, not the bucket counts' multinomial of the code under test)."""
    rng = np.random.default_rng(seed)
    per_hist = []
    for h in (base, cur):
        values, counts = histogram_arrays(h)
        n = int(counts.sum())
        rank = nearest_rank(p, n)
        drawn = rng.choice(values, size=(rounds, n), p=counts / n)
        per_hist.append(np.partition(drawn, rank - 1, axis=1)[:, rank - 1])
    b, c = per_hist
    changes = np.sort((c - b) / b * 100)
    return float(changes[int(0.025 * (rounds - 1))]), float(changes[int(0.975 * (rounds - 1))])


def test_identical_distributions_give_an_interval_around_zero() -> None:
    base = lognormal_histogram(5000, 120, seed=1)
    cur = lognormal_histogram(5000, 120, seed=2)
    for p in (50, 95, 99):
        low, high = change_interval_pct(base, cur, p)
        assert low < 0 < high, (p, low, high)
        assert high - low < 25, (p, low, high)
    low, high = change_interval_pct(base, base, 95)
    assert low <= 0 <= high


def test_a_one_and_a_half_times_slower_run_is_wholly_above_ten_percent() -> None:
    base = lognormal_histogram(3000, 120, seed=1)
    cur = lognormal_histogram(3000, 120, seed=2, scale=1.5)
    for p in (50, 95, 99):
        low, high = change_interval_pct(base, cur, p)
        assert 10 < low < 50 < high < 90, (p, low, high)


def test_twelve_samples_give_a_wide_interval() -> None:
    small = change_interval_pct(lognormal_histogram(12, 120, seed=1), lognormal_histogram(12, 120, seed=2), 95)
    large = change_interval_pct(lognormal_histogram(12_000, 120, seed=1), lognormal_histogram(12_000, 120, seed=2), 95)
    assert small[1] - small[0] > 60, small
    assert small[1] - small[0] > 10 * (large[1] - large[0]), (small, large)


def test_same_seed_same_interval_other_seed_other_interval() -> None:
    base, cur = lognormal_histogram(2000, 120, seed=1), lognormal_histogram(2000, 130, seed=2)
    assert change_interval_pct(base, cur, 95, seed=7) == change_interval_pct(base, cur, 95, seed=7)
    assert change_interval_pct(base, cur, 95, seed=7) != change_interval_pct(base, cur, 95, seed=8)


def test_agrees_with_resampling_each_value() -> None:
    base = lognormal_histogram(3000, 120, seed=3)
    cur = lognormal_histogram(3000, 126, seed=4)  # +5%
    for p in (50, 95):
        buckets = change_interval_pct(base, cur, p)
        values = per_value_interval(base, cur, p)
        assert abs(buckets[0] - values[0]) < 2.0, (p, buckets, values)  # percentage points
        assert abs(buckets[1] - values[1]) < 2.0, (p, buckets, values)
        width_b, width_v = buckets[1] - buckets[0], values[1] - values[0]
        assert abs(width_b - width_v) < 0.25 * width_v, (p, buckets, values)


def test_replicates_have_the_distribution_of_per_value_resampling() -> None:
    """More rounds, one histogram: the replicates' mean and spread match drawing values one by one."""
    h = lognormal_histogram(1000, 50, sigma=0.8, seed=5)
    values, counts = histogram_arrays(h)
    n, rank = int(counts.sum()), nearest_rank(90, int(counts.sum()))
    buckets = resampled_percentiles_ms(values, counts, 90, 4000, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    drawn = np.sort(rng.choice(values, size=(4000, n), p=counts / n), axis=1)[:, rank - 1]
    assert abs(buckets.mean() - drawn.mean()) < 0.1 * drawn.std(), (buckets.mean(), drawn.mean())
    assert abs(buckets.std() - drawn.std()) < 0.1 * drawn.std(), (buckets.std(), drawn.std())


def test_a_zero_baseline_is_no_change_not_a_division_by_zero() -> None:
    zero, cur = LatencyHistogram(), LatencyHistogram()
    for _ in range(50):
        zero._h.record_value(0)  # record_us clamps to 1 us; a decoded one may hold 0
    values, _ = histogram_arrays(zero)
    assert values.tolist() == [0.0]
    for _ in range(50):
        cur.record_ms(5.0)
    assert change_interval_pct(zero, cur, 95) == (0.0, 0.0)


def test_chunked_rounds_match_unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    base, cur = lognormal_histogram(2000, 120, seed=1), lognormal_histogram(2000, 125, seed=2)
    values, counts = histogram_arrays(base)
    whole = resampled_percentiles_ms(values, counts, 99, 50, np.random.default_rng(3))
    by_row = []
    rng = np.random.default_rng(3)
    rank = nearest_rank(99, int(counts.sum()))
    for row in rng.multinomial(int(counts.sum()), counts / counts.sum(), size=50).cumsum(axis=1):
        by_row.append(values[np.searchsorted(row, rank)])
    assert whole.tolist() == by_row
    monkeypatch.setattr("slogate.slo.gate.bootstrap.MATRIX_ELEMENTS", len(counts) * 7)  # chunks of 7 rounds
    low, high = change_interval_pct(base, cur, 99, rounds=100)
    assert low < high


def test_single_bucket_and_bad_arguments() -> None:
    one = LatencyHistogram()
    for _ in range(10):
        one.record_ms(100.0)
    assert change_interval_pct(one, one, 99) == (0.0, 0.0)
    with pytest.raises(ValueError):
        change_interval_pct(one, LatencyHistogram(), 99)
    for bad in ({"percentile": 0}, {"percentile": 101}, {"percentile": 99, "rounds": 0}):
        with pytest.raises(ValueError):
            change_interval_pct(one, one, **{"percentile": 99, **bad})
