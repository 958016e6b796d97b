"""Each objective of an SLO spec against a run's measurements: observed value, samples, outcome,
and the verdict those outcomes make before any baseline is consulted (slo/gate/judge.py does that)."""

from __future__ import annotations

from dataclasses import dataclass, field

from slogate.slo.gate.engines import title
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.self_check import Saturation
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.spec import GOODPUT, Objective, SloSpec
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


def observe(
    objective: Objective, metrics: MetricsStore, server: ServerFigures | None = None
) -> tuple[float | None, int]:
    """The objective's observed value and the number of samples behind it (scrapes, for server metrics)."""
    if objective.is_server:
        if server is None or not server.available:
            return None, 0
        return server.figure(objective.metric), server.scrapes
    if objective.metric == GOODPUT:
        return observe_goodput(objective, metrics)
    cm = metrics.get(objective.request_class)
    if objective.is_latency:
        hist = cm.latency[objective.metric]
        assert objective.percentile is not None
        return hist.percentile_ms(objective.percentile), hist.count
    value = getattr(cm, objective.metric)
    return value, cm.requests


def observe_goodput(objective: Objective, metrics: MetricsStore) -> tuple[float | None, int]:
    """The fraction of the class's requests that met every limit, over the requests that ended
    (failures count, never as good; requests in flight at the stop are left out, as vLLM leaves
    them out: whether they would have met the limits is unknown), and that count. No value when the
    measurements counted good requests against other limits than the objective's (a saved run
    judged with a new SLO file): `good` cannot be counted again from histograms."""
    counted = (metrics.goodput_targets_ms or {}).get(objective.request_class)
    cm = metrics.get(objective.request_class)
    samples = cm.requests
    if counted != dict(objective.limits_ms) or not samples:
        return None, samples
    return cm.good / samples, samples


def goodput_ceiling(objective: Objective, metrics: MetricsStore, client_delay_ms: float) -> float:
    """The highest goodput the class could have had had the client added `client_delay_ms` to
    every latency: a request is certainly not good when it failed, or when one of its figures is
    over its limit by more than the delay (the histograms tell how many, metric by metric; the
    largest count is a floor of the requests certainly not good)."""
    cm = metrics.get(objective.request_class)
    if not cm.requests:
        return 1.0
    over = 0
    for metric, limit_ms in objective.limits_ms:
        values, counts = cm.latency[metric].distinct_values_ms()
        over_limit = int(counts[values > limit_ms + client_delay_ms].sum())
        if metric == "ttft" and cm.unfinished_ttft is not None:
            # The TTFT histogram also holds the requests unfinished at the stop, which goodput leaves out.
            waited, counts_waited = cm.unfinished_ttft.distinct_values_ms()
            over_limit -= int(counts_waited[waited > limit_ms + client_delay_ms].sum())
        elif metric == "ttft":  # a report saved before their values were kept apart: a bound
            over_limit = max(0, over_limit - cm.unfinished)
        over = max(over, over_limit)
    return 1 - (cm.failures + over) / cm.requests


def _explained_by(result: ObjectiveResult, saturation: Saturation, metrics: MetricsStore) -> bool:
    """Could the client's delay alone have caused this failure? A latency that would meet its
    target without the delay, a goodput that could meet its floor without it, or a throughput
    floor a starved client could not reach, yes; errors and server-side figures, no."""
    o = result.objective
    if o.is_latency:
        return (result.observed or 0) - saturation.client_delay_ms <= (o.max or 0)
    if o.metric == GOODPUT:
        return goodput_ceiling(o, metrics, saturation.client_delay_ms) >= (o.min or 0)
    return o.metric in ("output_tokens_per_s", "requests_per_s") and o.min is not None


def _why_short(r: ObjectiveResult, min_samples: int, server: ServerFigures | None) -> str:
    o = r.objective
    if o.is_server:
        if server is not None and server.available:
            return f"{o.name}: {title(server.engine)}'s /metrics has no such figure (docs/engines.md)"
        return f"{o.name} has no server figures (no /metrics)"
    if o.metric == GOODPUT and r.observed is None and r.samples:
        return f"{o.name}: no good requests were counted against its limits (they are counted live, per request)"
    return f"{o.name} has {r.samples} (min_samples {min_samples})"


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
        value, samples = observe(obj, metrics, server)
        if value is None or (samples < spec.min_samples and not obj.is_server):
            outcome = Outcome.INSUFFICIENT
        elif (obj.max is not None and value > obj.max) or (obj.min is not None and value < obj.min):
            outcome = Outcome.FAIL
        else:
            outcome = Outcome.PASS
        results.append(ObjectiveResult(obj, value, samples, outcome))

    reasons = [*(run_problems or []), *(pass_doubts or [])]
    doubtful = saturation is not None and any(
        r.result == Outcome.FAIL and _explained_by(r, saturation, metrics) for r in results
    )
    if saturation is not None:
        reasons.append(saturation.message + ("" if doubtful else " (the verdict stands: client delay only adds)"))
    short = [r for r in results if r.result == Outcome.INSUFFICIENT]
    if short:
        reasons.append("too few samples: " + ", ".join(_why_short(r, spec.min_samples, server) for r in short))
    if run_problems or doubtful:
        status = Verdict.INCONCLUSIVE
    elif any(r.result == Outcome.FAIL for r in results):
        status = Verdict.FAIL
    elif short or pass_doubts:
        status = Verdict.INCONCLUSIVE
    else:
        status = Verdict.PASS
    return Evaluation(status, results, reasons)
