"""Per-tag aggregates of request records: the histograms and counters the gate judges.

Every record counts under its request class (`shared` or `unique`, which partition the requests,
so `all` is every class merged) and under each of its other tags (a conversation's `first_turn`
or `follow_up` and `turn_<k>`: slo/gate/record.py), each with histograms of its own.

A `MetricsStore` lives in every process that generates load; workers ship theirs to the master
as `to_wire()` dicts, and `merge` adds them exactly. Besides the run's totals it keeps the time
series (`intervals`: per-interval histograms, slo/gate/intervals.py), which travel in the same wire form.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.intervals import DEFAULT_INTERVAL_S, IntervalSeries
from slogate.slo.gate.latency_metrics import (
    GOODPUT_METRICS,
    LATENCY_METRICS,
    SINGLE,
    TTFT,
    UNFINISHED,
    Batches,
    batches,
)
from slogate.slo.gate.record import ALL, ErrorKind, RequestRecord

# The reports' sentence under a table with a `cancelled` column (Markdown, HTML).
CANCELLED_NOTE = (
    "Cancelled: requests whose client hung up mid-stream on purpose (--cancel-fraction); not failures: their "
    "TTFT counts (before a first token came, the time waited: a lower bound), their E2E, ITL and TPOT do not."
)


class ClassMetrics:
    """Everything recorded for one request class or tag (e.g. `shared`, `follow_up`)."""

    def __init__(self) -> None:
        self.latency: dict[str, LatencyHistogram] = {m: LatencyHistogram() for m in LATENCY_METRICS}
        self.requests = 0
        self.failures = 0
        self.dropped = 0  # open loop: scheduled but never sent (not a server failure)
        # In flight when the run stopped: not failures either. Those whose first token had come
        # count in TTFT with their exact value; `waiting` ones, with the time they had waited: a
        # lower bound, so that a server too slow to answer before the stop still shows in TTFT
        # (dropping them, as load testers usually do, hides exactly the overload).
        self.unfinished = 0
        self.unfinished_waiting = 0
        # Their TTFT values apart as well (made at the first): goodput leaves them out, and its
        # ceiling (slo/gate/goodput_kind.py) must take exactly them out of the TTFT histogram.
        self.unfinished_ttft: LatencyHistogram | None = None
        # --cancel-fraction: hung up by the client on purpose, not failures; their TTFT counts (a first
        # token had come), their E2E, ITL and TPOT do not (the client cut the answer)
        self.cancelled = 0
        self.errors_by_kind: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.reasoning_tokens = 0  # of the output tokens, those of reasoning (slo/gate/record.py)
        self.cached_tokens = 0
        self.cached_reported = 0  # successes whose usage reported cached prompt tokens
        self.good = 0  # successes that met every per-request latency target (goodput; see MetricsStore)
        self.first_start: float | None = None
        self.last_end: float | None = None

    def add(self, rec: RequestRecord, many: Batches | None = None) -> None:
        """`many`: the record's `batches`, indexed once for every aggregate it counts in
        (MetricsStore.add); indexed here when not given."""
        if rec.error_kind == ErrorKind.DROPPED:
            self.dropped += 1
            return
        if rec.error_kind == ErrorKind.UNFINISHED:
            self.unfinished += 1
            if rec.ttft_us is None:
                self.unfinished_waiting += 1
            for name, waited in UNFINISHED:
                waited_us = waited(rec)
                self.latency[name].record_us(waited_us)
                if name == TTFT.name:
                    if self.unfinished_ttft is None:
                        self.unfinished_ttft = LatencyHistogram()
                    self.unfinished_ttft.record_us(waited_us)
            return
        if rec.error_kind == ErrorKind.CANCELLED:
            self.cancelled += 1
            # Its TTFT, or, hung up before its first token, the time it had waited: a lower bound, as an
            # unfinished request's (left out, the picked requests slower than --cancel-after-ms would be).
            for name, waited in UNFINISHED:
                self.latency[name].record_us(waited(rec))
            return
        self.requests += 1
        end = rec.started_at + rec.e2e_us / 1e6
        if self.first_start is None or rec.started_at < self.first_start:
            self.first_start = rec.started_at
        if self.last_end is None or end > self.last_end:
            self.last_end = end
        if rec.error_kind is not None:
            self.failures += 1
            self.errors_by_kind[str(rec.error_kind)] += 1
            return
        lat = self.latency
        for name, value_of in SINGLE:
            value_us = value_of(rec)
            if value_us is not None:
                lat[name].record_us(value_us)
        for name, batch in batches(rec) if many is None else many:
            batch.record_into(lat[name])
        self.prompt_tokens += rec.prompt_tokens or 0
        self.output_tokens += rec.completion_tokens or 0
        self.reasoning_tokens += rec.reasoning_tokens
        if rec.cached_tokens is not None:
            self.cached_tokens += rec.cached_tokens
            self.cached_reported += 1

    @property
    def successes(self) -> int:
        return self.requests - self.failures

    @property
    def error_rate(self) -> float | None:
        return self.failures / self.requests if self.requests else None

    @property
    def duration_s(self) -> float | None:
        if self.first_start is None or self.last_end is None:
            return None
        return max(self.last_end - self.first_start, 1e-9)

    @property
    def prompt_cache_hit_rate(self) -> float | None:
        """Prompt tokens the server reported as cached (`usage.prompt_tokens_details.cached_tokens`)
        per prompt token; None when it reported none (vLLM: --enable-prompt-tokens-details)."""
        if not self.cached_reported or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens

    @property
    def output_tokens_per_s(self) -> float | None:
        d = self.duration_s
        return self.output_tokens / d if d else None

    @property
    def requests_per_s(self) -> float | None:
        d = self.duration_s
        return self.successes / d if d else None

    def merge(self, other: ClassMetrics) -> None:
        for name, hist in other.latency.items():
            self.latency[name].merge(hist)
        self.requests += other.requests
        self.failures += other.failures
        self.dropped += other.dropped
        self.unfinished += other.unfinished
        self.unfinished_waiting += other.unfinished_waiting
        self.cancelled += other.cancelled
        if other.unfinished_ttft is not None:
            if self.unfinished_ttft is None:
                self.unfinished_ttft = LatencyHistogram()
            self.unfinished_ttft.merge(other.unfinished_ttft)
        self.errors_by_kind.update(other.errors_by_kind)
        self.prompt_tokens += other.prompt_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cached_tokens += other.cached_tokens
        self.cached_reported += other.cached_reported
        self.good += other.good
        if other.first_start is not None:
            self.first_start = (
                other.first_start if self.first_start is None else min(self.first_start, other.first_start)
            )
        if other.last_end is not None:
            self.last_end = other.last_end if self.last_end is None else max(self.last_end, other.last_end)

    def to_wire(self) -> dict[str, Any]:
        unfinished_ttft = self.unfinished_ttft
        return {
            "latency": {name: h.encode() for name, h in self.latency.items() if h.count},
            **({"unfinished_ttft": unfinished_ttft.encode()} if unfinished_ttft is not None else {}),
            "requests": self.requests,
            "failures": self.failures,
            "dropped": self.dropped,
            "unfinished": self.unfinished,
            "unfinished_waiting": self.unfinished_waiting,
            **({"cancelled": self.cancelled} if self.cancelled else {}),  # added later: absent when 0, as before
            "errors_by_kind": dict(self.errors_by_kind),
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            **({"reasoning_tokens": self.reasoning_tokens} if self.reasoning_tokens else {}),  # as reports before it
            "cached_tokens": self.cached_tokens,
            "cached_reported": self.cached_reported,
            "good": self.good,
            "first_start": self.first_start,
            "last_end": self.last_end,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ClassMetrics:
        m = cls()
        for name, text in data.get("latency", {}).items():
            m.latency[name] = LatencyHistogram.decode(text)
        m.requests = data["requests"]
        m.failures = data["failures"]
        m.dropped = data.get("dropped", 0)
        m.unfinished = data.get("unfinished", 0)
        m.unfinished_waiting = data.get("unfinished_waiting", 0)
        m.cancelled = data.get("cancelled", 0)
        if "unfinished_ttft" in data:
            m.unfinished_ttft = LatencyHistogram.decode(data["unfinished_ttft"])
        m.errors_by_kind = Counter(data.get("errors_by_kind", {}))
        m.prompt_tokens = data.get("prompt_tokens", 0)
        m.output_tokens = data.get("output_tokens", 0)
        m.reasoning_tokens = data.get("reasoning_tokens", 0)
        m.cached_tokens = data.get("cached_tokens", 0)
        m.cached_reported = data.get("cached_reported", 0)
        m.good = data.get("good", 0)
        m.first_start = data.get("first_start")
        m.last_end = data.get("last_end")
        return m

    def summary(self) -> dict[str, Any]:
        """The report's `metrics.<tag>` entry."""
        out: dict[str, Any] = {f"{name}_ms": h.summary_ms() for name, h in self.latency.items()}
        rate, tps, rps = self.error_rate, self.output_tokens_per_s, self.requests_per_s
        hit_rate = self.prompt_cache_hit_rate
        out.update(
            requests=self.requests,
            failures=self.failures,
            dropped=self.dropped,
            unfinished=self.unfinished,
            unfinished_waiting=self.unfinished_waiting,
            cancelled=self.cancelled,
            error_rate=None if rate is None else round(rate, 6),
            errors_by_kind=dict(sorted(self.errors_by_kind.items())),
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            reasoning_tokens=self.reasoning_tokens,
            cached_tokens=self.cached_tokens,
            prompt_cache_hit_rate=None if hit_rate is None else round(hit_rate, 4),
            mean_prompt_tokens=round(self.prompt_tokens / self.successes, 1) if self.successes else None,
            mean_output_tokens=round(self.output_tokens / self.successes, 1) if self.successes else None,
            mean_reasoning_tokens=round(self.reasoning_tokens / self.successes, 1) if self.successes else None,
            output_tokens_per_s=None if tps is None else round(tps, 3),
            requests_per_s=None if rps is None else round(rps, 3),
            duration_s=None if self.duration_s is None else round(self.duration_s, 3),
        )
        return out


class MetricsStore:
    """Request records aggregated per class, `all` derived by merging the classes, and per tag
    (`tags`: each record also counts under each of its tags; their number is bounded).

    `intervals` holds the same records per `interval_s` of wall-clock time (0: no time series).
    `goodput_targets_ms` ({class: {metric: max ms}}, class `all` applying to every request), when
    set, counts per request the successes that met every target (`ClassMetrics.good`), as
    `vllm bench serve --goodput` does: a few comparisons per request.
    """

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.classes: dict[str, ClassMetrics] = {}
        self.tags: dict[str, ClassMetrics] = {}
        self.intervals = IntervalSeries(interval_s)
        self.goodput_targets_ms: dict[str, dict[str, float]] | None = None
        self._goodput_us: dict[tuple[str, ...], dict[str, float]] = {}
        self.warmup_excluded = 0
        # How late the load generator's event loop wakes up, and the CPU time its processes used
        # over how much wall time (self-check; see slo/gate/self_check.py).
        self.loop_lag = LatencyHistogram()
        self.client_cpu_s = 0.0
        self.client_wall_s = 0.0

    def add(self, rec: RequestRecord) -> None:
        cm = self.classes.get(rec.request_class)
        if cm is None:
            cm = self.classes[rec.request_class] = ClassMetrics()
        many = batches(rec) if rec.error_kind is None else None
        cm.add(rec, many)
        tagged = [cm]
        for tag in rec.tags:
            tm = self.tags.get(tag)
            if tm is None:
                tm = self.tags[tag] = ClassMetrics()
            tm.add(rec, many)
            tagged.append(tm)
        self.intervals.add(rec, many)
        if self.goodput_targets_ms is not None and rec.error_kind is None and self._is_good(rec):
            for m in tagged:
                m.good += 1

    def set_goodput_targets(self, targets_ms: dict[str, dict[str, float]] | None) -> None:
        self.goodput_targets_ms = targets_ms or None
        self._goodput_us = {}

    def _is_good(self, rec: RequestRecord) -> bool:
        """Whether a success met every target of `all`, its class and its tags."""
        key = (rec.request_class, *rec.tags)
        limits = self._goodput_us.get(key)
        if limits is None:
            limits = {}
            targets = self.goodput_targets_ms or {}
            for tag in (ALL, *key):
                for metric, max_ms in (targets.get(tag) or {}).items():
                    limits[metric] = min(limits.get(metric, float("inf")), max_ms * 1000)
            self._goodput_us[key] = limits
        for metric, max_us in limits.items():
            value = GOODPUT_METRICS[metric](rec)
            if value is None or value > max_us:
                return False
        return True

    def get(self, request_class: str) -> ClassMetrics:
        """One class or tag, or every class merged for `all`; an empty aggregate for an unseen one."""
        if request_class != ALL:
            return self.classes.get(request_class) or self.tags.get(request_class) or ClassMetrics()
        total = ClassMetrics()
        for cm in self.classes.values():
            total.merge(cm)
        return total

    def class_names(self) -> list[str]:
        """Every tag measured: `all`, the classes, then the other tags."""
        return [ALL, *sorted(self.classes), *sorted(self.tags)]

    @property
    def is_empty(self) -> bool:
        return not self.classes and not self.warmup_excluded

    def merge(self, other: MetricsStore) -> None:
        for name, cm in other.classes.items():
            self.classes.setdefault(name, ClassMetrics()).merge(cm)
        for name, cm in other.tags.items():
            self.tags.setdefault(name, ClassMetrics()).merge(cm)
        self.warmup_excluded += other.warmup_excluded
        self.intervals.merge(other.intervals)
        if self.goodput_targets_ms is None and other.goodput_targets_ms is not None:
            self.set_goodput_targets(other.goodput_targets_ms)
        self.loop_lag.merge(other.loop_lag)
        self.client_cpu_s += other.client_cpu_s
        self.client_wall_s += other.client_wall_s

    def to_wire(self) -> dict[str, Any]:
        out = {
            "classes": {name: cm.to_wire() for name, cm in self.classes.items()},
            "tags": {name: cm.to_wire() for name, cm in self.tags.items()},
            "warmup_excluded": self.warmup_excluded,
            "loop_lag": self.loop_lag.encode() if self.loop_lag.count else None,
            "client_cpu_s": self.client_cpu_s,
            "client_wall_s": self.client_wall_s,
            "intervals": self.intervals.to_wire(),
        }
        if self.goodput_targets_ms is not None:
            out["goodput_targets_ms"] = self.goodput_targets_ms
        return out

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> MetricsStore:
        store = cls()
        store.classes = {name: ClassMetrics.from_wire(d) for name, d in data.get("classes", {}).items()}
        store.tags = {name: ClassMetrics.from_wire(d) for name, d in data.get("tags", {}).items()}
        store.warmup_excluded = data.get("warmup_excluded", 0)
        if data.get("loop_lag"):
            store.loop_lag = LatencyHistogram.decode(data["loop_lag"])
        store.client_cpu_s = data.get("client_cpu_s", 0.0)
        store.client_wall_s = data.get("client_wall_s", 0.0)
        store.intervals.merge_wire(data.get("intervals"))
        store.set_goodput_targets(data.get("goodput_targets_ms"))
        return store

    @property
    def client_cpu_fraction(self) -> float | None:
        """CPU time the load generator's processes used per second of wall time, averaged over them."""
        return self.client_cpu_s / self.client_wall_s if self.client_wall_s else None

    def summary(self, classes: list[str] | None = None) -> dict[str, Any]:
        return {name: self.get(name).summary() for name in classes or self.class_names()}
