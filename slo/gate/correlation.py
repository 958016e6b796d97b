"""Latency percentiles decided on batches as long as the requests' own measured correlation
(`--slo-correlated-requests` for a run's early stop; `slogate capacity --batch-s auto`, the default,
for each step).

Near a queue's knee the requests' waits come in busy periods: whether one request is over its target
says a lot about the next, and the per-request bounds (slo/gate/sequential.py, independent samples)
are then overconfident. How much is measured, run by run: the integrated autocorrelation time tau of
the over-target indicator in send order (1 for independent requests, (1 + rho) / (1 - rho) for an
AR(1) series), estimated from the run's `--slo-interval-s` time series (1 s in a capacity step) of
exceedance counts (their long-run variance, Geyer's initial monotone sequence estimator, over the
binomial variance). The exceedances are then counted in batches of k = max(1, SAFETY x tau)
requests: n requests and x over the target count as n/k samples and x/k exceedances in the
per-request bounds (an effective sample size). Far below the knee (tau ~ 1, or nothing over the
target to measure it by) a decision needs twice the requests of the per-request test; near the knee
k times them, or it stays undecided. A floor of 1 (k = 1) is reached only by a negatively correlated
series. A decision needs tau measured: in a run of fewer than MIN_INTERVALS intervals with a request
over the target, each interval's requests count as at most one sample, for a pass and for a fail
(far above a knee a few intervals all over still fail; a burst in the first two seconds of a step 8
% below the knee, at tau 1, was decided fail on a real run). Near the target (its own percentile
from NEAR of it up), k is also measured on the requests over that own percentile (at least the
objective's share of them): a calm window near the knee has too few requests over the target to show
how they cluster (simulated M/G/8 steps 1.3 % above the knee passed 23 times in 200 on k from those
alone, 11 with this). Intervals without a request of the objective's class are left out. The
guarantee is approximate (tau is estimated from the run itself; SAFETY covers its noise):
docs/capacity.md gives the coverage it measured in simulation.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.histogram import LatencyHistogram, merged
from slogate.slo.gate.intervals import IntervalSeries
from slogate.slo.gate.latency_metrics import INTERVAL_METRICS
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.objective_kinds import LatencyPercentile, Objective
from slogate.slo.gate.record import ALL
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED, exceedance_limit, fail_threshold, pass_threshold

SAFETY = 2.0  # batches this many times the estimated correlation time
NEAR, QUANTUM = 0.75, 0.05  # a run's own percentile from 75 % of the target up is near it (near_target_batch_length)
MIN_INTERVALS = 10  # a run of fewer, with a request over the target: tau unmeasured, one sample per interval
# (over, requests) per (objective's metric, class, target, interval index) of a time series, with the
# interval's change count: a run's look every second recounts only the intervals that changed.
_COUNTED: weakref.WeakKeyDictionary[IntervalSeries, dict[tuple, tuple[int, int, int]]] = weakref.WeakKeyDictionary()


def batchable(o: Objective, measurements: MetricsStore) -> bool:
    """A latency percentile of one sample per request, with a ceiling, whose metric and class the time
    series keeps (TTFT, TTFO, E2E; a request class or all, not a tag: the series is kept per class)."""
    return (
        isinstance(o.kind, LatencyPercentile)
        and o.kind.decidable_early(o)
        and o.max is not None
        and measurements.intervals.enabled
        and o.metric in INTERVAL_METRICS
        and (o.request_class == ALL or o.request_class in measurements.classes)
    )


def integrated_autocorrelation_time(x: Sequence[float] | np.ndarray) -> float:
    """tau = 1 + 2 sum_k rho_k of a stationary series, by Geyer's initial monotone sequence
    estimator (sums of adjacent autocovariance pairs while positive and decreasing); 1 for a
    constant or too short series."""
    d = np.asarray(x, dtype=float)
    n = len(d)
    d = d - d.mean() if n else d
    gamma0 = float(d @ d) / n if n else 0.0
    if n < 4 or gamma0 <= 0:
        return 1.0
    total, last = -gamma0, math.inf
    for m in range(n // 2):
        pair = sum(float(d[: n - k] @ d[k:]) / n for k in (2 * m, 2 * m + 1) if k < n)
        if pair <= 0:
            break
        last = min(last, pair)
        total += 2 * last
    return total / gamma0


def request_correlation(over: Sequence[int], totals: Sequence[int]) -> float:
    """The indicators' tau from per-interval counts of requests over the target (`over`) and of
    requests (`totals`), intervals with requests only: the counts' long-run variance per request
    over p(1 - p); 1 with no exceedance (or nothing under the target), or fewer than 4 intervals,
    to measure it by."""
    x, n = np.asarray(over, dtype=float), np.asarray(totals, dtype=float)
    x, n = x[n > 0], n[n > 0]
    if len(n) < 4:
        return 1.0
    p = x.sum() / n.sum()
    if p <= 0 or p >= 1:
        return 1.0
    d = x - p * n
    if not np.any(d):  # every interval exactly at the mean: nothing to measure a correlation by
        return 1.0
    long_run = float(d @ d) / len(d) * integrated_autocorrelation_time(d)
    return long_run / (n.mean() * p * (1 - p))


def exceedance_counts(o: Objective, m: MetricsStore) -> dict[int, tuple[int, int]]:
    """(requests over `o`'s target, requests) per interval index of `m`'s time series."""
    assert o.max is not None
    series = m.intervals
    cache = _COUNTED.setdefault(series, {})
    counts = {}
    for idx, by_class in series.intervals.items():
        key, changes = (o.metric, o.request_class, o.max, idx), series.changes.get(idx, 0)
        known = cache.get(key)
        if known is not None and known[0] == changes:
            counts[idx] = known[1:]
            continue
        cells = by_class.values() if o.request_class == ALL else [c for c in [by_class.get(o.request_class)] if c]
        x = n = 0
        for cell in cells:
            h = cell.read(o.metric)
            for value_ms, count in h.values_and_counts_ms() if h is not None else ():
                x += count if value_ms > o.max else 0
                n += count
        counts[idx], cache[key] = (x, n), (changes, x, n)
    return counts


def pooled_counts(runs: Sequence[MetricsStore], o: Objective) -> tuple[list[int], list[int]]:
    """Requests over `o`'s target and requests per interval of `runs` at one rate, in send order, one run
    after the other."""
    ordered = [counts[idx] for m in runs for counts in [exceedance_counts(o, m)] for idx in sorted(counts)]
    return [x for x, _ in ordered], [n for _, n in ordered]


def batch_length_of(over: Sequence[int], totals: Sequence[int]) -> float:
    """k, the batch length in requests, of per-interval counts (`pooled_counts`)."""
    return max(1.0, SAFETY * request_correlation(over, totals))


def near_target_batch_length(o: Objective, runs: Sequence[MetricsStore]) -> float:
    """k measured on the requests over the runs' own nearest-rank percentile (rounded down to a QUANTUM
    of the target, so that a look every second recounts only when it moves), when that percentile is
    under the target but at least NEAR of it; 1 otherwise. Those requests are the objective's share of
    the runs (5 % for a p95), enough to show how requests near the target cluster where the few over
    it cannot (a calm window near the knee)."""
    assert o.max is not None and o.percentile is not None
    own = merged(h for m in runs for h in _histograms(o, m))
    value = own.percentile_ms(o.percentile) if own is not None else None
    if value is None or not NEAR * o.max <= value < o.max:
        return 1.0
    lower = replace(o, max=o.max * math.floor(value / (o.max * QUANTUM) + 1e-9) * QUANTUM)
    return batch_length_of(*pooled_counts(runs, lower))


def _histograms(o: Objective, m: MetricsStore) -> list[LatencyHistogram | None]:
    """`o`'s metric in `m`: its class's histogram, or, for `all`, each class's (not a merged copy of every
    metric of every class, which a look every second would build)."""
    classes = m.classes.values() if o.request_class == ALL else [m.get(o.request_class)]
    return [cm.latency.get(o.metric) for cm in classes]


def _span(counts: dict[int, tuple[int, int]]) -> int:
    """Intervals from the first with a request to the last, empty ones between them included."""
    held = [idx for idx, (_, n) in counts.items() if n]
    return max(held) - min(held) + 1 if held else 0


def decide_adaptive(
    o: Objective,
    runs: Sequence[MetricsStore],
    pass_alpha: float,
    fail_alpha: float,
    more_s: float = 0.0,
    clean: bool = False,
) -> str:
    """pass, fail or undecided: `o` on the per-request bounds with n/k samples and x/k exceedances (k the
    larger of the over-target one and, near the target, `near_target_batch_length`); with an exceedance
    in fewer than MIN_INTERVALS intervals measured, one sample per interval (at most). `more_s` > 0
    projects: what `more_s` seconds more of the same would decide, at the share, the rate and the k
    measured so far (point estimates: whether more runs are worth their time, never a decision); `clean`,
    as if no request had been over the target (whether the runs could pass at all)."""
    assert o.percentile is not None
    q0 = exceedance_limit(o.percentile)
    over, totals = pooled_counts(runs, o)
    over = [0] * len(over) if clean else over
    measured = sum(1 for t in totals if t)
    # Projected by the seconds elapsed, empty ones too (a low rate has some); a plain decision (a look every
    # second of a run) needs none of it.
    elapsed = sum(_span(exceedance_counts(o, m)) for m in runs) if more_s else 0
    scale = 1 + more_s / (elapsed * runs[-1].intervals.interval_s) if elapsed else 1.0
    k = batch_length_of(over, totals)
    k = k if clean else max(k, near_target_batch_length(o, runs))
    x, n = sum(over) * scale, sum(totals) * scale
    intervals = measured * scale
    k_short = max(k, n / intervals) if x and intervals < MIN_INTERVALS else k

    def share(k: float) -> tuple[int, float]:
        samples = math.floor(n / k) if n else 0
        return samples, x * samples / n if n else 0.0  # the observed share on the floored count

    samples, exceedances = share(k_short)
    passes = pass_threshold(samples, q0, pass_alpha) if samples else None
    if passes is not None and exceedances <= passes:
        return PASS
    fails = fail_threshold(samples, q0, fail_alpha) if samples else None
    if fails is not None and exceedances >= fails:
        return FAIL
    return UNDECIDED


def correlated_look(
    per_request: ObjectiveLook, o: Objective, measurements: MetricsStore, pass_alpha: float, fail_alpha: float
) -> ObjectiveLook:
    """`per_request` (the percentile kind's look at `o`) with its state decided on batches instead:
    undecided where the batches cannot tell yet, and a fail only where the per-request look, which
    allows for the client's delay, fails too. Its bounds stay the per-request ones."""
    state = decide_adaptive(o, [measurements], pass_alpha, fail_alpha)
    if state == FAIL and per_request.state != FAIL:
        state = UNDECIDED
    return per_request if state == per_request.state else replace(per_request, state=state)
