"""Time series: per-interval HdrHistograms per request class of the latency metrics kept in
intervals (slo/gate/latency_metrics.py `in_intervals`: TTFT, ITL and E2E).

Every request belongs to interval `k = floor(started_at / interval_s)`: the index counts whole
intervals of Unix time, so every process of a distributed run (same `--slo-interval-s`, clocks
synced by NTP) files a request under the same index without any coordination, and the master
merges workers' intervals exactly, index by index. Interval k covers `[k * interval_s, (k + 1) *
interval_s)` of wall-clock time by request start; the first and last intervals of a run are partial.

Memory grows by a few KB an interval, not by the requests: only the `LIVE_INTERVALS` most
recently touched intervals keep live histograms (a full-range histogram is ~190 KB of counts); the
others are kept in HdrHistogram's compressed base64 form (a few hundred bytes for an interval's
TTFT), with their chart figures packed (`pack_figures`), and are decoded again only if a late record or
a worker's report touches them (~3.6 KB an interval of two classes: 2.6 MB for an hour of 5 s
intervals; benchmarks/RESULTS.md, soak).

The counters and histograms follow `ClassMetrics.add` exactly (what counts as a request, a
failure, a TTFT sample), so the intervals of a class add up to its totals; tests check that.

Wire form (inside `MetricsStore.to_wire()`, hence in every worker report and in `measurements`
of `slo-report.json`):

    {"interval_s": 5.0, "metrics": ["ttft", "itl", "e2e"],
     "data": {"<k>": {"<class>": {"requests": n, "failures": n, "errors_by_kind": {...},
                                  "output_tokens": n, "dropped": n, "unfinished": n,
                                  "latency": {"ttft": "HISTF...", "itl": "...", "e2e": "..."}}}}}

Zero counters and empty histograms are left out. `all` is never stored: it is every class merged.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, OrderedDict
from collections.abc import Iterator
from typing import Any

from slogate.slo.gate.histogram import LatencyHistogram, combined_percentiles_ms, merged
from slogate.slo.gate.latency_metrics import (
    INTERVAL_METRICS,
    SINGLE_IN_INTERVALS,
    UNFINISHED_IN_INTERVALS,
    Batches,
    batches,
)
from slogate.slo.gate.record import ALL, ErrorKind, RequestRecord

DEFAULT_INTERVAL_S = 5.0
LIVE_INTERVALS = 4  # intervals kept as live histograms (the most recently touched ones)
SERIES_PERCENTILES = (50, 95, 99)
MAX_FILLED_INTERVALS = 50_000  # beyond this span, the series lists only the intervals that have data


class ClassInterval:
    """One request class in one interval: counters, and histograms live or encoded."""

    __slots__ = ("dropped", "encoded", "errors_by_kind", "failures", "live", "output_tokens", "requests", "unfinished")

    def __init__(self) -> None:
        self.live: dict[str, LatencyHistogram] = {}
        self.encoded: dict[str, str] = {}
        self.requests = 0
        self.failures = 0
        self.dropped = 0
        self.unfinished = 0
        self.output_tokens = 0
        self.errors_by_kind: Counter[str] = Counter()

    def _hist(self, metric: str) -> LatencyHistogram:
        """The live histogram of `metric`, decoded again if it had been closed."""
        h = self.live.get(metric)
        if h is None:
            text = self.encoded.pop(metric, None)
            h = self.live[metric] = LatencyHistogram.decode(text) if text else LatencyHistogram()
        return h

    def read(self, metric: str) -> LatencyHistogram | None:
        """The histogram of `metric` for reading (decoded, not reopened); None when empty."""
        h = self.live.get(metric)
        if h is not None:
            return h if h.count else None
        text = self.encoded.get(metric)
        return LatencyHistogram.decode(text) if text else None

    def count(self, metric: str) -> int:
        h = self.live.get(metric)
        if h is not None:
            return h.count
        text = self.encoded.get(metric)
        return LatencyHistogram.decode(text).count if text else 0

    def add(self, rec: RequestRecord, many: Batches | None = None) -> None:
        """The same rules as `ClassMetrics.add` (slo/gate/metrics.py), for the metrics kept in
        intervals (`LatencyMetric.in_intervals`)."""
        if rec.error_kind == ErrorKind.DROPPED:
            self.dropped += 1
            return
        if rec.error_kind == ErrorKind.UNFINISHED:
            self.unfinished += 1
            for name, waited in UNFINISHED_IN_INTERVALS:
                self._hist(name).record_us(waited(rec))
            return
        if rec.error_kind == ErrorKind.CANCELLED:  # --cancel-fraction: no request or failure, its TTFT counts
            for name, waited in UNFINISHED_IN_INTERVALS:  # or the time it had waited (ClassMetrics.add)
                self._hist(name).record_us(waited(rec))
            return
        self.requests += 1
        if rec.error_kind is not None:
            self.failures += 1
            self.errors_by_kind[str(rec.error_kind)] += 1
            return
        for name, value_of in SINGLE_IN_INTERVALS:
            value_us = value_of(rec)
            if value_us is not None:
                self._hist(name).record_us(value_us)
        for name, batch in batches(rec) if many is None else many:
            if name in INTERVAL_METRICS:
                batch.record_into(self._hist(name))
        self.output_tokens += rec.completion_tokens or 0

    def close(self) -> None:
        """Encode the live histograms and let them go."""
        for metric, h in self.live.items():
            if h.count:
                self.encoded[metric] = h.encode()
        self.live.clear()

    def merge_wire(self, d: dict[str, Any]) -> None:
        self.requests += d.get("requests", 0)
        self.failures += d.get("failures", 0)
        self.dropped += d.get("dropped", 0)
        self.unfinished += d.get("unfinished", 0)
        self.output_tokens += d.get("output_tokens", 0)
        self.errors_by_kind.update(d.get("errors_by_kind") or {})
        for metric, text in (d.get("latency") or {}).items():
            if metric in self.live or metric in self.encoded:
                self._hist(metric).merge(LatencyHistogram.decode(text))
            else:
                self.encoded[metric] = text  # nothing to add it to: keep it as it came

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("requests", "failures", "dropped", "unfinished", "output_tokens"):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.errors_by_kind:
            out["errors_by_kind"] = dict(self.errors_by_kind)
        latency = {m: h.encode() for m, h in self.live.items() if h.count}
        latency.update(self.encoded)
        if latency:
            out["latency"] = {m: latency[m] for m in INTERVAL_METRICS if m in latency}
        return out


# A closed interval's figures, packed: its class names, then per metric and class the sample count
# and SERIES_PERCENTILES in one array of doubles (count -1: the class has no such histogram; NaN:
# no percentile). ~0.4 KB an interval instead of ~2.5 KB of nested dicts, lists and floats: an
# hour's 720 intervals of 5 s stay cached for the charts in ~0.3 MB.
_Packed = tuple[tuple[str, ...], array]
_ABSENT = -1.0


def pack_figures(figures: dict[str, Any]) -> _Packed:
    classes = tuple(sorted({cls for by_class in figures.values() for cls in by_class}))
    values = array("d")
    for metric in INTERVAL_METRICS:
        by_class = figures[metric]
        for cls in classes:
            count, percentiles = by_class.get(cls, (_ABSENT, None))
            values.append(count)
            values.extend(percentiles if percentiles is not None else [math.nan] * len(SERIES_PERCENTILES))
    return classes, values


def unpack_figures(packed: _Packed) -> dict[str, Any]:
    classes, values = packed
    width = 1 + len(SERIES_PERCENTILES)
    out: dict[str, Any] = {}
    at = 0
    for metric in INTERVAL_METRICS:
        figures = out[metric] = {}
        for cls in classes:
            count, *percentiles = values[at : at + width]
            at += width
            if count != _ABSENT:
                figures[cls] = (int(count), None if math.isnan(percentiles[0]) else percentiles)
    return out


class IntervalSeries:
    """The per-interval figures of a run, keyed by interval index (see the module docstring)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, live_limit: int = LIVE_INTERVALS) -> None:
        self.interval_s = float(interval_s or 0.0)
        self.live_limit = live_limit
        self.intervals: dict[int, dict[str, ClassInterval]] = {}
        self._live: OrderedDict[int, None] = OrderedDict()  # indexes with live histograms, oldest touch first
        self._stats: dict[int, _Packed] = {}  # figures of intervals not touched since they were computed
        self.changes: dict[int, int] = {}  # per interval, how often it changed: a reader's cache key
        self.mismatched = 0  # wire intervals refused: recorded with another interval length

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    @property
    def is_empty(self) -> bool:
        return not self.intervals

    def index(self, t: float) -> int:
        return math.floor(t / self.interval_s)

    def _slot(self, idx: int, request_class: str) -> ClassInterval:
        by_class = self.intervals.get(idx)
        if by_class is None:
            by_class = self.intervals[idx] = {}
        ci = by_class.get(request_class)
        if ci is None:
            ci = by_class[request_class] = ClassInterval()
        self._touch(idx)
        return ci

    def _changed(self, idx: int) -> None:
        """Interval `idx` changed: its cached figures go, its change count (`changes`) rises."""
        self._stats.pop(idx, None)
        self.changes[idx] = self.changes.get(idx, 0) + 1

    def _touch(self, idx: int) -> None:
        self._changed(idx)
        live = self._live
        if idx in live:
            live.move_to_end(idx)
            return
        live[idx] = None
        while len(live) > self.live_limit:
            oldest, _ = live.popitem(last=False)
            self._close(oldest)

    def _close(self, idx: int) -> None:
        # This runs in the greenlet that finished a request: the figures from the live histograms
        # (~0.3 ms for the interval), then encoding (~0.2 ms a histogram).
        self._stats[idx] = pack_figures(self._compute_stats(idx))
        for ci in (self.intervals.get(idx) or {}).values():
            ci.close()

    def add(self, rec: RequestRecord, many: Batches | None = None) -> None:
        """File `rec` under its interval; `many`: its `batches` already indexed."""
        if self.interval_s > 0:
            self._slot(self.index(rec.started_at), rec.request_class).add(rec, many)

    def live_count(self) -> int:
        return sum(1 for by_class in self.intervals.values() for ci in by_class.values() if ci.live)

    # -- the wire ------------------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any] | None:
        if not self.intervals:
            return None
        return {
            "interval_s": self.interval_s,
            "metrics": list(INTERVAL_METRICS),
            "data": {
                str(idx): {cls: ci.to_wire() for cls, ci in sorted(by_class.items())}
                for idx, by_class in sorted(self.intervals.items())
            },
        }

    def merge_wire(self, data: dict[str, Any] | None) -> None:
        """Add another process's (or a saved report's) intervals, index by index."""
        if not data or not data.get("data"):
            return
        interval_s = float(data["interval_s"])
        if not self.intervals:
            self.interval_s = interval_s
        elif not math.isclose(interval_s, self.interval_s):
            self.mismatched += len(data["data"])
            return
        for key, by_class in data["data"].items():
            idx = int(key)
            for cls, d in by_class.items():
                existing = self.intervals.get(idx, {}).get(cls)
                if existing is None and idx not in self._live:
                    # A new interval arrives closed: keep its encoding as is, no decoding.
                    ci = self.intervals.setdefault(idx, {})[cls] = ClassInterval()
                    ci.merge_wire(d)
                    self._changed(idx)
                else:
                    self._slot(idx, cls).merge_wire(d)

    def merge(self, other: IntervalSeries) -> None:
        self.merge_wire(other.to_wire())

    @classmethod
    def from_wire(cls, data: dict[str, Any] | None, interval_s: float = DEFAULT_INTERVAL_S) -> IntervalSeries:
        series = cls(interval_s)
        series.merge_wire(data)
        return series

    # -- reading ---------------------------------------------------------------------------------

    def class_names(self) -> list[str]:
        names = {cls for by_class in self.intervals.values() for cls in by_class}
        return [ALL, *sorted(names)]

    def histograms(self, idx: int, metric: str) -> dict[str, LatencyHistogram]:
        """The interval's histograms of `metric` per class, `all` (every class merged) first; empty ones left out."""
        by_class = self.intervals.get(idx) or {}
        out = {cls: h for cls, ci in sorted(by_class.items()) if (h := ci.read(metric)) is not None}
        total = merged(out.values())
        return {ALL: total, **out} if total is not None else {}

    def _compute_stats(self, idx: int) -> dict[str, Any]:
        by_class = self.intervals.get(idx) or {}
        out: dict[str, Any] = {}
        for metric in INTERVAL_METRICS:
            per_class = {cls: h for cls, ci in by_class.items() if (h := ci.read(metric)) is not None}
            figures = {cls: combined_percentiles_ms([h], SERIES_PERCENTILES) for cls, h in per_class.items()}
            figures[ALL] = combined_percentiles_ms(list(per_class.values()), SERIES_PERCENTILES)
            out[metric] = figures
        return out

    def stats(self, idx: int) -> dict[str, Any]:
        """{metric: {class: (count, [p50, p95, p99] ms or None)}}, cached until the interval changes."""
        packed = self._stats.get(idx)
        if packed is not None:
            return unpack_figures(packed)
        figures = self._compute_stats(idx)
        if idx not in self._live:
            self._stats[idx] = pack_figures(figures)
        return figures

    def indexes(self) -> list[int]:
        keys = sorted(self.intervals)
        if keys and keys[-1] - keys[0] < MAX_FILLED_INTERVALS:
            return list(range(keys[0], keys[-1] + 1))
        return keys

    def series(self) -> dict[str, Any]:
        """The charts' data: per interval and class, TTFT/ITL/E2E percentiles and counts, requests,
        failures, errors by kind and output tokens. Interval starts in Unix seconds (`t`)."""
        indexes = self.indexes()
        classes = self.class_names()
        n = len(indexes)
        latency: dict[str, Any] = {
            m: {c: {**{f"p{p:g}": [None] * n for p in SERIES_PERCENTILES}, "count": [0] * n} for c in classes}
            for m in INTERVAL_METRICS
        }
        requests = {c: [0] * n for c in classes}
        failures = {c: [0] * n for c in classes}
        errors: dict[str, list[int]] = {}
        output_tokens = [0] * n
        for i, idx in enumerate(indexes):
            by_class = self.intervals.get(idx)
            if not by_class:
                continue
            for cls, ci in by_class.items():
                requests[cls][i] += ci.requests
                requests[ALL][i] += ci.requests
                failures[cls][i] += ci.failures
                failures[ALL][i] += ci.failures
                output_tokens[i] += ci.output_tokens
                for kind, count in ci.errors_by_kind.items():
                    errors.setdefault(kind, [0] * n)[i] += count
            for metric, figures in self.stats(idx).items():
                for cls, (count, values) in figures.items():
                    slot = latency[metric][cls]
                    slot["count"][i] = count
                    if values is not None:
                        for p, v in zip(SERIES_PERCENTILES, values, strict=True):
                            slot[f"p{p:g}"][i] = v
        return {
            "interval_s": self.interval_s,
            "t": [idx * self.interval_s for idx in indexes],
            "classes": classes,
            "latency": latency,
            "requests": requests,
            "failures": failures,
            "errors_by_kind": dict(sorted(errors.items())),
            "output_tokens": output_tokens,
        }

    def totals(self, metric: str) -> dict[str, int]:
        """Samples of `metric` per class over every interval (what the report's totals must equal)."""
        out: Counter[str] = Counter()
        for by_class in self.intervals.values():
            for cls, ci in by_class.items():
                c = ci.count(metric)
                out[cls] += c
                out[ALL] += c
        return dict(out)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self.intervals))
