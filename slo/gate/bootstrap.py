"""Bootstrap intervals of a percentile's change, resampled on histogram buckets rather than samples.

A bootstrap round of n samples drawn with replacement from a histogram is, bucket by bucket, a
draw of counts ~ Multinomial(n, bucket_counts / n) over its distinct recorded values: the same
distribution as drawing the n values one by one and sorting them, at the cost of one draw per
bucket (a few thousand at 3 significant digits) instead of n draws and a sort. The round's
percentile is the nearest-rank value (see `histogram`) read off the cumulative resampled counts.
Rounds are drawn together as a rounds x buckets matrix, in chunks that keep it under
`MATRIX_ELEMENTS`. Cost follows the buckets, not n: 400 rounds of a histogram of ~4,000 buckets take
about 0.15 s on one core, at 10,000 samples or 1,000,000 (benchmarks/judge_speed.py).
"""

from __future__ import annotations

import numpy as np
from slogate.slo.gate.histogram import LatencyHistogram, nearest_rank

MATRIX_ELEMENTS = 2_000_000  # largest rounds x buckets block held at once (16 MB of int64)


def histogram_arrays(h: LatencyHistogram) -> tuple[np.ndarray, np.ndarray]:
    """A histogram's distinct recorded values (ms, highest equivalent, ascending) and their counts (int64)."""
    return h.distinct_values_ms()


def resampled_percentiles_ms(
    values_ms: np.ndarray, counts: np.ndarray, percentile: float, rounds: int, rng: np.random.Generator
) -> np.ndarray:
    """`rounds` bootstrap replicates of the nearest-rank percentile of the histogram (values_ms, counts)."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n <= 0:
        raise ValueError("cannot resample an empty histogram")
    rank = nearest_rank(percentile, n)
    buckets = len(counts)
    if buckets == 1:
        return np.full(rounds, float(values_ms[0]))
    pvals = counts / n
    out = np.empty(rounds)
    chunk = max(1, MATRIX_ELEMENTS // buckets)
    for start in range(0, rounds, chunk):
        rows = min(chunk, rounds - start)
        cumulative = rng.multinomial(n, pvals, size=rows).cumsum(axis=1)  # rows x buckets, each row ends at n
        # One searchsorted for all rows: row r shifted up by r * n keeps the flattened matrix ascending.
        shift = np.arange(rows, dtype=np.int64) * n
        flat = (cumulative + shift[:, None]).ravel()
        at = np.searchsorted(flat, shift + rank, side="left") - np.arange(rows) * buckets
        out[start : start + rows] = values_ms[at]
    return out


def change_interval_pct(
    base: LatencyHistogram,
    cur: LatencyHistogram,
    percentile: float,
    rounds: int = 400,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The `confidence` bootstrap interval of (cur - base) / base * 100 at `percentile` (nearest rank), in %.

    Each round resamples both histograms' bucket counts; the bounds are the rounds' sorted changes at
    int(tail * (rounds - 1)) and int((1 - tail) * (rounds - 1)), tail = (1 - confidence) / 2. A round whose
    baseline percentile is 0 counts as no change. Deterministic for a seed.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    nearest_rank(percentile, 1)  # refuses a percentile outside (0, 100]
    rng = np.random.default_rng(seed)
    b = resampled_percentiles_ms(*histogram_arrays(base), percentile, rounds, rng)
    c = resampled_percentiles_ms(*histogram_arrays(cur), percentile, rounds, rng)
    nonzero = b != 0
    changes = np.where(nonzero, (c - b) / np.where(nonzero, b, 1.0) * 100, 0.0)
    changes.sort()
    tail = (1 - confidence) / 2
    return float(changes[int(tail * (rounds - 1))]), float(changes[int((1 - tail) * (rounds - 1))])
