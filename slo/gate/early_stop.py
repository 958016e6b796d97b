"""`--slo-stop-when-decided`: a look at the run so far, objective by objective, with the anytime-valid
bounds of slo/gate/sequential.py, and the verdict once it is certain either way.

A TTFT, TPOT or E2E percentile (one sample per request) passes when its upper confidence bound is
at or below `max_ms` and fails when its lower bound is above it (beyond what the load generator's
own delay could have added, as the abort judges it); an error rate (`max`), a goodput floor and a
request rate floor by the bounds of a binomial proportion or a Poisson rate. `min_samples` holds:
an objective with fewer samples is undecided. What cannot be decided before the end keeps the run
going to its `--run-time`: ITL (a request's token gaps are not independent samples), server
figures (a peak or a whole-run change of `/metrics`), tokens per second (tokens come in bursts of a
request), rates with a ceiling, and the regression rules against a baseline, unless the user lists
them with `--slo-not-blocking` (then they are judged at the stop as usual, not waited for; a listed
objective that is decided early is not waited for either, but its early failure still fails).

The run's verdict is certain when one objective has failed (nothing can make it pass) or when
every objective that blocks has passed. The bounds are anytime-valid, so the run's verdict is
wrong with probability at most 1 - confidence however often the run is looked at (`look` says
how the levels are shared among objectives); they hold for samples drawn independently from one
distribution (a steady load after the warm-up). A look sees the requests that have ended; those
in flight at the stop are added to the final figures (their waits as TTFT lower bounds), so near
saturation the end-of-run verdict may differ from the decision: the report's verdict is always the
judge's on every figure, and it says so (slo/gate/judge.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from slogate.slo.gate import sequential
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED
from slogate.slo.gate.spec import GOODPUT, Objective, SloSpec
from slogate.slo.gate.window import value_at_rank_ms

DEFAULT_CONFIDENCE = 0.99  # of each bound: a wrong verdict has probability <= 1 %
REGRESSIONS = "regressions"  # the name `--slo-not-blocking` takes for the baseline's rules
AT_END = "at_end"  # an objective only the end of the run can judge
PER_REQUEST_LATENCY = ("ttft", "tpot", "e2e")  # one sample per request; ITL has many, correlated


def decidable_early(o: Objective) -> bool:
    """Whether `look_at` can decide `o` before the end (the one definition of which can)."""
    if o.is_latency:
        return o.metric in PER_REQUEST_LATENCY
    if o.metric == "error_rate":
        return o.max is not None and o.min is None
    if o.metric in ("requests_per_s", GOODPUT):
        return o.min is not None and o.max is None
    return False


def waits_for(spec: SloSpec, not_blocking: Collection[str], with_baseline: bool) -> list[str]:
    """The objectives (and `regressions`) that keep a run going to its run time: those that cannot
    be decided early and are not listed as not blocking."""
    names = [o.name for o in spec.objectives if not decidable_early(o) and o.name not in not_blocking]
    if with_baseline and spec.regressions and REGRESSIONS not in not_blocking:
        names.append(REGRESSIONS)
    return names


def unknown_names(spec: SloSpec, not_blocking: Collection[str]) -> list[str]:
    """Names given to `--slo-not-blocking` that are neither an objective of the spec nor `regressions`."""
    known = {o.name for o in spec.objectives} | {REGRESSIONS}
    return sorted(set(not_blocking) - known)


def look_at(
    o: Objective, measurements: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float = 0.0
) -> ObjectiveLook:
    """One objective as the data so far decide it (`state`: pass, fail, undecided or at_end): it
    passes at level `pass_alpha`, fails at `fail_alpha` (`look` says why they differ)."""
    cm = measurements.get(o.request_class)
    if not decidable_early(o):
        return ObjectiveLook(o.name, o.describe(), AT_END, cm.requests, None, None, "")
    if o.is_latency:
        assert o.percentile is not None and o.max is not None
        h = cm.latency[o.metric]
        up, low = (
            sequential.upper_rank(h.count, o.percentile, pass_alpha),
            sequential.lower_rank(h.count, o.percentile, fail_alpha),
        )
        upper = value_at_rank_ms(h, up) if up else None
        lower = value_at_rank_ms(h, low) if low else None
        state = UNDECIDED
        if upper is not None and upper <= o.max:
            state = PASS
        elif lower is not None and lower - client_delay_ms > o.max:
            state = FAIL
        return ObjectiveLook(o.name, o.describe(), state, h.count, lower, upper, "ms")
    if o.metric == "error_rate":
        state, lower, upper = _both_sides(
            lambda alpha: sequential.decide_proportion(cm.failures, cm.requests, o.max or 0.0, alpha),
            pass_alpha, fail_alpha,
        )  # fmt: skip
        return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "")
    floor = o.min or 0.0
    if floor <= 0:  # a floor of 0 holds whatever the data
        return ObjectiveLook(o.name, o.describe(), PASS, cm.requests, None, None, "")
    # A starved or saturated client may have caused a missed floor (evaluate's `_explained_by`):
    # with a client delay, goodput and rate floors can pass early but not fail.
    fail_at = fail_alpha if client_delay_ms <= 0 else 0.0
    if o.metric == GOODPUT:
        if measurements.goodput_targets_ms is None:  # good requests not counted against these limits
            return ObjectiveLook(o.name, o.describe(), UNDECIDED, cm.requests, None, None, "")
        not_good = cm.requests - cm.good  # failures count, never as good (as the goodput objective judges)
        state, low_miss, up_miss = _both_sides(
            lambda alpha: sequential.decide_proportion(not_good, cm.requests, 1 - floor, alpha),
            pass_alpha, fail_at,
        )  # fmt: skip
        lower, upper = (None if up_miss is None else 1 - up_miss), (None if low_miss is None else 1 - low_miss)
        return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "")
    state, lower, upper = _both_sides(
        lambda alpha: sequential.decide_rate(cm.successes, cm.duration_s or 0.0, floor, alpha),
        pass_alpha, fail_at,
    )  # fmt: skip
    return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "/s")


def _both_sides(
    decide: Callable[[float], sequential.Decision], pass_alpha: float, fail_alpha: float
) -> tuple[str, float | None, float | None]:
    """A proportion or rate decided at one level for passing and another for failing: the state,
    the failing side's lower bound and the passing side's upper bound (the side a verdict reads).
    `fail_alpha` 0: this objective cannot fail early."""
    passing = decide(pass_alpha)
    if passing.verdict == PASS:
        return PASS, passing.lower, passing.upper
    if fail_alpha <= 0:
        return UNDECIDED, None, passing.upper
    failing = decide(fail_alpha)
    return (FAIL if failing.verdict == FAIL else UNDECIDED), failing.lower, passing.upper


def look(
    spec: SloSpec, measurements: MetricsStore, confidence: float, client_delay_ms: float = 0.0
) -> list[ObjectiveLook]:
    """Every objective of `spec` as the data so far decide it; fewer than `min_samples` samples:
    undecided.

    The run's verdict is wrong with probability at most 1 - `confidence` at any stopping time. A
    wrong pass needs every truly failing objective passed: each passes wrongly with probability at
    most alpha, so each pass test gets the whole alpha. A wrong fail needs one truly passing
    objective failed: any of m could, so each fail test gets alpha / m (Bonferroni over the m
    objectives decided early; ~log m more evidence for a fail, which comes fast)."""
    alpha = 1 - confidence
    fail_alpha = alpha / max(1, sum(decidable_early(o) for o in spec.objectives))
    looks = [look_at(o, measurements, alpha, fail_alpha, client_delay_ms) for o in spec.objectives]
    return [
        lk if lk.state == AT_END or lk.samples >= spec.min_samples else replace(lk, state=UNDECIDED) for lk in looks
    ]


def certain_verdict(
    looks: list[ObjectiveLook], waiting_for: Collection[str], not_blocking: Collection[str]
) -> str | None:
    """`fail` once any objective has failed; `pass` once every objective has passed, but those not
    blocking (`--slo-not-blocking`), and nothing else keeps the run (`waits_for` is empty); None
    while undecided."""
    if any(lk.state == FAIL for lk in looks):
        return FAIL
    if waiting_for:
        return None
    if all(lk.state == PASS or lk.name in not_blocking for lk in looks):
        return PASS
    return None
