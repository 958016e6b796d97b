"""Regressions against a baseline run, judged against the run-to-run noise.

A regression rule (in the SLO file, under `regressions:`) gives a tolerance, e.g.
`{metric: ttft, percentile: 95, max_increase_pct: 10, class: all}`. The change is a regression
only when it is worse than the tolerance *and* larger than the noise: both runs' histograms are
resampled (bootstrap over their buckets, slo/gate/bootstrap.py) for a 95% interval of the change of
the percentile.

- the whole interval is above the tolerance  -> `regression`
- the whole interval is within the tolerance -> `ok`
- the interval straddles the tolerance       -> `inconclusive` (a small or noisy run; no false alarm)

The rules are the one kind of objective judged against another run, so they are not in the
registry of slo/gate/objective_kinds.py: this module owns their SLO-file schema (`parse_rules`),
their comparison and their JSON; only the end of a run judges them (slo/gate/early_stop.py
`REGRESSIONS`), never a window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slogate.slo.gate.bootstrap import change_interval_pct
from slogate.slo.gate.facts import WorkloadFacts
from slogate.slo.gate.metrics import LATENCY_METRICS, MetricsStore
from slogate.slo.gate.objective_kind import SloSpecError
from slogate.slo.gate.record import ALL
from slogate.slo.gate.verdict import RegressionStatus

# A workload field that differs makes a comparison meaningless; these may differ freely (every
# run has a prompt nonce of its own: the same shapes, never the same unique prompts).
_VOLATILE_WORKLOAD_KEYS = {"request_timeout_s", "prime_prefixes", "prompt_nonce"}


class BaselineMismatch(ValueError):
    """The baseline came from another workload or target; str() says which field differs."""


@dataclass(frozen=True, slots=True)
class RegressionRule:
    metric: str
    percentile: float
    max_increase_pct: float
    request_class: str = ALL

    @property
    def name(self) -> str:
        return f"{self.metric}-p{self.percentile:g}-{self.request_class}"


@dataclass(frozen=True, slots=True)
class Comparison:
    rule: RegressionRule
    baseline_ms: float | None
    current_ms: float | None
    change_pct: float | None
    interval_pct: tuple[float, float] | None  # 95% bootstrap interval of the change, in %
    status: RegressionStatus

    def to_json(self) -> dict[str, Any]:
        r = self.rule
        return {
            "name": r.name,
            "metric": r.metric,
            "percentile": r.percentile,
            "class": r.request_class,
            "max_increase_pct": r.max_increase_pct,
            "baseline_ms": self.baseline_ms,
            "current_ms": self.current_ms,
            "change_pct": self.change_pct,
            "interval_pct": list(self.interval_pct) if self.interval_pct else None,
            "verdict": str(self.status),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Comparison:
        rule = RegressionRule(d["metric"], d["percentile"], d["max_increase_pct"], d.get("class", ALL))
        interval = d.get("interval_pct")
        return cls(
            rule,
            d.get("baseline_ms"),
            d.get("current_ms"),
            d.get("change_pct"),
            (interval[0], interval[1]) if interval else None,
            RegressionStatus(d["verdict"]),
        )


@dataclass(frozen=True, slots=True)
class RegressionCheck:
    """The `regression` section of a report: every comparison and what they add up to."""

    status: RegressionStatus
    action: str  # fail | warn
    comparisons: tuple[Comparison, ...] = ()
    refused_reason: str | None = None
    baseline_generated_at: str | None = None
    baseline_verdict: str | None = None

    def names(self, status: RegressionStatus) -> str:
        return ", ".join(c.rule.name for c in self.comparisons if c.status == status)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": str(self.status), "action": self.action}
        if self.refused_reason:
            out["reason"] = self.refused_reason
        out.update(
            baseline_generated_at=self.baseline_generated_at,
            baseline_verdict=self.baseline_verdict,
            comparisons=[c.to_json() for c in self.comparisons],
        )
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RegressionCheck:
        return cls(
            RegressionStatus(d["status"]),
            d.get("action", "fail"),
            tuple(Comparison.from_json(c) for c in d.get("comparisons") or []),
            d.get("reason"),
            d.get("baseline_generated_at"),
            d.get("baseline_verdict"),
        )


@dataclass(frozen=True, slots=True)
class Baseline:
    """A saved run to compare with: its measurements, model and workload."""

    measurements: MetricsStore
    model: str | None
    workload: WorkloadFacts = field(default_factory=WorkloadFacts)
    generated_at: str | None = None
    verdict: str | None = None


def check_compatible(baseline: Baseline, model: str | None, workload: WorkloadFacts | Mapping[str, Any]) -> None:
    """Refuse to compare runs of different workloads or models."""
    if baseline.model != model:
        raise BaselineMismatch(f"baseline model {baseline.model!r} differs from this run's {model!r}")
    a, b = WorkloadFacts.coerce(baseline.workload).to_json(), WorkloadFacts.coerce(workload).to_json()
    for key in sorted((set(a) | set(b)) - _VOLATILE_WORKLOAD_KEYS):
        if a.get(key) != b.get(key):
            raise BaselineMismatch(
                f"baseline workload {key}={a.get(key)!r} differs from this run's {key}={b.get(key)!r}; "
                "record a new baseline for the new workload"
            )


def compare(rule: RegressionRule, baseline: MetricsStore, current: MetricsStore) -> Comparison:
    base = baseline.get(rule.request_class).latency[rule.metric]
    cur = current.get(rule.request_class).latency[rule.metric]
    b, c = base.percentile_ms(rule.percentile), cur.percentile_ms(rule.percentile)
    if b is None or c is None:
        return Comparison(rule, b, c, None, None, RegressionStatus.INCONCLUSIVE)
    change = (c - b) / b * 100 if b else 0.0
    low, high = change_interval_pct(base, cur, rule.percentile)
    if low > rule.max_increase_pct:
        status = RegressionStatus.REGRESSION
    elif high <= rule.max_increase_pct:
        status = RegressionStatus.OK
    else:
        status = RegressionStatus.INCONCLUSIVE
    return Comparison(rule, round(b, 3), round(c, 3), round(change, 2), (round(low, 2), round(high, 2)), status)


def check(
    rules: tuple[RegressionRule, ...],
    action: str,
    baseline: Baseline,
    current: MetricsStore,
    model: str | None,
    workload: WorkloadFacts,
) -> RegressionCheck:
    """Compare this run with the baseline, rule by rule; a baseline of another workload is refused."""
    stamp = {"baseline_generated_at": baseline.generated_at, "baseline_verdict": baseline.verdict}
    try:
        check_compatible(baseline, model, workload)
    except BaselineMismatch as e:
        return RegressionCheck(RegressionStatus.REFUSED, action, refused_reason=str(e), **stamp)
    comparisons = tuple(compare(rule, baseline.measurements, current) for rule in rules)
    found = {c.status for c in comparisons}
    status = next(
        (s for s in (RegressionStatus.REGRESSION, RegressionStatus.INCONCLUSIVE) if s in found), RegressionStatus.OK
    )
    return RegressionCheck(status, action, comparisons, **stamp)


def parse_rules(entries: Any, source: str) -> tuple[RegressionRule, ...]:
    """The SLO file's `regressions:` list; errors name the file, the entry and the field."""
    if not isinstance(entries, list):
        raise SloSpecError(f"{source}: field 'regressions': must be a list of rules")
    rules = []
    for i, e in enumerate(entries):
        where = f"{source}: regressions[{i}]"
        if not isinstance(e, dict):
            raise SloSpecError(f"{where}: must be a mapping")
        unknown = sorted(set(e) - {"metric", "percentile", "max_increase_pct", "class"})
        if unknown:
            raise SloSpecError(f"{where}: unknown field {unknown[0]!r}")
        if e.get("metric") not in LATENCY_METRICS:
            raise SloSpecError(
                f"{where}: field 'metric': {e.get('metric')!r} is not one of {', '.join(LATENCY_METRICS)}"
            )
        for key, high in (("percentile", 100), ("max_increase_pct", None)):
            v = e.get(key)
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0 or (high and v > high):
                raise SloSpecError(f"{where}: field {key!r}: must be a number > 0{f' and <= {high}' if high else ''}")
        request_class = e.get("class", ALL)
        if not isinstance(request_class, str) or not request_class.strip():
            raise SloSpecError(f"{where}: field 'class': must be a request class name such as 'shared'")
        rules.append(RegressionRule(e["metric"], float(e["percentile"]), float(e["max_increase_pct"]), request_class))
    return tuple(rules)
