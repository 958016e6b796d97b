"""`slogate capacity --min-capacity R` without `--search`: a test at R, not a search.

One step at R, decided by the anytime-valid bounds (launch/knee_interval.py): it ends as soon as
every objective is decided at `--slo-confidence`, pass or fail, which far from the knee takes
seconds. Where its runs end so, pass or fail (`--slo-stop-when-decided`, the default, and no
objective that only a run's end can pass), the step is one run of 3x `--step-s`, as long as a
search's step may take in all. Without it (`--no-early-stop`, fixed `--batch-s` seconds, a zero
ceiling such as `error_rate max: 0`) a step left undecided at `--step-s` is run again (per request:
twice as long, once; on batches: runs pooled, the later ones whole, `StepJudge.attempts`). Then it
is reported undecided (exit 3). Unlike a
search's step it takes its whole budget even where the runs so far project no decision: a decision
is what it is for, and a projection can be wrong (far below the knee, a pass on a few requests over
the target). Its result
is a `CapacityResult` of one step, so the files, the exit code (0 pass, 1 fail, 3 undecided) and
the summary of several profiles are the search's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from slogate.launch.knee import CapacityResult, RunStep, SearchSettings, judge_step
from slogate.launch.knee_interval import PASS, UNDECIDED, StepJudge
from slogate.launch.knee_step import Step
from slogate.slo.gate.facts import percent


def judge_at_rate(
    run_step: RunStep,
    rate: float,
    settings: SearchSettings,
    out_dir: Path,
    judge: StepJudge,
    on_step: Callable[[Step], None] = lambda s: None,
    *,
    stops_when_decided: bool,
) -> CapacityResult:
    """The step at `rate` (its report in `out_dir/step-01-<rate>rps/`), as a result of one step.
    `stops_when_decided`: `run_step`'s runs end once their early stop decides them, pass or fail
    (`--slo-stop-when-decided`); the step is then one run of its whole budget."""
    settings.check()
    result = CapacityResult(settings, confidence=judge.confidence, batch_s=judge.batch_s)
    # A run's early stop looks every second at every request so far; runs pooled are judged at each one's end, each
    # after a warm-up of its own (the fault server at 0.46x its knee: a pass in 43 s, not 73; benchmarks/RESULTS.md).
    budget = (sum(judge.attempts(settings.step_s)),) if stops_when_decided else None
    step = judge_step(run_step, rate, settings.step_s, out_dir, result, judge, cut=False, budget=budget)
    on_step(step)
    at = f"the test at {rate:g} {step.rate_unit}"
    if step.decision == UNDECIDED:
        why = (
            "too few requests at that rate for a pass even with none over a target"
            if step.too_few_requests
            else "the capacity is within noise of it"
        )
        runs = (
            f"one run of {step.step_s:g} s"
            if step.attempts == 1
            else f"{step.attempts} runs, the last {step.step_s:g} s"
        )
        result.stopped_because = (
            f"{at} was undecided at {percent(judge.confidence)} confidence after {runs}: {why} (a longer --step-s may "
            "decide)"
        )
    else:
        word = "every SLO met" if step.decision == PASS else "an SLO not met"
        result.stopped_because = f"{at}: {word}, decided at {percent(judge.confidence)} confidence"
    return result
