"""Anytime-valid verdicts: decide an objective as soon as the data allow, at any stopping time.

Why. `--slo-stop-when-decided` looks at the run every couple of seconds and stops at the first
look where every objective is decided. A fixed-n confidence bound re-checked at every look is
wrong that way: each look is another chance for noise to cross the bound, and stopping at the
first crossing turns a 1 % bound into a much larger error rate (benchmarks/sequential.py measures
it). The tests here are e-processes: nonnegative supermartingales under their null, so by Ville's
inequality P(sup_n M_n >= 1/alpha) <= alpha, and a verdict reached at any look, however the looks
and the stop are chosen, is wrong with probability at most alpha = 1 - confidence.

What. A latency objective "p-th percentile of X <= t" is, for the fixed target t, a statement about
the exceedance probability q = P(X > t): the true p-quantile is <= t iff q <= q0 = 1 - p/100
(Howard & Ramdas 2022 reduce quantile confidence sequences to this Bernoulli problem). Each
sample is a Bernoulli indicator X_i > t; with S exceedances among n samples, two one-sided
mixture likelihood ratios against the boundary q0 decide it:

    M_pass = sum_j w_j (q_j/q0)^S ((1-q_j)/(1-q0))^(n-S),  alternatives q_j < q0  (null q >= q0)
    M_fail = the same with q_j > q0                                                (null q <= q0)

PASS when M_pass >= 1/alpha, FAIL when M_fail >= 1/alpha. Each term is a likelihood ratio, a
martingale at q0 and a supermartingale for every q on the null side, and so is their average
(weights w_j summing to 1). For any truth only one of the two verdicts is wrong, so each test
gets the whole alpha. M_pass falls and M_fail rises with S, so each is a threshold on S
(`pass_thresholds`, `fail_thresholds`), and the thresholds turn into order-statistic ranks
(`upper_rank`, `lower_rank`): x_(upper_rank) and x_(lower_rank) are anytime-valid upper and lower
confidence bounds of the percentile, and PASS iff x_(upper_rank) <= t, FAIL iff x_(lower_rank) > t.

The alternatives sit on a grid of log-odds offsets from the null (logit q_j = logit q0 + d_j;
`OFFSETS`, `WEIGHTS`). Expressed relative to the null, the same construction tests any candidate
q', and the q' that neither side rejects form the confidence sequence for q; each side's mixture
is monotone in q', so its edge is found by bisection (`decide_proportion` reports it).
Error rate (failures of n requests vs max) and goodput (requests not good vs 1 - min) are this
proportion test directly. A rate (events in T seconds vs a minimum rate l0) uses the Poisson
analogue sum_j w_j (l_j/l0)^N exp(-(l_j - l0) T), log l_j = log l0 + d_j (`decide_rate`); it
assumes roughly Poisson arrivals (an open-loop load), and over-dispersed, bursty arrivals void it.

The grid, per side: 8 coarse offsets, geometric from 0.15 to 2.4 in log-odds (the odds of the
alternative 1.16 to 11 times those of the null, about the same factor in q for small q0), sharing
weight 0.6, 9 fine ones continuing the same spacing (a factor 1.49) down to 0.0042, sharing 0.1,
and 3 far ones (3.5, 5, 7) sharing 0.3: a gate's usual case is a server far from its target, whose
samples are all on one side (p95 at 99 %: all below after 110 samples instead of 134).
A mixture pays about log(1/w_j) in evidence for not knowing the alternative: log(8/0.6) = 2.6
on top of log(1/alpha) = 4.6 at 99 %, less where neighbouring points share the evidence; the
spacing loses at most a few percent of the growth rate between two points. The coarse range covers
the p95 of a lognormal TTFT at 0.8x to 1.25x its target for log-sd 0.3 to 1.0 (offsets 0.47 to
1.8) and reaches down to 0.15 so that truths near the target decide too, later. The fine points
keep the confidence sequence shrinking as n grows (at 10^7 samples and q0 = 0.05 the pass and fail
thresholds on S/n are within 0.0003 of q0; without them a truth within ~7 % of q0 would never be
decided) for ~3 % more samples at 0.8x and 1.25x; the far points cost ~6 % more there. Chosen by
simulation among 240 geometric grids (3 to 16 points, from 0.05-0.4 to 1.2-3.0): the best one for
0.8x and 1.25x alone is ~10 % faster there but 1.6-2x as slow at 0.9x and 1.1x
(docs/sequential-verdicts.md).

References: Ville (1939), Etude critique de la notion de collectif; Robbins (1970), Statistical
methods related to the law of the iterated logarithm, Ann. Math. Statist.; Howard, Ramdas,
McAuliffe & Sekhon (2021), Time-uniform, nonparametric, nonasymptotic confidence sequences,
Ann. Statist. 49(2); Howard & Ramdas (2022), Sequential estimation of quantiles with applications
to A/B-testing and best-arm identification, Bernoulli 28(3), arXiv:1906.09712.

Pure: math, dataclasses and numpy only; nothing here knows about Locust or the gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_COARSE = np.geomspace(0.15, 2.4, 8)  # where decisions are wanted fast: 0.8x-1.25x a p95 target
_FINE = _COARSE[0] * (_COARSE[0] / _COARSE[1]) ** np.arange(9, 0, -1)  # the same spacing on down to 0.0042
_FAR = np.array([3.5, 5.0, 7.0])  # a server far from its target (no sample over it): decided in the fewest samples
_FINE_SHARE, _FAR_SHARE = 0.1, 0.3
OFFSETS = np.concatenate(
    (_FINE, _COARSE, _FAR)
)  # log-odds (rates: log-ratio) distances of the alternatives from the null
WEIGHTS = np.concatenate(
    (
        np.full(len(_FINE), _FINE_SHARE / len(_FINE)),
        np.full(len(_COARSE), (1 - _FINE_SHARE - _FAR_SHARE) / len(_COARSE)),
        np.full(len(_FAR), _FAR_SHARE / len(_FAR)),
    )
)
_LOG_WEIGHTS = np.log(WEIGHTS)  # summing to 1 on each side
_THETA_LIMIT = 700.0  # |log-odds| or |log-rate| beyond which a bound is reported as 0, 1 or infinity
_THETA_TOLERANCE = 1e-10  # bisection width in log-odds or log-rate: ~1e-10 relative precision of a bound

PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict and the anytime-valid bounds at the look it was reached.

    lower/upper bound the quantity the objective is about: the event probability q
    (`decide_proportion`), the rate in events per second (`decide_rate`), or the percentile in the
    samples' unit (`decide_percentile`; None while n is too small for that bound). The true value
    lies in (lower, upper) at every n, with probability >= 1 - alpha for each side.
    samples: the requests judged (the events, for a rate)."""

    verdict: str  # PASS | FAIL | UNDECIDED
    lower: float | None
    upper: float | None
    samples: int


def exceedance_limit(percentile: float) -> float:
    """q0 = 1 - p/100: "p-th percentile <= t" holds iff P(X > t) <= q0. p must be in (0, 100]."""
    p = float(percentile)
    if not 0 < p <= 100:  # also refuses NaN
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    return (100.0 - p) / 100.0


def _check_alpha(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha = 1 - confidence must be in (0, 1), got {alpha!r}")
    return -math.log(alpha)


def _log_sigmoid(x: np.ndarray | float) -> np.ndarray:
    return -np.logaddexp(0.0, -np.asarray(x, dtype=float))


def _coefficients(theta: float, offsets: np.ndarray, poisson: bool) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of each alternative: its log likelihood ratio against the null is events * a + exposure * b.

    Binomial (theta = logit q', exposure n): a = log(q_j/q') - log((1-q_j)/(1-q')), b = log((1-q_j)/(1-q')).
    Poisson (theta = log l', exposure T seconds): a = d_j, b = -(l_j - l')."""
    if poisson:
        return offsets, -math.exp(theta) * np.expm1(offsets)
    log_miss = _log_sigmoid(-theta - offsets) - _log_sigmoid(-theta)
    return _log_sigmoid(theta + offsets) - _log_sigmoid(theta) - log_miss, log_miss


def _log_mixture(events: np.ndarray | float, exposure: np.ndarray | float, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log M = log sum_j w_j exp(events * a_j + exposure * b_j), broadcast over events and exposure."""
    events, exposure = np.asarray(events, dtype=float)[..., None], np.asarray(exposure, dtype=float)[..., None]
    return np.logaddexp.reduce(events * a + exposure * b + _LOG_WEIGHTS, axis=-1)


def _rejects(events: float, exposure: float, theta: float, offsets: np.ndarray, poisson: bool, bar: float) -> bool:
    return bool(_log_mixture(events, exposure, *_coefficients(theta, offsets, poisson)) >= bar)


def _edge(events: float, exposure: float, offsets: np.ndarray, poisson: bool, start: float, bar: float) -> float:
    """Where the one-sided test with these offsets stops rejecting the null theta (log-odds or log-rate).

    Positive offsets reject every null below the edge, negative ones every null above it (each mixture
    is monotone in theta). Bracketed from `start` by doubling steps, then bisected; the rejected end is
    returned (a conservative bound), -inf/inf when no null (or every null) on that side is rejected.
    Starting from the objective's own null keeps the bound and the verdict consistent exactly."""
    toward_kept = 1.0 if offsets[0] > 0 else -1.0
    rejected = kept = start
    step = 1.0
    if _rejects(events, exposure, start, offsets, poisson, bar):
        while _rejects(events, exposure, kept, offsets, poisson, bar):
            rejected, kept = kept, kept + toward_kept * step
            step *= 2
            if abs(kept) > _THETA_LIMIT:
                return toward_kept * math.inf
    else:
        while not _rejects(events, exposure, rejected, offsets, poisson, bar):
            kept, rejected = rejected, rejected - toward_kept * step
            step *= 2
            if abs(rejected) > _THETA_LIMIT:
                return -toward_kept * math.inf
    while abs(kept - rejected) > _THETA_TOLERANCE:
        middle = 0.5 * (kept + rejected)
        if _rejects(events, exposure, middle, offsets, poisson, bar):
            rejected = middle
        else:
            kept = middle
    return rejected


def _sigmoid(theta: float) -> float:
    return 1.0 / (1.0 + math.exp(-theta)) if theta >= 0 else math.exp(theta) / (1.0 + math.exp(theta))


def decide_proportion(events: int, n: int, max_rate: float, alpha: float) -> Decision:
    """Objective "P(event) <= max_rate", judged on `events` among `n` requests at level alpha = 1 - confidence.

    Error rate <= max: events = failures, max_rate = max. Goodput >= min: events = requests not good,
    max_rate = 1 - min (and goodput's bounds are 1 - upper, 1 - lower). A percentile: events = exceedances
    of the target, max_rate = exceedance_limit(p). Bounds are those of P(event). max_rate <= 0 never passes
    and fails at the first event; max_rate >= 1 passes whatever the data; n = 0 is otherwise undecided."""
    bar = _check_alpha(alpha)
    if not 0 <= events <= n:
        raise ValueError(f"need 0 <= events <= n, got events={events}, n={n}")
    degenerate = not 0 < max_rate < 1
    start = 0.0 if degenerate else math.log(max_rate) - math.log1p(-max_rate)
    lower = _sigmoid(_edge(events, n, OFFSETS, False, start, bar))
    upper = _sigmoid(_edge(events, n, -OFFSETS, False, start, bar))
    if max_rate >= 1:
        verdict = PASS
    elif max_rate <= 0:
        verdict = FAIL if events > 0 else UNDECIDED
    elif _rejects(events, n, start, -OFFSETS, False, bar):
        verdict = PASS
    elif _rejects(events, n, start, OFFSETS, False, bar):
        verdict = FAIL
    else:
        verdict = UNDECIDED
    if verdict == PASS:  # q0 itself is rejected: the clamp only removes the rounding of sigmoid(logit(q0))
        upper = min(upper, max_rate)
    elif verdict == FAIL:
        lower = max(lower, max_rate)
    return Decision(verdict, lower, upper, n)


def decide_rate(events: int, seconds: float, min_rate: float, alpha: float) -> Decision:
    """Objective "rate >= min_rate" (events per second), judged on `events` counted over `seconds`.

    Assumes roughly Poisson arrivals (an open-loop load); bursty, over-dispersed arrivals void the
    guarantee. Bounds are of the rate. samples: the events. No time yet (seconds = 0) is undecided."""
    bar = _check_alpha(alpha)
    if events < 0 or seconds < 0 or not min_rate > 0:
        raise ValueError(f"need events >= 0, seconds >= 0, min_rate > 0, got {events}, {seconds}, {min_rate}")
    if seconds == 0:
        return Decision(UNDECIDED, 0.0, math.inf, events)
    start = math.log(min_rate)
    lower = math.exp(_edge(events, seconds, OFFSETS, True, start, bar))
    upper = math.exp(_edge(events, seconds, -OFFSETS, True, start, bar))
    if _rejects(events, seconds, start, OFFSETS, True, bar):
        verdict = PASS
    elif _rejects(events, seconds, start, -OFFSETS, True, bar):
        verdict = FAIL
    else:
        verdict = UNDECIDED
    if verdict == PASS:  # min_rate itself is rejected: the clamp only removes the rounding of exp(log(min_rate))
        lower = max(lower, min_rate)
    elif verdict == FAIL:
        upper = min(upper, min_rate)
    return Decision(verdict, lower, upper, events)


def pass_thresholds(n: np.ndarray | int, q0: float, alpha: float) -> np.ndarray:
    """For each n: the largest exceedance count S that passes "P(X > t) <= q0" (M_pass(S, n) >= 1/alpha), -1 if none.

    Vectorised over n (an integer bisection on S for all n at once); stable for n up to 10^7 and more."""
    bar = _check_alpha(alpha)
    n = np.asarray(n, dtype=np.int64)
    if q0 >= 1:
        return n.copy()
    if q0 <= 0:
        return np.full(n.shape, -1, dtype=np.int64)
    a, b = _coefficients(math.log(q0) - math.log1p(-q0), -OFFSETS, False)
    passing, failing = np.full(n.shape, -1, dtype=np.int64), n.copy()  # M_pass(n, n) < 1 <= 1/alpha: S = n never passes
    while np.any(open_ := failing - passing > 1):
        middle = (passing + failing) // 2
        passes = _log_mixture(middle, n, a, b) >= bar
        passing = np.where(open_ & passes, middle, passing)
        failing = np.where(open_ & ~passes, middle, failing)
    return passing


def fail_thresholds(n: np.ndarray | int, q0: float, alpha: float) -> np.ndarray:
    """For each n: the smallest exceedance count S that fails "P(X > t) <= q0" (M_fail(S, n) >= 1/alpha);
    n + 1 if none. Vectorised over n like `pass_thresholds`."""
    bar = _check_alpha(alpha)
    n = np.asarray(n, dtype=np.int64)
    if q0 >= 1:
        return n + 1
    if q0 <= 0:
        return np.minimum(1, n + 1)
    a, b = _coefficients(math.log(q0) - math.log1p(-q0), OFFSETS, False)
    kept, failing = np.zeros(n.shape, dtype=np.int64), n + 1  # M_fail(0, n) < 1 <= 1/alpha: S = 0 never fails
    while np.any(open_ := failing - kept > 1):
        middle = (kept + failing) // 2
        fails = _log_mixture(middle, n, a, b) >= bar
        failing = np.where(open_ & fails, middle, failing)
        kept = np.where(open_ & ~fails, middle, kept)
    return failing


def pass_threshold(n: int, q0: float, alpha: float) -> int | None:
    """The largest exceedance count among n samples that passes "P(X > t) <= q0"; None if none does."""
    s = int(pass_thresholds(n, q0, alpha))
    return s if s >= 0 else None


def fail_threshold(n: int, q0: float, alpha: float) -> int | None:
    """The smallest exceedance count among n samples that fails "P(X > t) <= q0"; None if none does."""
    s = int(fail_thresholds(n, q0, alpha))
    return s if s <= n else None


def upper_rank(n: int, percentile: float, alpha: float) -> int | None:
    """The 1-based rank k whose order statistic x_(k) of n samples is the anytime-valid upper bound of the
    p-quantile: the smallest k such that n - k exceedances pass. PASS iff x_(k) <= t. None: no bound yet."""
    s = pass_threshold(n, exceedance_limit(percentile), alpha)
    return None if s is None else n - s


def lower_rank(n: int, percentile: float, alpha: float) -> int | None:
    """The 1-based rank k whose order statistic x_(k) of n samples is the anytime-valid lower bound of the
    p-quantile: the largest k such that n - k + 1 exceedances fail. FAIL iff x_(k) > t. None: no bound yet."""
    s = fail_threshold(n, exceedance_limit(percentile), alpha)
    return None if s is None else n + 1 - s


def decide_percentile(values: np.ndarray, percentile: float, max_value: float, alpha: float) -> Decision:
    """Objective "p-th percentile of the values <= max_value", with its bounds in the values' unit.

    The rank form of `decide_proportion(#values > max_value, n, exceedance_limit(p), alpha)`, which it agrees
    with: PASS iff the upper bound <= max_value, FAIL iff the lower bound > max_value."""
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    upper_k, lower_k = upper_rank(n, percentile, alpha), lower_rank(n, percentile, alpha)
    upper = None if upper_k is None else float(ordered[upper_k - 1])
    lower = None if lower_k is None else float(ordered[lower_k - 1])
    if upper is not None and upper <= max_value:
        verdict = PASS
    elif lower is not None and lower > max_value:
        verdict = FAIL
    else:
        verdict = UNDECIDED
    return Decision(verdict, lower, upper, n)
