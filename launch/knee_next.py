"""The knee search's next rate (launch/knee.py `search` asks `next_rate` after every step).

Up, doubling, until a step fails; then, while no pass is decided, down: but first, an undecided pass
with runs left in its budget (run without extension, before the search had seen a pass and a fail,
on the way up or the first step below a fail, where its verdict only gave the way; or cut by the
projection) is judged again, on batches its earlier runs pooled with those it had left (per request,
its whole budget again; `StepJudge.attempts`): below the lowest decided fail (or, with none decided,
below the lowest step that failed), at `--rate-max` too, the highest such rate whose runs projected
could decide it (not `Step.undecidable`), else the one projected to decide soonest within twice its
runs left. A lower rate sends fewer requests a second, so a pass is harder to decide there, not
easier: at 8 req/s three runs decide a clean pass that 4 or 2 req/s never would in the same time
(issue 31). Only when no such step is left does the way go below the lowest step: to half its rate,
or, above a probe that looked fine, to the geometric middle between them; and not at all once the
lowest step that passed had too few requests to decide a pass even with none over a target
(`Step.too_few_requests`, on adaptive batches, the default): the search stops there, no pass
decided. Once both ends are decided, into the wider of the two gaps at the interval's ends
(`CapacityResult.widest_gap`: up to the nearest step inside it left undecidable), until both are
within the precision: between two steps within noise of the target a step is within noise too, and
would spend its budget to say so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from slogate.launch.knee_interval import FAIL, PASS, UNDECIDED
from slogate.slo.gate.verdict import Verdict

if TYPE_CHECKING:
    from slogate.launch.knee import CapacityResult
    from slogate.launch.knee_step import Step


def side(step: Step) -> str:
    """Which way the knee is from a step: its decision, or, undecided, its nearest-rank verdict."""
    return step.decision if step.decision != UNDECIDED else step.verdict


def next_rate(result: CapacityResult) -> float | None:
    """The next rate to try: up until a step fails, down until one passes (an undecided pass with runs
    left judged again first; no lower than a pass with too few requests), then into the widest gap;
    None with `result.stopped_because` said."""
    settings = result.settings
    judged = result.judged
    rates = [s.rate_rps for s in judged]
    low, high = result.interval_rps
    if high is None:
        failed = [s.rate_rps for s in judged if side(s) == FAIL]  # decided or by its verdict
        again = _once_more(result, min(failed)) if failed and low is None else None
        if again is not None:
            return again  # find a decided pass first (at --rate-max too)
        if max(rates) >= settings.rate_max:
            result.stopped_because = (
                f"every step passed up to --rate-max {settings.rate_max:g} req/s: the capacity is at least that "
                "(the ceiling set for the load generator, not the server's: raise --rate-max to go on)"
                if all(side(s) == PASS for s in judged)
                else f"no step up to --rate-max {settings.rate_max:g} req/s was decided fail"
            )
            return None
        if not failed or low is not None:
            return min(max(rates) * 2, settings.rate_max)
        return _way_down(result, min(rates))
    if low is None:
        again = _once_more(result, high)
        return again if again is not None else _way_down(result, min(rates))
    if low >= high:
        result.stopped_because = f"{low:g} req/s was decided pass and {high:g} fail: the load changed during the search"
        return None
    if result.decided:
        within = "" if (high - low) / low <= settings.precision + 1e-9 else " (the steps between them undecided)"
        result.stopped_because = f"interval [{low:g}, {high:g}]{within} within --precision {settings.precision:g}"
        return None
    gap = result.widest_gap()
    assert gap is not None
    return float(f"{(gap[0] + gap[1]) / 2:.4g}")  # 12.475, not 12.475000000000001


def _once_more(result: CapacityResult, below: float) -> float | None:
    """The rate below `below` whose step passed undecided with runs left in its budget (`Step.runs_left`:
    run without extension, or cut by the projection) and that has not been judged again since, whose
    runs left, pooled with those so far, are most likely to decide it: the highest of those not
    `undecidable` (projected to decide within the runs left), else the one projected to decide soonest
    (`Step.decide_in_s`: within twice its runs left, as uncertain as a projection from one run's few
    requests over a target is) that has enough requests for a pass (`Step.too_few_requests`); None
    when there is none."""
    judged = result.judged
    open_ = [
        s
        for i, s in enumerate(judged)
        if not s.probe
        and s.rate_rps < below
        and s.decision == UNDECIDED
        and s.verdict == Verdict.PASS
        and s.runs_left > 0
        and all(later.rate_rps != s.rate_rps for later in judged[i + 1 :])
    ]
    likely = [s.rate_rps for s in open_ if not s.undecidable]
    if likely:
        return max(likely)
    hopeful = [s for s in open_ if not s.too_few_requests and s.decide_in_s is not None]
    return min(hopeful, key=lambda s: s.decide_in_s or 0.0).rate_rps if hopeful else None


def _way_down(result: CapacityResult, lowest: float) -> float | None:
    """Below the lowest step (none decided pass): half its rate, or, above a probe that looked fine, the
    geometric middle between them (that probe's rate when they are within the precision). None, with
    `stopped_because` said, when the lowest step that passed had too few requests for a pass even with
    none over a target (`Step.too_few_requests`): a lower rate sends fewer still."""
    passed = [s for s in result.latest_steps if not s.probe and side(s) == PASS]
    if passed and passed[0].too_few_requests:
        result.stopped_because = (
            f"no step was decided pass: those that passed by nearest rank were left undecided, and at "
            f"{passed[0].rate_rps:g} {passed[0].rate_unit} and below a step's runs send too few requests to decide a "
            f"pass even with none over a target (a longer --step-s gives them more)"
        )
        return None
    fine = [s.rate_rps for s in result.steps if s.probe and s.verdict == Verdict.PASS and s.rate_rps < lowest]
    if not fine:
        return lowest / 2
    below = max(fine)
    return below if (lowest - below) / below <= result.settings.precision else float(f"{math.sqrt(below * lowest):.3g}")
