"""Server-side figures from the target's Prometheus `/metrics` (scraped by slo/plugin/scraper.py).

Counters are read as their increase over the run (prefix-cache hit rate over the run,
preemptions), gauges as their peak and mean (KV-cache usage, requests waiting and running), and
the server's TTFT histogram as the increase of its buckets, so the report can set the server's
TTFT beside the client's: the gap is time spent outside the engine (network, HTTP server,
queueing before the engine sees the request).

A server restarted mid-run (killed and started again on the same port) starts its counters from
zero: a counter that goes down is a restart, not a negative hit rate. As Prometheus's `increase()`
does, each scrape adds `cur - prev`, or `cur` across a restart, so the figures are summed over the
segments; the report keeps the restarts' times (`ServerFigures.restarts`).

Each scrape's time and its few charted figures (KV-cache usage, requests waiting and running,
and the prefix-cache counters) are also kept as a time series (`summary()["series"]`, at most
`MAX_POINTS` points: beyond that every other point is dropped, the counters stay exact).

The names are the engine's (slo/gate/engines.py: vLLM, SGLang, TGI), detected from the scrapes; a
figure the engine does not expose stays absent. A target without `/metrics`, or whose `/metrics`
has none of those names, gives figures that are `available: false`, with the reason (`error`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from slogate.slo.gate import lora_figures
from slogate.slo.gate.engines import ENGINES, UNKNOWN, VLLM, Engine, detect
from slogate.slo.gate.facts import from_utc_iso, utc_iso

GAUGES = ("kv_cache_usage", "num_requests_waiting", "num_requests_running")  # peak and mean, and charted
NO_ENGINE = (
    f"its /metrics has none of the names of {', '.join(e.title for e in ENGINES)}: no server figures (docs/engines.md)"
)
MAX_POINTS = 4000  # scrapes kept for the time series (an hour at 1 s; thinned beyond)
# Samples that only go up until the server restarts: counters and histograms' (summaries') parts.
# Not gauges, and not `_created` (a counter's creation time, which a restart moves forward).
PROCESS_START = "process_start_time_seconds"  # prometheus-client's process collector (vLLM, SGLang)
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def is_counter(key: str) -> bool:
    """Whether a sample of `parse` (a histogram bucket's key ends in `|le`) is counter-like."""
    return key.split("|", 1)[0].endswith(COUNTER_SUFFIXES)


def parse(text: str) -> dict[str, float]:
    """Sample name (with `le` for histogram buckets) -> value, summed over the other labels."""
    out: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        if family.name == lora_figures.LORA_INFO:  # its figures are in its labels
            out.update(lora_figures.read(family.samples))
            continue
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
    """The server's own TTFT (its histogram, e.g. `vllm:time_to_first_token_seconds`) over the run, in ms."""

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
    restarts: tuple[str, ...] = ()  # UTC (ISO, whole s): the first scrape that answered after each restart
    engine: str = VLLM.name  # whose names were read (`Engine.name`); reports older than the others are vLLM's
    # --cancel-fraction: whether the server let go of the requests after the load stopped, `{"running_zero_after_s":
    # s}` or `{"still_running": n, "waited_s": s}` (slo/plugin/cancel_drain.py); None: not checked
    after_stop: dict[str, float] | None = None
    lora: lora_figures.LoraFigures | None = None  # vLLM's LoRA figures; None: a server without LoRA

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
        if self.restarts:  # only then: a report without a restart reads as it always has
            out["restarts"] = list(self.restarts)
        if self.engine != VLLM.name:  # likewise: a vLLM report reads as it always has
            out["engine"] = self.engine
        if self.after_stop is not None:
            out["after_stop"] = self.after_stop
        if self.lora is not None:
            out["lora"] = self.lora.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServerFigures:
        known = {f.name for f in fields(cls)} - {"server_ttft", "available", "restarts", "lora"}
        ttft = d.get("server_ttft_ms")
        return cls(
            bool(d.get("available")),
            **{k: v for k, v in d.items() if k in known},
            server_ttft=ServerTtft(**{k: v for k, v in ttft.items() if k in ServerTtft.__slots__}) if ttft else None,
            restarts=tuple(d.get("restarts") or ()),
            lora=lora_figures.LoraFigures.from_json(d["lora"]) if d.get("lora") else None,
        )

    def restart_note(self, started_at: str | None) -> str | None:
        """The report's sentence on the server's restarts (None without one), so a reader knows why
        requests failed for a while and that the figures span both servers, not the last one alone."""
        if not self.restarts:
            return None
        start = from_utc_iso(started_at)
        when = []
        for at in self.restarts:
            seconds = from_utc_iso(at)
            offset = "" if start is None or seconds is None else f", {seconds - start:.0f} s in"
            when.append(f"up again at {at.rpartition('T')[2]}{offset}")
        times = "" if len(self.restarts) == 1 else f" {len(self.restarts)} times"
        return (
            f"The server restarted{times} during the run ({'; '.join(when)}): "
            "its /metrics counters are summed over the segments."
        )

    def after_stop_note(self) -> str | None:
        """The report's sentence on whether the server let go of the requests of clients that had
        hung up (`after_stop`; None where not checked): a server still generating for them is a
        note, not a breach (its capacity goes to answers nobody reads)."""
        after = self.after_stop
        if after is None:
            return None
        if "still_running" in after:
            return (
                f"The server was still running {after['still_running']:g} requests {after['waited_s']:g} s after the "
                "load stopped: it keeps generating for clients that hung up."
            )
        return (
            f"The server's running requests were back to 0 {after['running_zero_after_s']:g} s after the load "
            "stopped: it let go of the clients that had hung up."
        )


@dataclass
class ServerMetrics:
    """What the scrapes showed; `summary()` is the report's `server` section.

    Memory stays bounded however long the run: per counter its last value and running increase,
    the gauges' samples, and at most `MAX_POINTS` points for the charts."""

    scrapes: int = 0
    gauge_samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    error: str | None = None
    # (time, kv_cache_usage, waiting, running, prefix-cache hits, queries) per scrape, for the charts;
    # hits and queries as running increases (`totals`), so that a restart never turns a rate negative
    points: list[tuple[float, float | None, float | None, float | None, float | None, float | None]] = field(
        default_factory=list
    )
    seen: dict[str, float] = field(default_factory=dict)  # each counter's last value scraped
    totals: dict[str, float] = field(default_factory=dict)  # each counter's increase since the first scrape
    baseline: dict[str, float] = field(default_factory=dict)  # `totals` when the run's counting began
    restart_times: list[float] = field(default_factory=list)  # Unix times of the scrapes that found a restart
    after_stop: dict[str, float] | None = None  # `ServerFigures.after_stop`
    lora: lora_figures.LoraSamples = field(default_factory=lora_figures.LoraSamples)
    process_start: float | None = None  # the server's `process_start_time_seconds`, where it has one
    engine: Engine = UNKNOWN  # whose names the scrapes hold: the first scrape that holds any decides

    def add(self, sample: dict[str, float], at: float | None = None) -> None:
        at = time.time() if at is None else at
        self._detect(sample)
        self._count(sample, at)
        self.scrapes += 1
        self.lora.add(sample)
        engine = self.engine
        read = {name: sample.get(engine.gauges.get(name, "")) for name in GAUGES}
        for name, value in read.items():
            if value is not None:
                self.gauge_samples[name].append(value)
        self.points.append(
            (at, *read.values(), self._running_total(engine.hits, sample), self._running_total(engine.queries, sample))
        )
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]

    def _running_total(self, name: str | None, sample: dict[str, float]) -> float | None:
        """Counter `name`'s running increase at this scrape, for the charts; None where the scrape
        lacks it, except a lazy engine's counter not shown (yet, or since a restart), which has not
        grown (`Engine.lazy_counters`)."""
        if name is None:
            return None
        if name in sample or (self.engine.lazy_counters and name not in self.seen):
            return self.totals.get(name, 0.0)
        return None

    def _detect(self, sample: dict[str, float]) -> None:
        """Which engine's names to read, from the first scrape that holds any (a server may show its
        lazily made metrics only once it has served a request)."""
        if self.engine is UNKNOWN:
            self.engine = detect(sample)

    def _count(self, sample: dict[str, float], at: float) -> None:
        """Add each counter's increase since the previous scrape to `totals`, by Prometheus's
        counter-reset rule, series by series: `cur - prev`, or all of `cur` when it went down. A
        counter first seen mid-run counts from zero; the first scrape is where counting starts.

        A restart of the whole server (`restart_times`) takes stronger evidence than one counter
        going down (a label set that went away, one odd exporter): its `process_start_time_seconds`
        changed, or most of the counters that had counted something went down. Then every counter
        counts from zero, also those that grew past their old value already, and the old server's
        values are void, also of counters this scrape lacks: a lazy engine's counter appears again
        only at its first increment."""
        counters = {key: value for key, value in sample.items() if is_counter(key)}
        if self.scrapes and self._restarted(sample, counters):
            self.restart_times.append(at)
            self.seen.clear()
        for key, value in counters.items():
            before = self.seen.get(key, 0.0)
            increase = value - before if value >= before else value  # a series that went down: reset
            self.totals[key] = self.totals.get(key, 0.0) + (increase if self.scrapes else 0.0)
        self.seen.update(counters)
        if PROCESS_START in sample:
            self.process_start = sample[PROCESS_START]

    def _restarted(self, sample: dict[str, float], counters: dict[str, float]) -> bool:
        started = sample.get(PROCESS_START)
        if started is not None and self.process_start is not None:
            return started != self.process_start
        counted = [key for key in counters if self.seen.get(key, 0.0) > 0]
        dropped = sum(1 for key in counted if counters[key] < self.seen[key])
        return bool(counted) and dropped * 2 > len(counted)

    def series(self) -> dict[str, list[float | None]]:
        """The scrapes over time: `t` (Unix seconds), the gauges, and the prefix-cache hit rate
        between each scrape and the one before (None where nothing was queried). Counted on the
        running increases: across a restart it is the new server's, never negative."""
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

    def restart_from(self, sample: dict[str, float], at: float | None = None) -> None:
        """Count from `sample` on: what the server did before it (priming requests, warm-up) is
        not the run the client measures, and would skew the server's TTFT and hit rate. A restart
        of the server before it is not the run's either."""
        self._detect(sample)
        self._count(sample, time.time() if at is None else at)
        self.baseline = dict(self.totals)
        self.restart_times.clear()
        self.scrapes = 1
        self.gauge_samples.clear()
        self.lora = lora_figures.LoraSamples()
        self.lora.add(sample)  # the adapters that ran before it are not the run's

    def _delta(self, name: str | None) -> float | None:
        """`name`'s increase over the run, summed over restarts; None when the server has no such
        counter (a lazy engine's counter that no scrape has shown yet: zero)."""
        if name is None:
            return None
        if name not in self.totals:
            return 0.0 if self.engine.lazy_counters else None
        return self.totals[name] - self.baseline.get(name, 0.0)

    def ttft_buckets(self) -> list[tuple[float, float]]:
        if self.engine.ttft is None:
            return []
        prefix = f"{self.engine.ttft}_bucket|"
        return sorted(
            (float(key[len(prefix) :]), self._delta(key) or 0.0) for key in self.totals if key.startswith(prefix)
        )

    def server_ttft(self, engine: Engine) -> ServerTtft | None:
        """The server's TTFT over the run from its histogram; None for an engine without one."""
        if engine.ttft is None:
            return None
        count, total = self._delta(f"{engine.ttft}_count"), self._delta(f"{engine.ttft}_sum")
        buckets = self.ttft_buckets()
        return ServerTtft(
            count=count,
            mean=round(total / count * 1000, 3) if count and total is not None else None,
            p50=_ms(_bucket_percentile(buckets, 50)),
            p95=_ms(_bucket_percentile(buckets, 95)),
            note=f"interpolated within {engine.title}'s coarse buckets",
        )

    def summary(self) -> ServerFigures:
        if self.scrapes < 2:
            return ServerFigures(False, self.scrapes, error=self.error or "fewer than two scrapes")
        engine = self.engine
        if engine is UNKNOWN:
            return ServerFigures(False, self.scrapes, error=NO_ENGINE)
        hits, queries = self._delta(engine.hits), self._delta(engine.queries)
        gauges = {
            f"{name}_{kind}": round(fn(values), 4)
            for name, values in self.gauge_samples.items()
            for kind, fn in (("max", max), ("mean", lambda v: sum(v) / len(v)))
        }
        return ServerFigures(
            True,
            self.scrapes,
            prefix_cache_hit_rate=round(hits / queries, 4) if hits is not None and queries else None,
            prefix_cache_queried_tokens=queries,
            preemptions=self._delta(engine.preemptions),
            **gauges,
            server_ttft=self.server_ttft(engine),
            series=self.series(),
            restarts=tuple(utc_iso(at) or "" for at in self.restart_times),
            engine=engine.name,
            after_stop=self.after_stop,
            lora=self.lora.summary(),
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
