"""Abort on breach: each latency objective judged over a sliding window while the run goes on.

`--slo-abort-on-fail` (k6's `abortOnFail`) stops a run as soon as an objective fails beyond
what noise explains, so a failing run (a capacity step past the knee) costs seconds, not its
whole `--run-time`. A windowed percentile of a few dozen samples swings widely, so the test is
not "the window's p95 is above the target" but "a one-sided `ABORT_CONFIDENCE` lower confidence
bound of the window's percentile is above it", distribution-free from binomial order
statistics: with n samples the k-th smallest, x_(k), is at or below the true p-quantile with
probability P(Binomial(n, p) >= k); the largest k for which that is >= the confidence gives
the bound. A bound above the target means even the luckiest plausible truth breaches.

The window is read from the run's time series (slo/gate/intervals.py: per-interval histograms by
request start), the whole intervals that overlap the last `window_s` seconds. Which objectives a
window judges, and the bound it judges them by, each objective's kind says
(slo/gate/objective_kinds.py `windowable`, `window_bound`). Only metrics the
time series keeps (TTFT, ITL, E2E) on `all` or a request class are windowed; every other objective,
those on a tag included (`unwindowed_note` says so once), is judged at the end as usual.
The judge knows nothing of Locust: slo/plugin/ calls `first_breach`, stops, and puts the
`Breach` in `RunInfo.aborted`, which the judge (slo/gate/judge.py `fold_abort`) turns into a fail.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np
from slogate.slo.gate.facts import Breach
from slogate.slo.gate.histogram import LatencyHistogram, merged
from slogate.slo.gate.intervals import IntervalSeries
from slogate.slo.gate.record import is_conversation_tag

if TYPE_CHECKING:  # the kinds (slo/gate/objective_kinds.py) read their windows with this module's bounds
    from slogate.slo.gate.spec import Objective, SloSpec

ABORT_CONFIDENCE = 0.99  # one-sided; checked every few seconds, so kept strict
DEFAULT_WINDOW_S = 30.0


def lower_bound_rank(n: int, percentile: float, confidence: float = ABORT_CONFIDENCE) -> int:
    """The largest 1-based rank k with P(Binomial(n, p) >= k) >= confidence, p = percentile / 100:
    x_(k) is then a one-sided `confidence` lower bound of the p-quantile. 0: n is too small for any."""
    p = percentile / 100
    if n <= 0:
        return 0
    if p >= 1:
        return n  # the maximum bounds the 100th percentile from below with certainty
    i = np.arange(n + 1)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_pmf = log_fact[n] - log_fact[i] - log_fact[n - i] + i * math.log(p) + (n - i) * math.log1p(-p)
    upper_tail = np.cumsum(np.exp(log_pmf)[::-1])[::-1]  # upper_tail[k] = P(X >= k)
    eligible = np.flatnonzero(upper_tail >= confidence)
    return int(eligible[-1]) if len(eligible) else 0


def value_at_rank_ms(h: LatencyHistogram, rank: int) -> float:
    """The k-th smallest recorded value (ms, highest equivalent, as percentiles are reported)."""
    values, counts = h.distinct_values_ms()
    return float(values[np.searchsorted(np.cumsum(counts), rank, side="left")])


def windowed(series: IntervalSeries, metric: str, request_class: str, now: float, window_s: float) -> LatencyHistogram:
    """The histogram of `metric` for `request_class` over the intervals overlapping (now - window_s, now]."""
    first, last = series.index(now - window_s), series.index(now)
    hists = [series.histograms(idx, metric).get(request_class) for idx in range(first, last + 1)]
    return merged(hists) or LatencyHistogram()


def windowed_objectives(spec: SloSpec) -> list[Objective]:
    """The objectives a window can judge: latency percentiles of metrics the time series keeps, on
    `all` or a request class (the time series is kept per class, not per conversation tag)."""
    return [o for o in spec.objectives if o.kind.windowable(o) and not is_conversation_tag(o.request_class)]


def objectives_on_tags(spec: SloSpec, tags: Collection[str] = ()) -> list[Objective]:
    """The windowable objectives the window skips: those on a conversation tag (`follow_up`,
    `turn_3`, ...), known from the name, or on any of `tags`, the names a run has measured as tags
    rather than request classes (a trace line's or dataset entry's `class`), known once it has.

    Why not window them too: the time series would need a histogram set per tag and interval (up
    to 11 more per class for conversations), which every report, hlog and worker message would
    carry for a figure only the abort reads; an abort on the request class or `all` covers a run
    that is past its knee."""
    return [
        o
        for o in spec.objectives
        if o.kind.windowable(o) and (is_conversation_tag(o.request_class) or o.request_class in tags)
    ]


def unwindowed_note(skipped: list[Objective]) -> str | None:
    """One line naming `skipped` (`objectives_on_tags`), which only the end-of-run verdict judges."""
    if not skipped:
        return None
    names = ", ".join(f"{o.name} ({o.describe()})" for o in skipped)
    return (
        f"--slo-abort-on-fail: {names}: on a tag, not a request class: not judged over the window "
        "(the time series is per request class); judged at the end of the run"
    )


def first_breach(
    spec: SloSpec,
    series: IntervalSeries,
    now: float,
    started_at: float,
    window_s: float = DEFAULT_WINDOW_S,
    client_delay_ms: float = 0.0,
) -> Breach | None:
    """The first objective whose window, once it holds `min_samples`, breaches beyond noise and
    beyond `client_delay_ms`, the delay a saturated or starved load generator may have added (a
    breach it could explain is left to the end-of-run verdict, which makes it inconclusive)."""
    if not series.enabled:
        return None
    for o in windowed_objectives(spec):
        h = windowed(series, o.metric, o.request_class, now, window_s)
        if h.count < spec.min_samples:
            continue
        breach = o.kind.window_bound(o, h, client_delay_ms)
        if breach is not None:
            observed, bound = breach
            return Breach(
                o.name,
                o.describe(),
                now,
                now - started_at,
                window_s,
                h.count,
                observed,
                bound,
                client_delay_ms,
                ABORT_CONFIDENCE,
            )
    return None
