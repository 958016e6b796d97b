"""The live report as Prometheus metrics (`/slo/metrics`): what a dashboard or an alert reads while
the run goes on, next to the server's own `/metrics`.

Rendered with prometheus-client from a `Report` (the gate's `snapshot()`), so the figures are the
report's, not a second bookkeeping: per request class or tag (label `class`: `all` is every
request, the tags overlap the classes, so never sum over `class`)
- the latency metrics (slo/gate/latency_metrics.py, those with a `prometheus` name: TTFT, ITL,
  TPOT, E2E) as histograms in seconds. Their buckets are counted from the exact
  HdrHistograms: a sample counts in `le` when its value as the report states it (the highest value
  of its HdrHistogram range, within 0.1% of the truth) is <= `le`. So for any bucket bound and the
  report's nearest-rank percentile, "p <= le" holds exactly when the bucket holds at least that
  rank: the buckets never pass a target the gate fails. `_sum` counts each sample at the middle of
  its range, so `_sum / _count` is the report's mean. TTFT includes the requests in flight at the
  stop with the time they had waited, as the report's TTFT does.
- requests that ended, failures by kind, unfinished, dropped and cancelled requests, tokens, as counters;
- each objective's observed value (latency in seconds), target and state, and the verdict.
The values are cumulative over the current run: a new run (or "Reset stats") starts them again,
which Prometheus treats as a counter reset. No secret can appear: the exposition names only
classes, objectives and figures, never the target, the command line or a credential.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString
from slogate.slo.gate.facts import from_utc_iso
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.latency_metrics import PROMETHEUS
from slogate.slo.gate.metrics import ClassMetrics
from slogate.slo.gate.record import ErrorKind
from slogate.slo.gate.report import Report
from slogate.slo.gate.verdict import Outcome, Verdict

PREFIX = "slogate_"
# 1 ms .. 60 s, dense around the usual targets, and a superset of vLLM 0.32's own TTFT, ITL and E2E
# bounds up to 60 s: a client/server panel over both interpolates at the same bounds.
BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.08, 0.1,
    0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 0.8, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0,
    15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip
# Failure kinds, every one exposed (0 until it happens) so that rate() sees each series start.
FAILURE_KINDS = tuple(
    str(k) for k in ErrorKind if k not in (ErrorKind.DROPPED, ErrorKind.UNFINISHED, ErrorKind.CANCELLED)
)
_COUNTERS: tuple[tuple[str, str, Callable[[ClassMetrics], int]], ...] = (
    ("requests", "Requests that ended, successes and failures (not dropped, not unfinished)", lambda m: m.requests),
    ("unfinished", "Requests in flight when the run stopped (not failures)", lambda m: m.unfinished),
    ("dropped", "Open loop: requests scheduled but never sent, every slot busy", lambda m: m.dropped),
    (
        "cancelled",
        "Requests whose client hung up mid-stream on purpose (--cancel-fraction; not failures)",
        lambda m: m.cancelled,
    ),
    ("good_requests", "Successes that met every per-request goodput limit", lambda m: m.good),
    ("prompt_tokens", "Prompt tokens of the successes, as the server's usage reported them", lambda m: m.prompt_tokens),
    ("output_tokens", "Output tokens of the successes, as the server's usage reported them", lambda m: m.output_tokens),
    (
        "reasoning_tokens",
        "Reasoning tokens of the successes (usage's, or the reasoning token events where more)",
        lambda m: m.reasoning_tokens,
    ),
)


def bucket_counts(hist: LatencyHistogram, bounds_s: Sequence[float]) -> list[int]:
    """Cumulative counts at each bound: the samples whose reported value (the highest value of
    their HdrHistogram range, in whole microseconds) is <= the bound."""
    values_ms, counts = hist.distinct_values_ms()
    if not len(counts):
        return [0] * len(bounds_s)
    values_us = np.rint(values_ms * 1000).astype(np.int64)  # exact: they are whole microseconds
    cumulative = np.cumsum(counts)
    below = np.searchsorted(values_us, [round(b * 1_000_000) for b in bounds_s], side="right")
    return [int(cumulative[i - 1]) if i else 0 for i in below.tolist()]


def histogram_buckets(hist: LatencyHistogram) -> tuple[list[tuple[str, float]], float]:
    """Prometheus buckets (`le` as prometheus-client writes it, +Inf last) and the sum in seconds."""
    counts = bucket_counts(hist, BUCKETS_S)
    buckets = [(floatToGoString(b), float(c)) for b, c in zip(BUCKETS_S, counts, strict=True)]
    buckets.append(("+Inf", float(hist.count)))
    mean_ms = hist.mean_ms()
    return buckets, 0.0 if mean_ms is None else mean_ms * hist.count / 1000


def _measurements(report: Report) -> Iterator[Metric]:
    store = report.measurements
    per_class = {name: store.get(name) for name in store.class_names()}
    for metric in PROMETHEUS:
        family = HistogramMetricFamily(
            f"{PREFIX}{metric.prometheus}", f"{metric.description}, per request class or tag", labels=["class"]
        )
        for cls, m in per_class.items():
            buckets, total = histogram_buckets(m.latency[metric.name])
            family.add_metric([cls], buckets, total)
        yield family
    for name, doc, value in _COUNTERS:
        if name == "good_requests" and store.goodput_targets_ms is None:
            continue  # not counted: no goodput limits (the report says None, not 0)
        counter = CounterMetricFamily(PREFIX + name, doc, labels=["class"])
        for cls, m in per_class.items():
            counter.add_metric([cls], value(m))
        yield counter
    failures = CounterMetricFamily(PREFIX + "failures", "Failed requests by kind of failure", labels=["class", "kind"])
    for cls, m in per_class.items():
        for kind in sorted({*FAILURE_KINDS, *m.errors_by_kind}):
            failures.add_metric([cls, kind], m.errors_by_kind.get(kind, 0))
    yield failures
    yield CounterMetricFamily(
        PREFIX + "warmup_excluded_requests", "Requests left out of every figure by the warm-up", store.warmup_excluded
    )


def _judgement(report: Report) -> Iterator[Metric]:
    labels = ["objective", "metric", "class"]
    value = GaugeMetricFamily(
        PREFIX + "objective_value", "Each objective's observed value (latency in seconds)", labels=labels
    )
    target = GaugeMetricFamily(
        PREFIX + "objective_target", "Each objective's bound (latency in seconds)", labels=[*labels, "bound"]
    )
    samples = GaugeMetricFamily(PREFIX + "objective_samples", "Samples behind each objective's value", labels=labels)
    state = GaugeMetricFamily(
        PREFIX + "objective_state", "1 for each objective's current state", labels=["objective", "state"]
    )
    for r in report.slos:
        o = r.objective
        scale = o.kind.si_scale
        key = [o.name, o.metric, o.request_class]
        if r.observed is not None:
            value.add_metric(key, r.observed * scale)
        for bound, limit in (("max", o.max), ("min", o.min)):
            if limit is not None:
                target.add_metric([*key, bound], limit * scale)
        samples.add_metric(key, r.samples)
        for outcome in Outcome:
            state.add_metric([o.name, str(outcome)], 1 if r.result == outcome else 0)
    yield from (value, target, samples, state)
    verdict = GaugeMetricFamily(PREFIX + "verdict", "1 for the run's verdict as of now", labels=["verdict"])
    for v in Verdict:
        verdict.add_metric([str(v)], 1 if report.verdict == v else 0)
    yield verdict
    yield GaugeMetricFamily(
        PREFIX + "client_saturated",
        "1 while the load generator's self-check finds it saturated or starved: its latencies include its own delay",
        1 if report.saturated else 0,
    )
    started = from_utc_iso(report.run.started_at)
    if started is not None:
        yield GaugeMetricFamily(PREFIX + "run_start_time_seconds", "When the current run started (Unix time)", started)


class ReportCollector:
    """A prometheus-client collector over a report, read afresh at each collection."""

    def __init__(self, report: Callable[[], Report]) -> None:
        self.report = report

    def collect(self) -> Iterator[Metric]:
        report = self.report()
        yield from _measurements(report)
        yield from _judgement(report)


def registry_for(report: Callable[[], Report]) -> CollectorRegistry:
    """A fresh registry holding only the report's metrics (none of the process's own)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReportCollector(report))
    return registry


def exposition(report: Report, accept: str | None = None) -> tuple[bytes, str]:
    """The report in the format the `Accept` header asks for (Prometheus text by default,
    OpenMetrics when asked), and its content type."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry_for(lambda: report)), content_type
