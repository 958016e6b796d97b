"""Each objective of an SLO spec against a run's measurements: observed value, samples, outcome
(each asked of the objective's kind, slo/gate/objective_kinds.py), and the verdict those outcomes
make before any baseline is consulted (slo/gate/judge.py does that)."""

from __future__ import annotations

from dataclasses import dataclass, field

from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.self_check import Saturation
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.spec import Objective, SloSpec
from slogate.slo.gate.verdict import Outcome, Verdict


@dataclass(slots=True)
class ObjectiveResult:
    objective: Objective
    observed: float | None
    samples: int
    result: Outcome


@dataclass(slots=True)
class Evaluation:
    status: Verdict  # pass | fail | inconclusive
    results: list[ObjectiveResult]
    reasons: list[str] = field(default_factory=list)  # why inconclusive, in words

    @property
    def exit_code(self) -> int:
        return self.status.exit_code


def evaluate(
    spec: SloSpec,
    metrics: MetricsStore,
    run_problems: list[str] | None = None,
    server: ServerFigures | None = None,
    saturation: Saturation | None = None,
    pass_doubts: list[str] | None = None,
) -> Evaluation:
    """`run_problems` are facts that make any figure untrustworthy (target unreachable, lost
    workers); they turn the verdict inconclusive even when an objective failed. `saturation` (the
    client's own delay) only does so for a failure it could explain. `pass_doubts` (sends dropped
    at --max-in-flight: they could only have been slower) leave a failure standing and turn only a
    pass inconclusive."""
    results = []
    for obj in spec.objectives:
        value, samples = obj.kind.observe(obj, metrics, server)
        results.append(ObjectiveResult(obj, value, samples, obj.kind.outcome(obj, value, samples, spec.min_samples)))

    reasons = [*(run_problems or []), *(pass_doubts or [])]
    doubtful = saturation is not None and any(
        r.result == Outcome.FAIL and r.objective.kind.explained_by_client_delay(r, saturation.client_delay_ms, metrics)
        for r in results
    )
    if saturation is not None:
        reasons.append(saturation.message + ("" if doubtful else " (the verdict stands: client delay only adds)"))
    short = [r for r in results if r.result == Outcome.INSUFFICIENT]
    if short:
        reasons.append(
            "too few samples: " + ", ".join(r.objective.kind.why_short(r, spec.min_samples, server) for r in short)
        )
    if run_problems or doubtful:
        status = Verdict.INCONCLUSIVE
    elif any(r.result == Outcome.FAIL for r in results):
        status = Verdict.FAIL
    elif short or pass_doubts:
        status = Verdict.INCONCLUSIVE
    else:
        status = Verdict.PASS
    return Evaluation(status, results, reasons)
