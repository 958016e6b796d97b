"""Regressions against a baseline report, judged against the run-to-run noise.

A regression rule (in the SLO file, under `regressions:`) gives a tolerance, e.g.
`{metric: ttft, percentile: 95, max_increase_pct: 10, class: all}`. The change is a regression
only when it is worse than the tolerance *and* larger than the noise: both runs' histograms are
resampled (bootstrap) to get a 95% interval of the change of the percentile.

- the whole interval is above the tolerance  -> `regression`
- the whole interval is within the tolerance -> `ok`
- the interval straddles the tolerance       -> `inconclusive` (a small or noisy run; no false alarm)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from slogate.slo.histogram import LatencyHistogram
from slogate.slo.metrics import ALL_CLASSES, LATENCY_METRICS

REGRESSION, OK, INCONCLUSIVE = "regression", "ok", "inconclusive"
BOOTSTRAP_ROUNDS = 400
CONFIDENCE = 0.95
# A workload field that differs makes a comparison meaningless; these may differ freely.
_VOLATILE_WORKLOAD_KEYS = {"request_timeout_s", "prime_prefixes"}


class BaselineMismatch(ValueError):
    """The baseline came from another workload or target; str() says which field differs."""


@dataclass(frozen=True, slots=True)
class RegressionRule:
    metric: str
    percentile: float
    max_increase_pct: float
    request_class: str = ALL_CLASSES

    @property
    def name(self) -> str:
        return f"{self.metric}-p{self.percentile:g}-{self.request_class}"


@dataclass(slots=True)
class Comparison:
    rule: RegressionRule
    baseline: float | None
    current: float | None
    change_pct: float | None
    interval_pct: tuple[float, float] | None  # 95% bootstrap interval of the change, in %
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        r = self.rule
        return {
            "name": r.name,
            "metric": r.metric,
            "percentile": r.percentile,
            "class": r.request_class,
            "max_increase_pct": r.max_increase_pct,
            "baseline_ms": self.baseline,
            "current_ms": self.current,
            "change_pct": self.change_pct,
            "interval_pct": list(self.interval_pct) if self.interval_pct else None,
            "verdict": self.verdict,
        }


def check_compatible(baseline: dict[str, Any], current_run: dict[str, Any]) -> None:
    """Refuse to compare runs of different workloads or models."""
    base_run = baseline.get("run") or {}
    for field in ("model",):
        if base_run.get(field) != current_run.get(field):
            raise BaselineMismatch(
                f"baseline {field} {base_run.get(field)!r} differs from this run's {current_run.get(field)!r}"
            )
    a, b = base_run.get("workload") or {}, current_run.get("workload") or {}
    for key in sorted((set(a) | set(b)) - _VOLATILE_WORKLOAD_KEYS):
        if a.get(key) != b.get(key):
            raise BaselineMismatch(
                f"baseline workload {key}={a.get(key)!r} differs from this run's {key}={b.get(key)!r}; "
                "record a new baseline for the new workload"
            )


def _resample_percentile(values: list[float], weights: list[int], n: int, p: float, rng: random.Random) -> float:
    draw = sorted(rng.choices(values, cum_weights=weights, k=n))
    rank = max(1, -(-n * p // 100))
    return draw[int(rank) - 1]


def bootstrap_change_pct(
    base: LatencyHistogram, cur: LatencyHistogram, p: float, rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0
) -> tuple[float, float]:
    """95% interval of (current - baseline) / baseline at percentile p, in %."""
    rng = random.Random(seed)
    samples = []
    prepared = []
    for h in (base, cur):
        pairs = h.values_and_counts_ms()
        values = [v for v, _ in pairs]
        cumulative, total = [], 0
        for _, c in pairs:
            total += c
            cumulative.append(total)
        prepared.append((values, cumulative, total))
    (bv, bw, bn), (cv, cw, cn) = prepared
    for _ in range(rounds):
        b = _resample_percentile(bv, bw, bn, p, rng)
        c = _resample_percentile(cv, cw, cn, p, rng)
        samples.append((c - b) / b * 100 if b else 0.0)
    samples.sort()
    tail = (1 - CONFIDENCE) / 2
    return samples[int(tail * (rounds - 1))], samples[int((1 - tail) * (rounds - 1))]


def compare(
    rule: RegressionRule, baseline: dict[str, Any], current_histograms: dict[str, dict[str, str]]
) -> Comparison:
    base_text = (baseline.get("histograms") or {}).get(rule.request_class, {}).get(rule.metric)
    cur_text = current_histograms.get(rule.request_class, {}).get(rule.metric)
    if not base_text or not cur_text:
        return Comparison(rule, None, None, None, None, INCONCLUSIVE)
    base, cur = LatencyHistogram.decode(base_text), LatencyHistogram.decode(cur_text)
    b, c = base.percentile_ms(rule.percentile), cur.percentile_ms(rule.percentile)
    assert b is not None and c is not None
    change = (c - b) / b * 100 if b else 0.0
    low, high = bootstrap_change_pct(base, cur, rule.percentile)
    if low > rule.max_increase_pct:
        verdict = REGRESSION
    elif high <= rule.max_increase_pct:
        verdict = OK
    else:
        verdict = INCONCLUSIVE
    return Comparison(rule, round(b, 3), round(c, 3), round(change, 2), (round(low, 2), round(high, 2)), verdict)


def parse_rules(entries: Any, source: str) -> tuple[RegressionRule, ...]:
    """The SLO file's `regressions:` list; errors name the file, the entry and the field."""
    from slogate.slo.spec import SloSpecError  # spec imports this module

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
        rules.append(
            RegressionRule(
                e["metric"], float(e["percentile"]), float(e["max_increase_pct"]), e.get("class", ALL_CLASSES)
            )
        )
    return tuple(rules)


def judge(report: dict[str, Any], baseline: dict[str, Any], rules: tuple[RegressionRule, ...], action: str) -> None:
    """Add the `regression` section to `report` and fold it into the verdict and exit code.

    A regression fails the run (exit 1) unless `action` is `warn`; an inconclusive comparison
    makes an otherwise passing run inconclusive (exit 3); a baseline of another workload is
    refused (exit 2): comparing it would mean nothing.
    """
    try:
        check_compatible(baseline, report.get("run") or {})
    except BaselineMismatch as e:
        report["regression"] = {"status": "refused", "reason": str(e), "comparisons": []}
        report["reasons"].append(f"baseline refused: {e}")
        if report["verdict"] == "pass":
            report["verdict"], report["exit_code"] = "error", 2
        return
    comparisons = [compare(rule, baseline, report.get("histograms") or {}) for rule in rules]
    verdicts = {c.verdict for c in comparisons}
    status = REGRESSION if REGRESSION in verdicts else INCONCLUSIVE if INCONCLUSIVE in verdicts else OK
    report["regression"] = {
        "status": status,
        "action": action,
        "baseline_generated_at": baseline.get("generated_at"),
        "baseline_verdict": baseline.get("verdict"),
        "comparisons": [c.to_dict() for c in comparisons],
    }
    if status == OK or action == "warn":
        if status != OK:
            report["reasons"].append(f"regression check: {status} (warn only)")
        return
    names = ", ".join(c.rule.name for c in comparisons if c.verdict == status)
    if status == REGRESSION and report["verdict"] in ("pass", "inconclusive"):
        report["verdict"], report["exit_code"] = "fail", 1
        report["reasons"].append(f"regression against the baseline: {names}")
    elif status == INCONCLUSIVE and report["verdict"] == "pass":
        report["verdict"], report["exit_code"] = "inconclusive", 3
        report["reasons"].append(f"regression check inconclusive (change within the noise): {names}")
