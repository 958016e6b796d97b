"""The knee search: the highest open-loop arrival rate at which every SLO is met.

`search` starts at `rate_start` and doubles the rate until a step fails (halving instead when the
first step already fails; with `probe_s`, short probes double it instead, and the decided steps
start at the first probe over: launch/knee_probe.py), then bisects until the interval [highest
decided pass, lowest decided fail] is within `precision` of its lower end, or both ends are within
`precision` of the nearest undecidable step inside it (launch/knee_interval.py decides each step
by the anytime-valid bounds; an undecided step's nearest-rank verdict says which way to go). Each
step is one judged run at a fixed offered rate: the search only sees its `Report`, through a
`RunStep` callback (launch/capacity.py runs Locust; a benchmark its own).

A step is pass, fail or inconclusive, as its report's verdict says, and its `decision` pass, fail or
undecided, as the bounds say. An undecided step (within noise of a target, too few samples, the
client saturated, sends dropped on a pass) is run again (its budget, `StepJudge.attempts`, while the
runs left could decide it: otherwise it is `undecidable`), but on the way up or down, before a step
passed and one failed, only an inconclusive one is; still inconclusive, the search stops there and
says why (`decided` false, exit 3); still undecided with a pass or fail verdict, the search goes on
and the step bounds nothing, except that, while no pass is decided, such a pass with runs left in
its budget that more runs could decide (or, none such, the one projected to decide soonest within
twice its runs left) is judged again, as a new step pooling (on batches) its earlier runs with those
left, before the search goes below it, and it goes no lower than a pass with too few requests
(launch/knee_next.py picks each next rate: a lower rate only makes a pass slower to decide). A pass
decided with a late client is a pass (client delay only adds): never run again. A step whose run
wrote no report (`NoReport`) ends the search (exit 3), with what was judged.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from slogate.launch.knee_interval import FAIL, PASS, UNDECIDED, StepJudge, interval
from slogate.launch.knee_next import next_rate, side
from slogate.launch.knee_probe import probe_up
from slogate.launch.knee_step import Step, step_from_report
from slogate.slo.gate import exitcodes
from slogate.slo.gate.latency_metrics import HEADLINE
from slogate.slo.gate.report import Report
from slogate.slo.gate.verdict import Outcome, Verdict


class RunStep(Protocol):
    """One run of a step: (offered rate in req/s, measured seconds, report dir) -> its report.
    `early_stop=False`: the run goes its whole time even where its own data decide sooner (a later run
    of a step whose runs are pooled: stopped on its own decision, it would end before the pool decides)."""

    def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report: ...


class NoReport(Exception):
    """A step's run that wrote no readable report (a `RunStep` raises it); str() is one line."""


# One Locust process reads first tokens within a few ms up to 100 req/s, within one inter-token gap at 200-400
# req/s (2-core machines; benchmarks/RESULTS.md, TTFT accuracy). Beyond that, a step measures the client.
DEFAULT_RATE_MAX = 400.0


class CapacityInputError(ValueError):
    """A setting the search cannot run with, or a step that could not be judged; str() is one line.
    `exit_code`: usage (2), or inconclusive (3) when a step's run failed on its own (no report);
    `partial`: the steps the search had already judged, set by `search`."""

    def __init__(self, message: str, exit_code: int = exitcodes.USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.partial: CapacityResult | None = None


@dataclass(frozen=True, slots=True)
class SearchSettings:
    rate_start: float = 1.0  # requests per second, all users together
    precision: float = 0.1  # stop when (lowest failing - highest passing) / highest passing <= this
    step_s: float = 30.0  # measured seconds per step (the warm-up is the runner's)
    max_steps: int = 12
    rate_max: float = DEFAULT_RATE_MAX  # the highest rate a step offers
    probe_s: float = 0.0  # measured seconds of each probe on the way up (0: decided steps all the way)

    def check(self) -> None:
        """Raise CapacityInputError, naming the option, for a setting the search cannot use."""
        if not self.rate_start > 0 or math.isinf(self.rate_start):
            raise CapacityInputError(f"--rate-start: must be a rate > 0 requests/s, got {self.rate_start:g}")
        if not 0 < self.precision < 1:
            raise CapacityInputError(f"--precision: must be in (0, 1) (0.1 = 10 %), got {self.precision:g}")
        if not self.step_s > 0:
            raise CapacityInputError(f"--step-s: must be > 0, got {self.step_s:g}")
        if self.max_steps < 2:
            raise CapacityInputError(f"--max-steps: must be >= 2, got {self.max_steps}")
        if not self.probe_s >= 0:
            raise CapacityInputError(f"--probe-s: must be >= 0 (0: no probes), got {self.probe_s:g}")
        if not self.rate_max >= self.rate_start:
            raise CapacityInputError(f"--rate-max: must be >= --rate-start {self.rate_start:g}, got {self.rate_max:g}")


@dataclass(slots=True)
class CapacityResult:
    settings: SearchSettings
    steps: list[Step] = field(default_factory=list)
    stopped_because: str = ""  # why the search ended, in words
    ttft_targets_ms: dict[str, float] = field(default_factory=dict)  # per class, from the SLO file (for the chart)
    confidence: float = 0.99  # of each step's decision (--slo-confidence)
    batch_s: float | str | None = None  # StepJudge's: None per request (requests assumed independent), AUTO, seconds
    runs: dict[float, list[Report]] = field(default_factory=dict, repr=False)  # an undecided pass's, for a re-judge

    @property
    def judged(self) -> list[Step]:
        """The steps the capacity and the interval come from: all but the probes not decided fail."""
        return [s for s in self.steps if not s.probe or s.decision == FAIL]

    @property
    def latest_steps(self) -> list[Step]:
        """`judged`, one step per rate (a rate judged again, launch/knee_next.py: its later step), by rate."""
        return sorted({s.rate_rps: s for s in self.judged}.values(), key=lambda s: s.rate_rps)

    def _rates(self, verdict: str) -> list[float]:
        return [s.rate_rps for s in self.latest_steps if s.verdict == verdict]

    @property
    def rate_unit(self) -> str:
        """What the offered rates count (`Step.rate_unit`); every step runs the same workload."""
        return self.steps[0].rate_unit if self.steps else "req/s"

    @property
    def capacity_rps(self) -> float | None:
        """The highest offered rate at which every SLO was met."""
        return max(self._rates(Verdict.PASS), default=None)

    @property
    def first_failing_rps(self) -> float | None:
        """The lowest offered rate at which an SLO failed."""
        return min(self._rates(Verdict.FAIL), default=None)

    @property
    def interval_rps(self) -> tuple[float | None, float | None]:
        """[the highest rate decided pass, the lowest decided fail] by the anytime-valid bounds."""
        return interval([(s.rate_rps, s.decision) for s in self.judged])

    def widest_gap(self) -> tuple[float, float] | None:
        """The wider (relative to its lower end) of the two gaps a step could still narrow the interval
        in: from its lower end to the lowest step inside it left undecidable (`Step.undecidable`: within
        noise), and from the highest such step to its upper end; between two such steps every rate is
        within noise too. None while the interval has no two ends."""
        low, high = self.interval_rps
        if low is None or high is None:
            return None
        noise = sorted({s.rate_rps for s in self.judged if s.undecidable and low < s.rate_rps < high})
        gaps = [(low, noise[0]), (noise[-1], high)] if noise else [(low, high)]
        return max(gaps, key=lambda g: (g[1] - g[0]) / g[0])

    @property
    def decided(self) -> bool:
        """The knee is bracketed: both ends of the interval decided, each within the precision of the
        nearest step inside it left undecidable (or of the other end)."""
        gap = self.widest_gap()
        return gap is not None and (gap[1] - gap[0]) / gap[0] <= self.settings.precision + 1e-9

    def exit_code(self, min_capacity: float | None = None) -> int:
        """0 met (or, without a minimum, decided), 1 below the minimum, 3 the search could not tell: each
        by a decided end of the interval (a minimum inside it, however narrow, is not decided either way)."""
        low, high = self.interval_rps
        if min_capacity is None:
            return exitcodes.PASS if self.decided else exitcodes.INCONCLUSIVE
        if low is not None and low >= min_capacity:
            return exitcodes.PASS
        if high is not None and high <= min_capacity:
            return exitcodes.FAIL
        return exitcodes.INCONCLUSIVE

    def to_json(self, min_capacity: float | None = None) -> dict[str, Any]:
        return {
            "capacity_rps": self.capacity_rps,
            "first_failing_rps": self.first_failing_rps,
            "rate_unit": self.rate_unit,
            "decided": self.decided,
            "interval_rps": list(self.interval_rps),
            "confidence": self.confidence,
            "batch_s": 0 if self.batch_s is None else self.batch_s,  # --batch-s: auto, 0 (per request) or seconds
            "stopped_because": self.stopped_because,
            "min_capacity_rps": min_capacity,
            "exit_code": self.exit_code(min_capacity),
            "settings": asdict(self.settings),
            "ttft_targets_ms": self.ttft_targets_ms,
            "steps_run": len(self.steps),
            "wall_s": round(sum(s.wall_s for s in self.steps), 3),
            "steps": [asdict(s) for s in self.steps],
        }


def ttft_targets(report: Report) -> dict[str, float]:
    """The strictest TTFT target per class among the report's objectives."""
    out: dict[str, float] = {}
    for r in report.slos:
        o = r.objective
        if o.metric == HEADLINE.name and o.max is not None:
            out[o.request_class] = min(out.get(o.request_class, math.inf), o.max)
    return out


def search(
    run_step: RunStep,
    settings: SearchSettings,
    out_dir: Path,
    on_step: Callable[[Step], None] = lambda s: None,
    judge: StepJudge | None = None,
    probe_step: RunStep | None = None,
) -> CapacityResult:
    """Find the knee; step reports go to `out_dir/step-NN-<rate>rps/`, each step decided by `judge`
    (default: the report's own objectives at 99 %), the probes run by `probe_step` (default
    `run_step`) when `settings.probe_s` > 0. Raises CapacityInputError, with the steps judged
    before it as `partial`, when a step's run is a usage error (a bad Locust option: every step
    would be; exit 2) or wrote no report (exit 3)."""
    settings.check()
    judge = judge or StepJudge()
    result = CapacityResult(settings, confidence=judge.confidence, batch_s=judge.batch_s)
    rate: float | None = settings.rate_start
    if settings.probe_s > 0:

        def probe(rate: float) -> bool:
            """One probe, added to `result`; whether it is over a target: its verdict or an objective
            failed (inconclusive, say with a late client, too: the step after tells). Decided fail by
            the bounds, it bounds the interval: its short warm-up only lowers latencies."""
            where = out_dir / f"step-{len(result.steps) + 1:02d}-{rate:g}rps-probe"
            started = time.monotonic()
            report = run_once(probe_step or run_step, rate, settings.probe_s, where)
            decision = FAIL if judge.decide(report) == FAIL else UNDECIDED
            step = step_from_report(rate, report, 1, settings.probe_s, time.monotonic() - started, where, decision)
            step.probe = True
            result.steps.append(step)
            on_step(step)
            return step.verdict == Verdict.FAIL or any(r.result == Outcome.FAIL for r in report.slos)

        try:
            rate = probe_up(probe, rate, settings.rate_max)
        except CapacityInputError as e:
            e.partial = result  # what was judged before stays reported
            raise
        rate = next_rate(result) if result.judged else rate  # a probe decided fail needs no step again
    while rate is not None:
        if len(result.judged) >= settings.max_steps:
            result.stopped_because = f"--max-steps {settings.max_steps} reached before the bracket was within precision"
            return result
        sides = {side(s) for s in result.judged}  # both: every step extended, a pass judged again included
        step = judge_step(run_step, rate, settings.step_s, out_dir, result, judge, extend={PASS, FAIL} <= sides)
        on_step(step)
        if step.verdict == Verdict.INCONCLUSIVE and step.decision == UNDECIDED:
            result.stopped_because = f"the step at {rate:g} req/s was inconclusive twice: " + "; ".join(step.reasons)
            return result
        rate = next_rate(result)
    return result


def judge_step(
    run_step: RunStep,
    rate: float,
    step_s: float,
    out_dir: Path,
    result: CapacityResult,
    judge: StepJudge,
    extend: bool = True,
    cut: bool = True,
    budget: tuple[float, ...] | None = None,
) -> Step:
    """One step at `rate`, its report in `out_dir/step-NN-<rate>rps/`, added to `result`; left
    undecided by the bounds, run again (the runs' seconds: `budget`, else `judge.attempts(step_s)`) unless
    `extend` is false (only an inconclusive step then), and, `cut`, only while more runs could decide it
    (`StepJudge.may_decide`)."""
    where = out_dir / f"step-{len(result.steps) + 1:02d}-{rate:g}rps"
    whole = budget or judge.attempts(step_s)
    earlier = result.runs.get(rate, []) if judge.pools else []  # judged again: its earlier runs count, pooled
    earlier = earlier if len(earlier) < len(whole) else []
    try:
        step, reports = _judge_rate(run_step, rate, whole[len(earlier) :], where, judge, extend, cut, earlier)
    except CapacityInputError as e:
        e.partial = result  # what was judged before stays reported
        raise
    result.steps.append(step)
    result.runs.pop(rate, None)
    if step.runs_left and step.decision == UNDECIDED and step.verdict == Verdict.PASS:
        result.runs[rate] = reports  # only a re-judge (launch/knee_next.py `_once_more`) reads them
    result.ttft_targets_ms = result.ttft_targets_ms or ttft_targets(reports[-1])
    return step


def _judge_rate(
    run_step: RunStep,
    rate: float,
    budget: tuple[float, ...],
    report_dir: Path,
    judge: StepJudge,
    extend: bool,
    cut: bool,
    earlier: list[Report],
) -> tuple[Step, list[Report]]:
    """One step of the runs of `budget` (after the `earlier` runs at its rate, pooled); run again when
    inconclusive (once more, past the budget if it is spent), or, `extend`, undecided by the bounds
    (`cut`: while the runs left could decide it). Undecided with a verdict, it is `undecidable` when its
    budget is spent or the runs left could not decide it. Returns the step and every run at its rate."""
    started = time.monotonic()
    attempts, reports, inconclusive_runs = 0, list(earlier), 0
    could_decide: bool | None = None  # the runs left, projected from those so far (StepJudge.may_decide)
    runs = list(budget)
    for attempt_s in runs:
        attempts += 1
        where = report_dir if attempts == 1 else report_dir.with_name(f"{report_dir.name}-{attempts}")
        report = run_once(run_step, rate, attempt_s, where, early_stop=not reports or not judge.pools)
        decision = judge.decide(report, reports)
        reports.append(report)
        inconclusive = report.verdict == Verdict.INCONCLUSIVE  # twice: the search stops there
        inconclusive_runs += inconclusive
        if decision != UNDECIDED or inconclusive_runs >= 2 or (not extend and not inconclusive):
            break
        if inconclusive and attempts == len(runs):
            runs.append(attempt_s)  # an inconclusive run is run again once, whatever the budget had left
            if len(budget) == 1:
                reports.pop()  # a budget of one run (the test at R's): run afresh, its early stop on, not pooled
        could_decide = None if inconclusive else judge.may_decide(reports, sum(budget[attempts:]))
        if cut and could_decide is False:
            break  # within noise of a target: the runs left would not decide it
    step = step_from_report(rate, report, attempts, attempt_s, time.monotonic() - started, where, decision)
    if decision == UNDECIDED and report.verdict != Verdict.INCONCLUSIVE:
        left_s = sum(budget[attempts:])
        if attempts < len(budget) and could_decide is None:
            could_decide = judge.may_decide(reports, left_s)
        step.undecidable = attempts >= len(budget) or not could_decide
        step.runs_left = max(0, len(budget) - attempts)
        step.decide_in_s = judge.seconds_to_decide(reports, 2 * left_s) if left_s else None
        step.too_few_requests = report.verdict == Verdict.PASS and not judge.may_decide(reports, left_s, clean=True)
    step.pooled_runs = len(earlier)
    return step, reports


def run_once(run_step: RunStep, rate: float, step_s: float, where: Path, early_stop: bool = True) -> Report:
    """One run at `rate`; CapacityInputError when it wrote no report (exit 3), could not be judged
    or was not gated (exit 2)."""
    try:
        report = run_step(rate, step_s, where, early_stop=early_stop)
    except NoReport as e:
        raise CapacityInputError(str(e), exitcodes.INCONCLUSIVE) from None
    if report.verdict == Verdict.ERROR:
        raise CapacityInputError(f"the step at {rate:g} req/s could not be judged: {'; '.join(report.reasons)}")
    if report.verdict == Verdict.UNGATED:
        raise CapacityInputError(f"the step at {rate:g} req/s was not gated: the search needs an SLO file")
    return report
