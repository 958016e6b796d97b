"""The SLO file: YAML parsed once into typed objectives, validated before any load is sent.

Grammar (one mapping per objective under `slos:`)::

    slos:
      - name: ttft-p95        # optional; derived from metric/percentile/class when absent
        metric: ttft           # ttft | itl | tpot | e2e          (latency, needs percentile + max_ms)
        percentile: 95         # 0 < p <= 100
        max_ms: 200
        class: all             # all | shared | unique (any request class the workload tags)
      - {metric: error_rate, max: 0.01}             # fraction of failed requests
      - {metric: output_tokens_per_s, min: 50}      # also requests_per_s
      - {metric: goodput, min: 0.95, ttft_ms: 200, tpot_ms: 50}   # fraction of requests meeting
                                                    # every limit (ttft_ms, tpot_ms, e2e_ms)
      - {metric: prefix_cache_hit_rate, min: 0.5}   # server-side, from /metrics; also kv_cache_usage,
                                                    # num_requests_waiting, num_requests_running, preemptions
    min_samples: 50            # fewer samples for an objective -> inconclusive (exit 3)
    warmup_s: 5                # requests started in the first N seconds are not judged
    regressions:               # against --slo-baseline (slo/gate/regression.py checks and judges them)
      - {metric: ttft, percentile: 95, max_increase_pct: 10, class: all}
    regression_action: fail    # or warn

Every error names the file, the entry and the field, on one line. Each metric's kind
(slo/gate/objective_kinds.py) checks and reads its entry's fields; this module checks what is
common to all (the top level, `metric`, `class`, names) and builds the `Objective`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from slogate.slo.gate.objective_kind import SloSpecError, number
from slogate.slo.gate.objective_kinds import KINDS, Objective
from slogate.slo.gate.record import ALL
from slogate.slo.gate.regression import RegressionRule, parse_rules

_TOP_LEVEL_KEYS = {"slos", "min_samples", "warmup_s", "regressions", "regression_action"}


@dataclass(frozen=True, slots=True)
class SloSpec:
    objectives: tuple[Objective, ...]
    min_samples: int = 1
    warmup_s: float = 0.0
    source: str = "<inline>"
    regressions: tuple[RegressionRule, ...] = ()
    regression_action: str = "fail"  # fail | warn

    @property
    def classes(self) -> set[str]:
        """Every request class an objective or a regression rule names."""
        return {o.request_class for o in self.objectives} | {r.request_class for r in self.regressions}


def goodput_targets(spec: SloSpec | None) -> dict[str, dict[str, float]] | None:
    """{class: {metric: max ms}}: the per-request limits a request must meet to count as good
    (`MetricsStore.set_goodput_targets`). The goodput objectives' own limits when the file has
    any; else, as `vllm bench serve --goodput` would be given them, the latency objectives on
    TTFT, TPOT and E2E. The strictest where several name the same metric and class; None when
    there are none."""
    if spec is None:
        return None
    objectives = spec.objectives
    pairs = [(o.request_class, metric, ms) for o in objectives for metric, ms in o.kind.goodput_limits(o)] or [
        (o.request_class, metric, ms) for o in objectives for metric, ms in o.kind.implied_goodput_limits(o)
    ]
    out: dict[str, dict[str, float]] = {}
    for request_class, metric, ms in pairs:
        limits = out.setdefault(request_class, {})
        limits[metric] = min(limits.get(metric, math.inf), ms)
    return out or None


def with_overrides(spec: SloSpec, *, min_samples: int | None = None, warmup_s: float | None = None) -> SloSpec:
    """The spec with command-line overrides (`--slo-min-samples`, `--slo-warmup-s`); every other
    field, the regression rules included, is kept. None (or 0 min samples, < 0 warm-up) keeps the file's value."""
    changes: dict[str, Any] = {}
    if min_samples:
        changes["min_samples"] = int(min_samples)
    if warmup_s is not None and warmup_s >= 0:
        changes["warmup_s"] = float(warmup_s)
    return replace(spec, **changes)


def load_spec(path: str | Path) -> SloSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SloSpecError(f"{p}: cannot read SLO file: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise SloSpecError(f"{p}: not valid YAML{where}: {problem}") from None
    return parse_spec(data, str(p))


def parse_spec(data: Any, source: str = "<inline>") -> SloSpec:
    if not isinstance(data, dict):
        raise SloSpecError(f"{source}: top level must be a mapping with a 'slos' list")
    unknown = sorted(set(data) - _TOP_LEVEL_KEYS)
    if unknown:
        raise SloSpecError(
            f"{source}: unknown top-level field {unknown[0]!r} (allowed: {', '.join(sorted(_TOP_LEVEL_KEYS))})"
        )
    entries = data.get("slos")
    if not isinstance(entries, list) or not entries:
        raise SloSpecError(f"{source}: field 'slos': must be a non-empty list of objectives")
    min_samples = number(data.get("min_samples", 1), source, "field 'min_samples'", integer=True, low=1)
    warmup_s = number(data.get("warmup_s", 0), source, "field 'warmup_s'", low=0)
    objectives = tuple(_objective(entry, i, source) for i, entry in enumerate(entries))
    names = [o.name for o in objectives]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SloSpecError(f"{source}: slos: duplicate name {dupes[0]!r}; names must be unique")
    for kind in dict.fromkeys(o.kind for o in objectives):
        kind.check_together([o for o in objectives if o.kind is kind], source)
    regressions = parse_rules(data["regressions"], source) if "regressions" in data else ()
    action = data.get("regression_action", "fail")
    if action not in ("fail", "warn"):
        raise SloSpecError(f"{source}: field 'regression_action': must be 'fail' or 'warn', got {action!r}")
    return SloSpec(objectives, int(min_samples), float(warmup_s), source, regressions, action)


def _objective(entry: Any, index: int, source: str) -> Objective:
    """One entry of `slos:`, its fields checked and read by its metric's kind."""
    where = f"slos[{index}]"
    if not isinstance(entry, dict):
        raise SloSpecError(f"{source}: {where}: must be a mapping, got {type(entry).__name__}")
    if "name" in entry:
        where = f"{where} ({entry['name']})"
    metric = entry.get("metric")
    kind = KINDS.get(metric) if isinstance(metric, str) else None
    if kind is None:
        raise SloSpecError(f"{source}: {where}: field 'metric': {metric!r} is not one of {', '.join(KINDS)}")
    unknown = sorted(set(entry) - kind.keys)
    if unknown:
        hint = kind.unknown_field_hint(unknown[0])
        raise SloSpecError(
            f"{source}: {where}: unknown field {unknown[0]!r} for metric {metric!r}{hint}; "
            f"allowed: {', '.join(sorted(kind.keys))}"
        )
    request_class = entry.get("class", ALL)
    if not isinstance(request_class, str) or not request_class.strip():
        raise SloSpecError(f"{source}: {where}: field 'class': must be a request class name such as 'shared'")
    fields = kind.parse(entry, request_class, where, source)
    return Objective(str(fields.pop("name")), metric, request_class, **fields)
