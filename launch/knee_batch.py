"""`--batch-s` (`batch_length`: auto, 0 or seconds), and a step's percentile objectives decided on
batches of consecutive requests of fixed length (`--batch-s S`), for a server whose requests are not
independent: near its knee a queue's waits come in busy periods, so
the per-request bounds of slo/gate/sequential.py (independent samples) are overconfident there.

A batch is every request sent in `batch_s` seconds of the step (whole `--slo-interval-s`
intervals of the report's time series, by send time); its exceedance fraction X_b (requests over
the target / requests) lies in [0, 1]. "p-th percentile <= t" is read as E[X_b] <= q0 = 1 - p/100,
and decided by two betting martingales (Waudby-Smith & Ramdas 2024, Estimating means of bounded
random variables by betting, JRSS-B), each a mixture over a fixed grid of bets `LAMBDAS`:

    M_pass = mean_j prod_b (1 + l_j (q0 - X_b)),  l_j < 1 / (1 - q0)   (null E[X] >= q0)
    M_fail = mean_j prod_b (1 + l_j (X_b - q0)),  l_j < 1 / q0         (null E[X] <= q0)

PASS once M_pass >= 1/alpha, FAIL once M_fail >= 1/alpha, at any batch (Ville's inequality).

What it guarantees: an error rate <= alpha when the batches are independent with one mean, i.e.
`batch_s` well above the server's correlation time (how long a busy period lasts: a few request
durations) and the warm-up past the transient of a step that starts from an empty queue. Batches
of one request would be the per-request test; longer batches cost time: a clean pass needs about
log(1/alpha) / -log(1 - q0) batches (90 at p95 and 99 %) whatever the rate, so a pass takes at
least ~90 x `batch_s` seconds. The equal weight of each batch estimates the per-request fraction
when the rate is steady (each batch holds about rate x batch_s requests). Only latency percentiles
kept in the time series (TTFT, ITL, E2E) are batched; every other objective keeps its own bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from slogate.slo.gate.correlation import exceedance_counts
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.objective_kinds import Objective
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED, exceedance_limit

AUTO = "auto"  # `--batch-s auto`: batches as long as each run's measured correlation (slo/gate/correlation.py)
# Bets as fractions of the largest each side may place (the factor must stay > 0 at X = 0 or 1).
LAMBDAS = np.array([0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 0.99])


def batch_fractions(o: Objective, measurements: MetricsStore, batch_s: float) -> list[float]:
    """The exceedance fraction of `o`'s target in each whole batch of `batch_s` seconds, in send
    order; the last batch, cut by the step's end, is left out, as are batches without requests."""
    per = max(1, round(batch_s / measurements.intervals.interval_s))
    counts: dict[int, list[int]] = {}
    for idx, (over, n) in exceedance_counts(o, measurements).items():
        if n:
            total = counts.setdefault(idx // per, [0, 0])
            total[0] += over
            total[1] += n
    return [counts[k][0] / counts[k][1] for k in sorted(counts)[:-1]]


def _crossed(log_factors: np.ndarray, alpha: float) -> int | None:
    """The first batch (index) at which the mixture's log wealth reaches log(1/alpha), or None."""
    if not len(log_factors):
        return None
    wealth = np.log(np.mean(np.exp(np.cumsum(log_factors, axis=0)), axis=1))
    hit = np.flatnonzero(wealth >= -math.log(alpha))
    return int(hit[0]) if len(hit) else None


def decide_fractions(fractions: Sequence[float], q0: float, pass_alpha: float, fail_alpha: float) -> str:
    """pass, fail or undecided: the first of the two martingales to reach its threshold."""
    x = np.asarray(fractions, dtype=float).reshape(-1, 1)
    passed = _crossed(np.log1p((q0 - x) * (LAMBDAS / (1 - q0))), pass_alpha)
    failed = _crossed(np.log1p((x - q0) * (LAMBDAS / q0)), fail_alpha)
    if passed is None and failed is None:
        return UNDECIDED
    if failed is None or (passed is not None and passed < failed):
        return PASS
    return FAIL


def decide_batched(
    o: Objective, runs: Sequence[MetricsStore], batch_s: float, pass_alpha: float, fail_alpha: float
) -> str:
    """`o` decided on the batches of `runs` at one rate, one after the other (`batchable(o, ...)`)."""
    assert o.percentile is not None
    q0 = exceedance_limit(o.percentile)
    fractions = [x for m in runs for x in batch_fractions(o, m, batch_s)]
    return decide_fractions(fractions, q0, pass_alpha, fail_alpha)


def clean_pass_batches(alpha: float, q0: float = 0.05) -> int:
    """The batches all under the target that pass a p(1 - q0) at level `alpha` with the mixture's
    largest bet alone (its share of the weight paid): ~130 at p95 and 99 %."""
    largest = math.log1p(LAMBDAS[-1] * q0 / (1 - q0))
    return math.ceil((math.log(len(LAMBDAS)) - math.log(alpha)) / largest)


def batch_length(text: str) -> float | str | None:
    """`--batch-s`: "auto" (AUTO), 0 (None: per request, requests assumed independent) or seconds > 0."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or math.isinf(seconds):
        raise ValueError(f"--batch-s: must be auto, 0 (per request) or seconds > 0, got {text}")
    return seconds or None


STOP_WHEN_DECIDED = "--slo-stop-when-decided"
STOP_WHEN_FAILED = "--slo-stop-when-failed"


def steps_stop_early(early_stop: bool, batch_s: float | str | None, knee: bool) -> str | None:
    """The early stop a step's run gets (its Locust option), None for none: per request,
    `--slo-stop-when-decided`; on fixed batches, none (the per-request bounds would end it too soon);
    on adaptive batches, deciding on them itself (`--slo-correlated-requests`), the test at R (`knee`
    false) `--slo-stop-when-decided`, a search's steps `--slo-stop-when-failed`: a step far past the
    knee ends in seconds, while a pass is judged at the run's end, since repeated looks at a tau
    measured on a few seconds pass steps just above the knee (simulated: 32/40 intervals covered the
    knee with passes and fails early, 40/40 with whole steps and 40/40 with fails only early, in a
    third less time; benchmarks/RESULTS.md)."""
    if not early_stop or batch_s not in (None, AUTO):
        return None
    return STOP_WHEN_FAILED if batch_s == AUTO and knee else STOP_WHEN_DECIDED
