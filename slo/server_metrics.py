"""Server-side figures from the target's Prometheus `/metrics`, scraped during the run.

Counters are read as the change between the first and last scrape (prefix-cache hit rate over
the run, preemptions), gauges as their peak and mean (KV-cache usage, requests waiting and
running), and the server's TTFT histogram as the change of its buckets, so the report can set
the server's TTFT beside the client's: the gap is time spent outside the engine (network, HTTP
server, queueing before the engine sees the request).

Each scrape's time and its few charted figures (KV-cache usage, requests waiting and running,
and the prefix-cache counters) are also kept as a time series (`summary()["series"]`, at most
`MAX_POINTS` points: beyond that every other point is dropped, the counters stay exact).

A target without `/metrics` is a warning, never a crash: the figures are then absent.
"""

from __future__ import annotations

import contextlib
import logging
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from slogate.slo.target import split_credentials

log = logging.getLogger("slogate.server_metrics")

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


def fetch(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> dict[str, float]:
    req = urllib.request.Request(f"{url}/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return parse(resp.read().decode("utf-8", "replace"))


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

    def summary(self) -> dict[str, Any]:
        if self.scrapes < 2:
            return {"available": False, "scrapes": self.scrapes, "error": self.error or "fewer than two scrapes"}
        hits, queries = self._delta(HITS), self._delta(QUERIES)
        out: dict[str, Any] = {
            "available": True,
            "scrapes": self.scrapes,
            "prefix_cache_hit_rate": round(hits / queries, 4) if hits is not None and queries else None,
            "prefix_cache_queried_tokens": queries,
            "preemptions": self._delta(PREEMPTIONS),
        }
        for name, values in self.gauge_samples.items():
            out[f"{name}_max"] = round(max(values), 4)
            out[f"{name}_mean"] = round(sum(values) / len(values), 4)
        count, total = self._delta(f"{TTFT}_count"), self._delta(f"{TTFT}_sum")
        buckets = self.ttft_buckets()
        out["server_ttft_ms"] = {
            "count": count,
            "mean": round(total / count * 1000, 3) if count and total is not None else None,
            "p50": _ms(_bucket_percentile(buckets, 50)),
            "p95": _ms(_bucket_percentile(buckets, 95)),
            "note": "interpolated within vLLM's coarse buckets",
        }
        out["series"] = self.series()
        return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class Scraper:
    """Scrapes `url`/metrics every `interval_s` in a gevent greenlet until `stop()`, sending
    `headers` (the target's Authorization). Credentials left in `url` become a Basic header: the
    URL kept, and named in messages, never has them."""

    def __init__(self, url: str, interval_s: float, headers: dict[str, str] | None = None) -> None:
        bare, basic = split_credentials(url)
        self.url = bare.rstrip("/")
        self.headers = {**(headers or {}), **({"Authorization": basic} if basic else {})}
        self.interval_s = interval_s
        self.metrics = ServerMetrics()
        self._greenlet: Any = None

    def scrape_once(self) -> bool:
        try:
            self.metrics.add(fetch(self.url, headers=self.headers))
            return True
        except (urllib.error.URLError, OSError, ValueError) as e:
            if self.metrics.error is None:
                self.metrics.error = f"{self.url}/metrics unavailable: {getattr(e, 'reason', e)}"
                log.warning("slogate: %s; server-side figures will be missing", self.metrics.error)
            return False

    def restart(self) -> None:
        """Take the counters' starting values now (see `ServerMetrics.restart_from`)."""
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):  # the loop reports failures
            self.metrics.restart_from(fetch(self.url, headers=self.headers))

    def _loop(self) -> None:
        import gevent

        while True:
            started = time.monotonic()
            self.scrape_once()
            gevent.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        import gevent

        self.metrics = ServerMetrics()
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> ServerMetrics:
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
            self._greenlet = None
            self.scrape_once()  # the closing snapshot, so counters cover the whole run
        return self.metrics
