"""The one latency histogram type: HdrHistogram in microseconds, mergeable and serialisable.

Three significant digits keep every recorded value within 0.1% of the truth from 1 us to one
hour, so a p95 of 200 ms is reported as 200.0 +- 0.2 ms (Locust's own buckets are 10 ms wide
there). Histograms from several processes or machines merge exactly with `merge`.

Percentiles are nearest-rank: the p-th percentile of n samples is the sample of rank
ceil(p/100 * n) (1-based, sorted ascending), i.e. the smallest recorded value with at least p% of
the samples at or below it; p=100 is the maximum. That is the definition a gate needs: "p99 <= X"
then means "at least 99% of the requests took <= X". hdrh's own `get_value_at_percentile` rounds
the rank (int(p/100 * n + 0.5)) and can answer one rank lower (194 samples: its p99 is the 192nd,
not the 193rd), which can pass a gate that 2 requests in 194 failed. The rank is computed from
the percentile as written in decimal (95 -> 19 of 20, never 20 by float round-off). The value
reported is the highest value equivalent to that sample in the histogram, so a figure is never
under-reported, and over-reported by at most 0.1%.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import cache, lru_cache
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

LOWEST_US = 1
_BULK_FROM = 8  # from this many values on, numpy records faster than one call per value
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
REPORTED_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)


def nearest_rank(percentile: float, n: int) -> int:
    """The 1-based rank of the p-th percentile of n samples: ceil(p/100 * n), at least 1.

    Computed exactly from the decimal form of p (Fraction("99.9"), not the binary float 99.90000000000000568),
    so p=95, n=20 gives 19 and p=99.9, n=1000 gives 999. p must be in (0, 100].
    """
    p = float(percentile)
    if not 0 < p <= 100:  # also refuses NaN
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    q = _decimal(p)
    return max(1, -(-q.numerator * n // (q.denominator * 100)))  # ceil(q * n / 100) in integers


@lru_cache(maxsize=64)
def _decimal(p: float) -> Fraction:
    """p's decimal form as a fraction (a judge asks for the same few percentiles many times)."""
    return Fraction(repr(p))


def _equivalent_range_us(h: HdrHistogram, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lowest value and the width of each counts index's equivalent range (hdrh's get_value_from_index
    and size of equivalent range), vectorised; int64."""
    half_mag, half = h.sub_bucket_half_count_magnitude, h.sub_bucket_half_count
    index = index.astype(np.int64, copy=False)
    bucket = (index >> half_mag) - 1
    sub = (index & (half - 1)) + half
    first = bucket < 0  # bucket 0 holds the sub-buckets below half too
    sub = np.where(first, sub - half, sub)
    shift = np.where(first, 0, bucket) + h.unit_magnitude
    return sub << shift, np.int64(1) << shift


def highest_equivalent_us(h: HdrHistogram, index: np.ndarray) -> np.ndarray:
    """hdrh's get_highest_equivalent_value(get_value_from_index(i)), vectorised over counts indexes."""
    lowest, width = _equivalent_range_us(h, index)
    return lowest + width - 1


def _freeable(h: HdrHistogram) -> HdrHistogram:
    """hdrh's histogram and its encoder (which holds the ~90 KB counts array) refer to each other,
    so a histogram let go waits for Python's cyclic collector, which runs rarely once a process
    holds many objects: an hour's run that closes and decodes interval histograms grew by ~70 MB
    that way (benchmarks/RESULTS.md, soak). A weak back-reference lets reference counting free
    it the moment it is dropped; the encoder is only used through its histogram."""
    h.encoder.histogram = weakref.proxy(h)
    return h


class LatencyHistogram:
    """Latencies recorded in microseconds and read back in milliseconds."""

    __slots__ = ("_h",)

    def __init__(self, hdr: HdrHistogram | None = None) -> None:
        self._h = _freeable(hdr or HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS))

    def record_us(self, value_us: int) -> None:
        # Values outside the trackable range are clamped rather than dropped: a sample is never lost.
        if value_us < LOWEST_US:
            value_us = LOWEST_US
        elif value_us > HIGHEST_US:
            value_us = HIGHEST_US
        self._h.record_value(value_us)

    def record_ms(self, value_ms: float) -> None:
        self.record_us(round(value_ms * 1000))

    @property
    def count(self) -> int:
        return self._h.get_total_count()

    def _recorded(self) -> tuple[np.ndarray, np.ndarray]:
        """The counts-array indexes that hold samples, ascending, and their counts (int64)."""
        counts = np.ctypeslib.as_array(self._h.counts)  # a view of hdrh's counters, no copy
        index = np.flatnonzero(counts)
        return index, counts[index].astype(np.int64)

    def distinct_values_ms(self) -> tuple[np.ndarray, np.ndarray]:
        """Each distinct recorded value (ms, highest equivalent; float64, ascending) and its count (int64)."""
        index, counts = self._recorded()
        return highest_equivalent_us(self._h, index) / 1000, counts

    def percentiles_ms(self, percentiles: Iterable[float]) -> list[float] | None:
        """Nearest-rank percentiles (see the module docstring), in one pass over the counts; None when empty."""
        ps = list(percentiles)
        for p in ps:
            nearest_rank(p, 1)  # validates before the empty check, so a bad p never passes silently
        index, counts = self._recorded()
        if not len(index):
            return None
        cumulative = np.cumsum(counts)
        n = int(cumulative[-1])
        at = np.searchsorted(cumulative, [nearest_rank(p, n) for p in ps], side="left")
        return (highest_equivalent_us(self._h, index[at]) / 1000).tolist()

    def percentile_ms(self, percentile: float) -> float | None:
        """The nearest-rank p-th percentile, p in (0, 100] (100 is the max); None when empty."""
        values = self.percentiles_ms((percentile,))
        return None if values is None else values[0]

    def max_ms(self) -> float | None:
        return self._h.get_max_value() / 1000 if self.count else None

    def mean_ms(self) -> float | None:
        """hdrh's mean (each sample at the middle of its equivalent range), the same float, without hdrh's
        per-index Python iterator (about 100x faster on a wide histogram)."""
        index, counts = self._recorded()
        if not len(index):
            return None
        lowest, width = _equivalent_range_us(self._h, index)
        middles = (lowest + (width >> 1)).tolist()
        total = sum(c * m for c, m in zip(counts.tolist(), middles, strict=True))  # exact, in Python ints
        return float(total) / sum(counts.tolist()) / 1000  # float() first, as hdrh does

    def summary_ms(self) -> dict[str, float | int | None]:
        """The figures a report shows: p50/p90/p95/p99, max, mean (ms, 3 decimals) and count."""
        out: dict[str, float | int | None] = {}
        values = self.percentiles_ms(REPORTED_PERCENTILES)
        for i, p in enumerate(REPORTED_PERCENTILES):
            out[f"p{p:g}"] = None if values is None else round(values[i], 3)
        mx, mean = self.max_ms(), self.mean_ms()
        out["max"] = None if mx is None else round(mx, 3)
        out["mean"] = None if mean is None else round(mean, 3)
        out["count"] = self.count
        return out

    def merge(self, other: LatencyHistogram) -> None:
        if other.count:
            self._h.add(other._h)

    def copy(self) -> LatencyHistogram:
        clone = LatencyHistogram()
        clone.merge(self)
        return clone

    def reset(self) -> None:
        self._h.reset()

    def encode(self) -> str:
        """Compressed, base64 text form (HdrHistogram's standard encoding, readable by other HDR ports)."""
        return self._h.encode().decode("ascii")

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        return cls(HdrHistogram.decode(text.encode("ascii")))

    def values_and_counts_ms(self) -> list[tuple[float, int]]:
        """Each distinct recorded value (ms, highest equivalent) with its count, for charts and resampling."""
        values, counts = self.distinct_values_ms()
        return list(zip(values.tolist(), counts.tolist(), strict=True))


def merged(hists: Iterable[LatencyHistogram | None]) -> LatencyHistogram | None:
    """Several histograms added into a new one; None when all are empty."""
    present = [h for h in hists if h is not None and h.count]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    out = LatencyHistogram()
    for h in present:
        out.merge(h)
    return out


def combined_percentiles_ms(
    hists: list[LatencyHistogram], percentiles: Sequence[float]
) -> tuple[int, list[float] | None]:
    """Samples and nearest-rank `percentiles` (ms) of the histograms taken together, from their
    summed counts (no merged histogram allocated); the same figures as merging them and calling
    `percentiles_ms`."""
    present = [h for h in hists if h.count]
    if not present:
        return 0, None
    if len(present) == 1:
        h = present[0]
        values = h.percentiles_ms(percentiles) or []
        return h.count, [round(v, 3) for v in values]
    counts = np.ctypeslib.as_array(present[0]._h.counts).astype(np.int64)
    for h in present[1:]:
        counts += np.ctypeslib.as_array(h._h.counts).view(np.int64)
    index = np.flatnonzero(counts)
    cumulative = np.cumsum(counts[index])
    n = int(cumulative[-1])
    at = np.searchsorted(cumulative, [nearest_rank(p, n) for p in percentiles], side="left")
    values = highest_equivalent_us(present[0]._h, index[at]) / 1000
    return n, [round(v, 3) for v in values.tolist()]


class ValueBatch:
    """Microsecond values turned once into HdrHistogram counts indexes, then recorded into any
    number of `LatencyHistogram`s (all share one layout): the same counts as `record_us` for
    each value (clamped to the trackable range), with numpy instead of one Python call per value.
    A response's ITL gaps go into the run's and the interval's histogram: for 128 gaps, ~30 us for
    both together instead of ~350 us for each (measured on this 2-core VM)."""

    __slots__ = ("bins", "first", "n", "range", "small")

    def __init__(self, values_us: list[int]) -> None:
        self.n = len(values_us)
        self.small = values_us if self.n < _BULK_FROM else None
        if self.small is not None:
            return
        h = _layout()
        v = np.asarray(values_us, dtype=np.int64)
        lo, hi = int(v.min()), int(v.max())
        if lo < LOWEST_US or hi > HIGHEST_US:
            v = np.clip(v, LOWEST_US, HIGHEST_US)
            lo, hi = max(lo, LOWEST_US), min(hi, HIGHEST_US)
        # hdrh's _counts_index_for, vectorised: the bit length of (v | sub_bucket_mask) is frexp's
        # exponent (exact: every value is below 2**53).
        pow2ceiling = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
        bucket = pow2ceiling - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
        sub = v >> (bucket + h.unit_magnitude)
        index = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + (sub - h.sub_bucket_half_count)
        # Counts per index over the span the values cover (gaps of one response span a few
        # hundred indexes): one bincount here, then one slice addition per histogram.
        self.first = int(index.min())
        self.bins = np.bincount(index - self.first)
        self.range = (lo, hi)

    def record_into(self, hist: LatencyHistogram) -> None:
        if self.small is not None:
            for value in self.small:
                hist.record_us(value)
            return
        h = hist._h
        counts = np.ctypeslib.as_array(h.counts)
        counts[self.first : self.first + len(self.bins)] += self.bins.astype(counts.dtype, copy=False)
        h.total_count += self.n
        h.min_value = min(h.min_value, self.range[0])
        h.max_value = max(h.max_value, self.range[1])


@cache
def _layout() -> Any:
    """hdrh's bucket layout of every LatencyHistogram (one reference instance)."""
    return LatencyHistogram()._h


def record_many_us(hist: LatencyHistogram, values_us: list[int]) -> None:
    """`record_us` for each value, in one numpy pass (see `ValueBatch`)."""
    ValueBatch(values_us).record_into(hist)
