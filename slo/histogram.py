"""The one latency histogram type: HdrHistogram in microseconds, mergeable and serialisable.

Three significant digits keep every recorded value within 0.1% of the truth from 1 us to one
hour, so a p95 of 200 ms is reported as 200.0 +- 0.2 ms (Locust's own buckets are 10 ms wide
there). A percentile is the highest value equivalent to the recorded one, so a figure is never
under-reported, and over-reported by at most 0.1%. Histograms from several processes or machines
merge exactly with `merge`.
"""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3
REPORTED_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)


class LatencyHistogram:
    """Latencies recorded in microseconds and read back in milliseconds."""

    __slots__ = ("_h",)

    def __init__(self, hdr: HdrHistogram | None = None) -> None:
        self._h = hdr or HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)

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

    def percentile_ms(self, percentile: float) -> float | None:
        if not self.count:
            return None
        return self._h.get_value_at_percentile(percentile) / 1000

    def max_ms(self) -> float | None:
        return self._h.get_max_value() / 1000 if self.count else None

    def mean_ms(self) -> float | None:
        return self._h.get_mean_value() / 1000 if self.count else None

    def summary_ms(self) -> dict[str, float | int | None]:
        """The figures a report shows: p50/p90/p95/p99, max, mean (ms, 3 decimals) and count."""
        out: dict[str, float | int | None] = {}
        for p in REPORTED_PERCENTILES:
            v = self.percentile_ms(p)
            out[f"p{p:g}"] = None if v is None else round(v, 3)
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
        """Each distinct recorded value (ms) with its count, for charts and resampling."""
        return [
            (item.value_iterated_to / 1000, item.count_at_value_iterated_to) for item in self._h.get_recorded_iterator()
        ]
