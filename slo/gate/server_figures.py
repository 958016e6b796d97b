"""Server-side figures from the target's Prometheus `/metrics` (scraped by slo/plugin/scraper.py).

Counters are read as the change between the first and last scrape (prefix-cache hit rate over
the run, preemptions), gauges as their peak and mean (KV-cache usage, requests waiting and
running), and the server's TTFT histogram as the change of its buckets, so the report can set
the server's TTFT beside the client's: the gap is time spent outside the engine (network, HTTP
server, queueing before the engine sees the request).

Each scrape's time and its few charted figures (KV-cache usage, requests waiting and running,
and the prefix-cache counters) are also kept as a time series (`summary()["series"]`, at most
`MAX_POINTS` points: beyond that every other point is dropped, the counters stay exact).

A target without `/metrics` gives figures that are `available: false`, with the reason (`error`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

HITS, QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"
PREEMPTIONS = "vllm:num_preemptions_total"
GAUGES = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "num_requests_waiting": "vllm:num_requests_waiting",
    "num_requests_running": "vllm:num_requests_running",
}
TTFT = "vllm:time_to_first_token_seconds"
# The SLO metrics these figures provide, and which figure each one reads.
SLO_METRICS = {
    "prefix_cache_hit_rate": "prefix_cache_hit_rate",
    "kv_cache_usage": "kv_cache_usage_max",
    "num_requests_waiting": "num_requests_waiting_max",
    "num_requests_running": "num_requests_running_max",
    "preemptions": "preemptions",
}
_CHARTED_GAUGES = ("kv_cache_usage", "num_requests_waiting", "num_requests_running")
MAX_POINTS = 4000  # scrapes kept for the time series (an hour at 1 s; thinned beyond)


def parse(text: str) -> dict[str, float]:
    """Sample name (with `le` for histogram buckets) -> value, summed over the other labels."""
    out: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = f"{s.name}|{s.labels['le']}" if "le" in s.labels else s.name
            out[key] += s.value
    return dict(out)


def _bucket_percentile(buckets: list[tuple[float, float]], p: float) -> float | None:
    """Linear interpolation inside cumulative buckets (Prometheus's histogram_quantile)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = buckets[-1][1] * p / 100
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            span = count - prev_count
            return prev_le + (le - prev_le) * ((rank - prev_count) / span if span else 1.0)
        prev_le, prev_count = le, count
    return prev_le


@dataclass(frozen=True, slots=True)
class ServerTtft:
    """The server's own TTFT (`vllm:time_to_first_token_seconds`) over the run, in ms."""

    count: float | None = None
    mean: float | None = None
    p50: float | None = None
    p95: float | None = None
    note: str = "interpolated within vLLM's coarse buckets"


_GAUGE_FIELDS = tuple(f"{name}_{kind}" for name in GAUGES for kind in ("max", "mean"))


@dataclass(frozen=True, slots=True)
class ServerFigures:
    """The report's `server`: the target's own figures over the run, from its `/metrics`.
    `available` false: fewer than two scrapes answered (`error` says why), every figure absent."""

    available: bool
    scrapes: int = 0
    error: str | None = None
    prefix_cache_hit_rate: float | None = None
    prefix_cache_queried_tokens: float | None = None
    preemptions: float | None = None
    kv_cache_usage_max: float | None = None  # a gauge's peak and mean; None: the server has no such gauge
    kv_cache_usage_mean: float | None = None
    num_requests_waiting_max: float | None = None
    num_requests_waiting_mean: float | None = None
    num_requests_running_max: float | None = None
    num_requests_running_mean: float | None = None
    server_ttft: ServerTtft | None = None
    series: dict[str, list[float | None]] | None = None  # per scrape, for the charts (`ServerMetrics.series`)
    client_server_ttft_gap_ms: float | None = None  # the judge's: client TTFT mean - server TTFT mean

    def figure(self, slo_metric: str) -> float | None:
        """The figure an SLO on `slo_metric` (a key of `SLO_METRICS`) reads; None when unavailable."""
        return getattr(self, SLO_METRICS[slo_metric]) if self.available else None

    def to_json(self) -> dict[str, Any]:
        if not self.available:
            return {"available": False, "scrapes": self.scrapes, "error": self.error}
        out: dict[str, Any] = {
            "available": True,
            "scrapes": self.scrapes,
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate,
            "prefix_cache_queried_tokens": self.prefix_cache_queried_tokens,
            "preemptions": self.preemptions,
        }
        out.update((name, getattr(self, name)) for name in _GAUGE_FIELDS if getattr(self, name) is not None)
        if self.server_ttft is not None:
            out["server_ttft_ms"] = asdict(self.server_ttft)
        if self.series is not None:
            out["series"] = self.series
        if self.client_server_ttft_gap_ms is not None:
            out["client_server_ttft_gap_ms"] = self.client_server_ttft_gap_ms
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServerFigures:
        known = {f.name for f in fields(cls)} - {"server_ttft", "available"}
        ttft = d.get("server_ttft_ms")
        return cls(
            bool(d.get("available")),
            **{k: v for k, v in d.items() if k in known},
            server_ttft=ServerTtft(**{k: v for k, v in ttft.items() if k in ServerTtft.__slots__}) if ttft else None,
        )


@dataclass
class ServerMetrics:
    """What the scrapes showed; `summary()` is the report's `server` section."""

    first: dict[str, float] | None = None
    last: dict[str, float] | None = None
    scrapes: int = 0
    gauge_samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    error: str | None = None
    # (time, kv_cache_usage, waiting, running, prefix-cache hits, queries) per scrape, for the charts
    points: list[tuple[float, float | None, float | None, float | None, float | None, float | None]] = field(
        default_factory=list
    )

    def add(self, sample: dict[str, float], at: float | None = None) -> None:
        if self.first is None:
            self.first = sample
        self.last = sample
        self.scrapes += 1
        for name, metric in GAUGES.items():
            if metric in sample:
                self.gauge_samples[name].append(sample[metric])
        self.points.append(
            (
                time.time() if at is None else at,
                *(sample.get(GAUGES[name]) for name in _CHARTED_GAUGES),
                sample.get(HITS),
                sample.get(QUERIES),
            )
        )
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]

    def series(self) -> dict[str, list[float | None]]:
        """The scrapes over time: `t` (Unix seconds), the gauges, and the prefix-cache hit rate
        between each scrape and the one before (None where nothing was queried)."""
        out: dict[str, list[float | None]] = {
            "t": [],
            "kv_cache_usage": [],
            "num_requests_waiting": [],
            "num_requests_running": [],
            "prefix_cache_hit_rate": [],
        }
        previous = None
        for t, kv, waiting, running, hits, queries in self.points:
            out["t"].append(round(t, 3))
            out["kv_cache_usage"].append(None if kv is None else round(kv, 4))
            out["num_requests_waiting"].append(waiting)
            out["num_requests_running"].append(running)
            rate = None
            if previous is not None and None not in (hits, queries, previous[0], previous[1]):
                asked = queries - previous[1]  # type: ignore[operator]
                rate = round((hits - previous[0]) / asked, 4) if asked > 0 else None  # type: ignore[operator]
            out["prefix_cache_hit_rate"].append(rate)
            previous = (hits, queries)
        return out

    def restart_from(self, sample: dict[str, float]) -> None:
        """Count from `sample` on: what the server did before it (priming requests, warm-up) is
        not the run the client measures, and would skew the server's TTFT and hit rate."""
        self.first, self.last, self.scrapes = sample, sample, 1
        self.gauge_samples.clear()

    def _delta(self, name: str) -> float | None:
        if self.first is None or self.last is None or name not in self.last:
            return None
        return self.last[name] - self.first.get(name, 0.0)

    def ttft_buckets(self) -> list[tuple[float, float]]:
        prefix = f"{TTFT}_bucket|"
        if self.last is None:
            return []
        out = []
        for key, value in self.last.items():
            if key.startswith(prefix):
                before = self.first.get(key, 0.0) if self.first else 0.0
                out.append((float(key[len(prefix) :]), value - before))
        return sorted(out)

    def summary(self) -> ServerFigures:
        if self.scrapes < 2:
            return ServerFigures(False, self.scrapes, error=self.error or "fewer than two scrapes")
        hits, queries = self._delta(HITS), self._delta(QUERIES)
        gauges = {
            f"{name}_{kind}": round(fn(values), 4)
            for name, values in self.gauge_samples.items()
            for kind, fn in (("max", max), ("mean", lambda v: sum(v) / len(v)))
        }
        count, total = self._delta(f"{TTFT}_count"), self._delta(f"{TTFT}_sum")
        buckets = self.ttft_buckets()
        return ServerFigures(
            True,
            self.scrapes,
            prefix_cache_hit_rate=round(hits / queries, 4) if hits is not None and queries else None,
            prefix_cache_queried_tokens=queries,
            preemptions=self._delta(PREEMPTIONS),
            **gauges,
            server_ttft=ServerTtft(
                count=count,
                mean=round(total / count * 1000, 3) if count and total is not None else None,
                p50=_ms(_bucket_percentile(buckets, 50)),
                p95=_ms(_bucket_percentile(buckets, 95)),
            ),
            series=self.series(),
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
