"""Each capacity step decided by the anytime-valid bounds (slo/gate/early_stop.py), and the knee as
the interval they bracket.

A step's `decision` is pass or fail only when the bounds decide it at `--slo-confidence`: a step
ended by `--slo-stop-when-decided` (or `-failed`) keeps the verdict it was stopped on; any other (its run time
reached, aborted on a breach) is looked at once more on its final figures. The bounds are
anytime-valid, so a look at whatever moment a step ended is as valid as one at a planned moment.
Objectives the bounds cannot pass before the end (those only the end judges, a zero ceiling on a
proportion such as `error_rate max: 0`, and those listed with `--slo-not-blocking`) are taken
as the end of the step judged them. A step the bounds leave undecided is within noise of its
target: its nearest-rank verdict says which way the search goes, but it bounds nothing. With
`batch_s` (`--batch-s`), latency percentiles are decided on batches of consecutive requests of
every run at the step's rate instead (launch/knee_batch.py), and a step may take several runs.

The interval is [the highest rate decided pass, the lowest rate decided fail]; each end is wrong
with probability at most 1 - confidence (the capacity is monotone in the rate, so only the two
steps at its ends can make it miss the knee; a search that decides more steps near the knee has
more chances at a wrong end), as far as the bounds' samples are independent:
requests per request, batches on batches (docs/capacity.md says what that costs near a knee).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from slogate.launch.knee_batch import AUTO, clean_pass_batches, decide_batched
from slogate.slo.gate.correlation import batchable, decide_adaptive
from slogate.slo.gate.early_stop import DEFAULT_CONFIDENCE, look, waits_for
from slogate.slo.gate.facts import DECIDED
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import Report
from slogate.slo.gate.self_check import assess
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED
from slogate.slo.gate.spec import Objective, SloSpec
from slogate.slo.gate.verdict import Outcome, Verdict

ADAPTIVE_RUNS = 3  # runs of --step-s a step on adaptive batches may pool before it is left undecided

__all__ = ["FAIL", "PASS", "UNDECIDED", "StepJudge", "cannot_pass_early", "early_pass_note", "interval"]


def _never_passes_early(o: Objective) -> bool:
    """A ceiling of 0 on a proportion: one failure later would break it, so no bound passes it early."""
    return o.kind.fraction and o.max is not None and o.max <= 0


def cannot_pass_early(spec: SloSpec, not_blocking: Collection[str] = ()) -> list[str]:
    """The objectives that keep every passing step to its whole `--step-s` (not listed as not blocking)."""
    zero = [o.name for o in spec.objectives if _never_passes_early(o) and o.name not in not_blocking]
    return [*waits_for(spec, not_blocking, with_baseline=False), *zero]


def early_pass_note(spec: SloSpec, not_blocking: Collection[str] = ()) -> str | None:
    """The one line a search starts with when no passing step can end early, with what would let it."""
    names = cannot_pass_early(spec, not_blocking)
    if not names:
        return None
    return (
        f"{', '.join(names)} cannot be decided pass before a step's end (a ceiling of 0, or judged only at the end): "
        f"every passing step runs its whole --step-s; `-- --slo-not-blocking {','.join(names)}` judges "
        f"{'it' if len(names) == 1 else 'them'} at the step's stop instead"
    )


@dataclass(frozen=True, slots=True)
class StepJudge:
    """Decides a step's report by the anytime-valid bounds. `spec` None: the report's own objectives."""

    spec: SloSpec | None = None
    confidence: float = DEFAULT_CONFIDENCE
    not_blocking: tuple[str, ...] = ()
    # Latency percentiles decided per request (None), on batches of this many seconds (launch/knee_batch.py),
    # or AUTO: on batches as long as each step's measured correlation (slo/gate/correlation.py).
    batch_s: float | str | None = None

    @property
    def pools(self) -> bool:
        """Whether a step's runs are judged together (on batches): then its later runs go whole."""
        return self.batch_s is not None

    def attempts(self, step_s: float) -> tuple[float, ...]:
        """The measured seconds of each run a step may take: run again twice as long, once; on
        batches, runs of `step_s` pooled until about twice the batches a clean pass needs."""
        if self.batch_s is None:
            return (step_s, 2 * step_s)
        if self.batch_s == AUTO:
            return (step_s,) * ADAPTIVE_RUNS
        assert isinstance(self.batch_s, float | int)
        return (step_s,) * max(3, math.ceil(2 * clean_pass_batches(1 - self.confidence) * self.batch_s / step_s))

    def decide(self, report: Report, earlier: Sequence[Report] = ()) -> str:
        """pass, fail or undecided. A pass stands with a late client (its delay only adds to a
        latency), not with sends dropped or a run problem (the rate was not offered as asked).
        `earlier`: runs at the same rate before this one, whose batches count too (`batch_s`)."""
        if report.verdict in (Verdict.ERROR, Verdict.UNGATED) or not report.slos:
            return UNDECIDED
        decision = _combined(self._states(report, earlier).values())
        dropped = (report.metrics_summary().get(ALL) or {}).get("dropped") or 0
        if report.run.problems or (decision == PASS and dropped):
            return UNDECIDED
        return decision

    def may_decide(self, reports: Sequence[Report], more_s: float, clean: bool = False) -> bool:
        """Whether `more_s` seconds more of runs at the step's rate could decide what `reports` (its runs
        so far, pooled, undecided) leave open. On adaptive batches, False when every open objective is a
        batched latency percentile and, at the exceedance share, rate and correlation measured so far,
        that much more would decide none of them fail and not all of them pass: the step is within
        noise of its target at this step length (or has too few requests at its rate), and more runs
        would most likely only confirm it. A point estimate: more runs might still decide, so a search
        saves their time and a test at R does not (`launch/knee.py`). Otherwise True (per request, fixed
        batches: no projection). `clean`: as if none of the requests had been over a target (whether
        the rate sends enough requests in that time for a pass at all)."""
        if self.batch_s != AUTO or not reports:
            return True
        *earlier, last = reports
        states = self._states(last, earlier)
        spec = self.spec or SloSpec(tuple(r.objective for r in last.slos))
        at_end = self._at_end(spec)
        batched = {o.name: o for o in spec.objectives if batchable(o, last.measurements) and o.name not in at_end}
        if any(state == UNDECIDED and name not in batched for name, state in states.items()):
            return True  # an objective whose bounds need more of its own requests: nothing to project
        alpha, fail_alpha = self._alphas(spec)
        stores = [r.measurements for r in reports]
        states.update({n: decide_adaptive(o, stores, alpha, fail_alpha, more_s, clean) for n, o in batched.items()})
        return _combined(states.values()) != UNDECIDED

    def seconds_to_decide(self, reports: Sequence[Report], limit_s: float) -> float | None:
        """The fewest seconds more of runs that, projected as in `may_decide`, would decide the step
        (to a second); None beyond `limit_s`, or with no projection (per request, fixed batches)."""
        if self.batch_s != AUTO or not reports or not self.may_decide(reports, limit_s):
            return None
        low, high = 0.0, float(limit_s)
        while high - low > 1:
            middle = (low + high) / 2
            low, high = (low, middle) if self.may_decide(reports, middle) else (middle, high)
        return math.ceil(high)

    def _at_end(self, spec: SloSpec) -> set[str]:
        """The objectives a run's end judges (listed not blocking, decided only at the end, a zero ceiling)."""
        return set(self.not_blocking) | {
            o.name for o in spec.objectives if not o.kind.decidable_early(o) or _never_passes_early(o)
        }

    def _alphas(self, spec: SloSpec) -> tuple[float, float]:
        """The levels `look` gives a pass and a fail (the fail's shared among the objectives decidable early)."""
        alpha = 1 - self.confidence
        return alpha, alpha / max(1, sum(o.kind.decidable_early(o) for o in spec.objectives))

    def _states(self, report: Report, earlier: Sequence[Report]) -> dict[str, str]:
        """Each objective's pass, fail or undecided: a run's end for those only the end judges."""
        spec = self.spec or SloSpec(tuple(r.objective for r in report.slos))
        ends = {r.objective.name: r.result for r in report.slos}
        stopped = report.run.stopped
        # A run the early stop decided keeps its states: per request, or, AUTO, a first run stopped on batches as long
        # as its correlation (--slo-correlated-requests); a later one is judged with the earlier runs, pooled.
        decided = stopped is not None and stopped.reason == DECIDED and bool(stopped.objectives)
        if decided and (self.batch_s is None or (self.batch_s == AUTO and stopped.correlated and not earlier)):
            states = {lk.name: lk.state for lk in stopped.objectives}
        else:
            run = report.run
            saturation = assess(report.measurements, run.cpu_warning, run.processes, run.max_client_lag_ms)
            delay = saturation.client_delay_ms if saturation is not None else 0.0
            states = {lk.name: lk.state for lk in look(spec, report.measurements, self.confidence, delay)}
            if self.batch_s is not None:
                states.update(self._batched(spec, [*earlier, report]))
        at_end = self._at_end(spec)
        by_end = {Outcome.PASS: PASS, Outcome.FAIL: FAIL}
        return {
            o.name: _combined_end(states.get(o.name, UNDECIDED), by_end.get(ends.get(o.name), UNDECIDED))
            if o.name in at_end
            else states.get(o.name, UNDECIDED)
            for o in spec.objectives
        }

    def _batched(self, spec: SloSpec, reports: Sequence[Report]) -> dict[str, str]:
        """The latency percentiles decided on the batches of `reports` (runs at one rate, each
        after its warm-up: independent segments), at the levels `look` gives them."""
        alpha, fail_alpha = self._alphas(spec)
        stores = [r.measurements for r in reports]
        batch_s = self.batch_s
        return {
            o.name: decide_adaptive(o, stores, alpha, fail_alpha)
            if batch_s == AUTO
            else decide_batched(o, stores, float(batch_s or 0), alpha, fail_alpha)
            for o in spec.objectives
            if batchable(o, stores[-1])
        }


def _combined(states: Iterable[str]) -> str:
    """A step's decision from its objectives': fail when one fails, pass when all pass, else undecided."""
    states = list(states)
    if FAIL in states:
        return FAIL
    return PASS if all(s == PASS for s in states) else UNDECIDED


def _combined_end(bounds: str, end: str) -> str:
    """An objective the end judges: fail when its bounds or its end fail, else pass when either passes."""
    return FAIL if FAIL in (bounds, end) else PASS if PASS in (bounds, end) else UNDECIDED


def interval(decisions: Sequence[tuple[float, str]]) -> tuple[float | None, float | None]:
    """[the highest rate decided pass, the lowest decided fail] of (rate, decision) pairs."""
    passed = [rate for rate, d in decisions if d == PASS]
    failed = [rate for rate, d in decisions if d == FAIL]
    return max(passed, default=None), min(failed, default=None)
