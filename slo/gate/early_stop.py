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
judge's on every figure, and it says so (slo/gate/judge.py). Which objectives can be decided early,
and how, each objective's kind says (slo/gate/objective_kinds.py `decidable_early`, `look`).
With `--slo-correlated-requests`, latency percentiles are decided on batches as long as the run's
measured correlation between consecutive requests instead (slo/gate/correlation.py): near a
server's saturation its requests queue together, and the per-request bounds would be overconfident.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from slogate.slo.gate.correlation import batchable, correlated_look
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.objective_kind import AT_END
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED
from slogate.slo.gate.spec import Objective, SloSpec

DEFAULT_CONFIDENCE = 0.99  # of each bound: a wrong verdict has probability <= 1 %
REGRESSIONS = "regressions"  # the name `--slo-not-blocking` takes for the baseline's rules


def waits_for(spec: SloSpec, not_blocking: Collection[str], with_baseline: bool) -> list[str]:
    """The objectives (and `regressions`) that keep a run going to its run time: those that cannot
    be decided early and are not listed as not blocking."""
    names = [o.name for o in spec.objectives if not o.kind.decidable_early(o) and o.name not in not_blocking]
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
    passes at level `pass_alpha`, fails at `fail_alpha` (`look` says why they differ). Its kind
    decides it (slo/gate/objective_kinds.py), or says it cannot before the end."""
    if not o.kind.decidable_early(o):
        return ObjectiveLook(o.name, o.describe(), AT_END, measurements.get(o.request_class).requests, None, None, "")
    return o.kind.look(o, measurements, pass_alpha, fail_alpha, client_delay_ms)


def look(
    spec: SloSpec, measurements: MetricsStore, confidence: float, client_delay_ms: float = 0.0, correlated: bool = False
) -> list[ObjectiveLook]:
    """Every objective of `spec` as the data so far decide it; fewer than `min_samples` samples:
    undecided; `correlated`: latency percentiles on batches (slo/gate/correlation.py).

    The run's verdict is wrong with probability at most 1 - `confidence` at any stopping time. A
    wrong pass needs every truly failing objective passed: each passes wrongly with probability at
    most alpha, so each pass test gets the whole alpha. A wrong fail needs one truly passing
    objective failed: any of m could, so each fail test gets alpha / m (Bonferroni over the m
    objectives decided early; ~log m more evidence for a fail, which comes fast)."""
    alpha = 1 - confidence
    fail_alpha = alpha / max(1, sum(o.kind.decidable_early(o) for o in spec.objectives))
    looks = [look_at(o, measurements, alpha, fail_alpha, client_delay_ms) for o in spec.objectives]
    if correlated:
        looks = [
            correlated_look(lk, o, measurements, alpha, fail_alpha) if batchable(o, measurements) else lk
            for lk, o in zip(looks, spec.objectives, strict=True)
        ]
    return [
        lk if lk.state == AT_END or lk.samples >= spec.min_samples else replace(lk, state=UNDECIDED) for lk in looks
    ]


def certain_verdict(
    looks: list[ObjectiveLook], waiting_for: Collection[str], not_blocking: Collection[str], failed_only: bool = False
) -> str | None:
    """`fail` once any objective has failed; `pass` once every objective has passed, but those not
    blocking (`--slo-not-blocking`), and nothing else keeps the run (`waits_for` is empty), unless
    `failed_only` (`--slo-stop-when-failed`); None while undecided."""
    if any(lk.state == FAIL for lk in looks):
        return FAIL
    if waiting_for or failed_only:
        return None
    if all(lk.state == PASS or lk.name in not_blocking for lk in looks):
        return PASS
    return None
