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
    regressions:               # against --slo-baseline (see slo/gate/regression.py)
      - {metric: ttft, percentile: 95, max_increase_pct: 10, class: all}
    regression_action: fail    # or warn

Every error names the file, the entry and the field, on one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from slogate.slo.gate.metrics import GOODPUT_METRICS, LATENCY_METRICS
from slogate.slo.gate.record import ALL, REQUEST_CLASSES
from slogate.slo.gate.regression import RegressionRule

RATE_METRICS = {
    "error_rate": "fraction of requests that failed",
    "output_tokens_per_s": "completion tokens per second over the run",
    "requests_per_s": "successful requests per second over the run",
}
# Read from the target's /metrics during the run (see slo/gate/server_figures.py); server-wide, no class.
SERVER_METRICS = {
    "prefix_cache_hit_rate": "prefix-cache hits / queries over the run (0..1)",
    "kv_cache_usage": "peak KV-cache usage (0..1)",
    "num_requests_waiting": "peak number of requests queued in the engine",
    "num_requests_running": "peak number of requests running in the engine",
    "preemptions": "preemptions during the run",
}
FRACTION_METRICS = ("error_rate", "prefix_cache_hit_rate", "kv_cache_usage")
# Goodput (vLLM's and DistServe's): the fraction of requests that met every per-request limit.
GOODPUT = "goodput"
GOODPUT_LIMITS = {f"{m}_ms": m for m in GOODPUT_METRICS}  # field -> the metric it limits
METRICS = (*LATENCY_METRICS, *RATE_METRICS, GOODPUT, *SERVER_METRICS)
_TOP_LEVEL_KEYS = {"slos", "min_samples", "warmup_s", "regressions", "regression_action"}
_LATENCY_KEYS = {"name", "metric", "percentile", "max_ms", "class"}
_RATE_KEYS = {"name", "metric", "max", "min", "class"}
_GOODPUT_KEYS = {"name", "metric", "min", "class", *GOODPUT_LIMITS}


class SloSpecError(ValueError):
    """A malformed SLO file; str() is the one-line message users see."""


@dataclass(frozen=True, slots=True)
class Objective:
    name: str
    metric: str
    request_class: str = ALL
    percentile: float | None = None
    max: float | None = None  # milliseconds for latency metrics
    min: float | None = None
    # goodput only: the per-request limits, ((metric, max ms), ...) sorted by metric
    limits_ms: tuple[tuple[str, float], ...] = ()

    @property
    def is_latency(self) -> bool:
        return self.metric in LATENCY_METRICS

    @property
    def is_server(self) -> bool:
        return self.metric in SERVER_METRICS

    def describe_limits(self) -> str:
        """A goodput objective's per-request limits, e.g. `tpot <= 50 ms, ttft <= 200 ms`."""
        return ", ".join(f"{metric} <= {ms:g} ms" for metric, ms in self.limits_ms)

    def describe(self) -> str:
        """Human form, e.g. `p95 ttft[all] <= 200 ms`."""
        if self.is_latency:
            return f"p{self.percentile:g} {self.metric}[{self.request_class}] <= {self.max:g} ms"
        if self.metric == GOODPUT:
            return f"goodput[{self.request_class}] >= {self.min:g} ({self.describe_limits()})"
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        return f"{self.metric}[{self.request_class}] {' and '.join(parts)}"


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
    goodput = [o for o in spec.objectives if o.metric == GOODPUT]
    pairs = (
        [(o.request_class, metric, ms) for o in goodput for metric, ms in o.limits_ms]
        if goodput
        else [
            (o.request_class, o.metric, float(o.max))
            for o in spec.objectives
            if o.metric in GOODPUT_LIMITS.values() and o.max is not None
        ]
    )
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
    min_samples = _number(data.get("min_samples", 1), source, "field 'min_samples'", integer=True, low=1)
    warmup_s = _number(data.get("warmup_s", 0), source, "field 'warmup_s'", low=0)
    objectives = tuple(_objective(entry, i, source) for i, entry in enumerate(entries))
    names = [o.name for o in objectives]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SloSpecError(f"{source}: slos: duplicate name {dupes[0]!r}; names must be unique")
    _check_one_goodput_definition(objectives, source)
    regressions = parse_rules(data["regressions"], source) if "regressions" in data else ()
    action = data.get("regression_action", "fail")
    if action not in ("fail", "warn"):
        raise SloSpecError(f"{source}: field 'regression_action': must be 'fail' or 'warn', got {action!r}")
    return SloSpec(objectives, int(min_samples), float(warmup_s), source, regressions, action)


def _objective(entry: Any, index: int, source: str) -> Objective:
    where = f"slos[{index}]"
    if not isinstance(entry, dict):
        raise SloSpecError(f"{source}: {where}: must be a mapping, got {type(entry).__name__}")
    if "name" in entry:
        where = f"{where} ({entry['name']})"
    metric = entry.get("metric")
    if metric not in METRICS:
        raise SloSpecError(f"{source}: {where}: field 'metric': {metric!r} is not one of {', '.join(METRICS)}")
    latency = metric in LATENCY_METRICS
    allowed = _LATENCY_KEYS if latency else _GOODPUT_KEYS if metric == GOODPUT else _RATE_KEYS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        hint = " (latency targets use 'max_ms')" if unknown[0] == "max" and latency else ""
        raise SloSpecError(
            f"{source}: {where}: unknown field {unknown[0]!r} for metric {metric!r}{hint}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    request_class = entry.get("class", ALL)
    if not isinstance(request_class, str) or not request_class.strip():
        raise SloSpecError(f"{source}: {where}: field 'class': must be a request class name such as 'shared'")

    if latency:
        if "percentile" not in entry:
            raise SloSpecError(f"{source}: {where}: field 'percentile': required for metric {metric!r}")
        if "max_ms" not in entry:
            raise SloSpecError(f"{source}: {where}: field 'max_ms': required for metric {metric!r}")
        pct = _number(entry["percentile"], source, f"{where}: field 'percentile'", low=0, high=100, open_low=True)
        max_ms = _number(entry["max_ms"], source, f"{where}: field 'max_ms'", low=0, open_low=True)
        name = entry.get("name") or f"{metric}-p{pct:g}-{request_class}"
        return Objective(str(name), metric, request_class, percentile=pct, max=max_ms)

    if metric == GOODPUT:
        return _goodput(entry, where, source, request_class)
    if "max" not in entry and "min" not in entry:
        raise SloSpecError(f"{source}: {where}: field 'max' or 'min': one is required for metric {metric!r}")
    if metric in SERVER_METRICS and request_class != ALL:
        raise SloSpecError(f"{source}: {where}: field 'class': {metric!r} is server-wide; leave 'class' out")
    high = 1 if metric in FRACTION_METRICS else None
    lo = _number(entry["min"], source, f"{where}: field 'min'", low=0, high=high) if "min" in entry else None
    hi = _number(entry["max"], source, f"{where}: field 'max'", low=0, high=high) if "max" in entry else None
    if lo is not None and hi is not None and lo > hi:
        raise SloSpecError(f"{source}: {where}: field 'min': {lo:g} is greater than max {hi:g}")
    name = entry.get("name") or f"{metric}-{request_class}"
    return Objective(str(name), metric, request_class, max=hi, min=lo)


def _check_one_goodput_definition(objectives: tuple[Objective, ...], source: str) -> None:
    """A request is good or not once (as with `vllm bench serve --goodput`), counted live against
    the limits of every goodput objective it falls under. Two objectives with different limits
    must therefore never share a request: allowed only on two of slogate's own request classes
    (`shared` and `unique`, or `prefix_hit` and `prefix_miss`: no request is in two). `all`, a
    conversation tag or a dataset's or trace's class may overlap another name: with limits of
    their own, some objective would be judged against limits other than its own."""
    goodput = [o for o in objectives if o.metric == GOODPUT]
    for i, first in enumerate(goodput):
        for other in goodput[i + 1 :]:
            disjoint = first.request_class != other.request_class and {first.request_class, other.request_class} <= set(
                REQUEST_CLASSES
            )
            if other.limits_ms != first.limits_ms and not disjoint:
                raise SloSpecError(
                    f"{source}: slos: goodput objectives {first.name!r} ({first.describe_limits()}) and "
                    f"{other.name!r} ({other.describe_limits()}) give different per-request limits to requests "
                    f"that can be in both ({first.request_class!r}, {other.request_class!r}); a request is good by one "
                    f"set of limits: use the same limits, or limits per request class ({', '.join(REQUEST_CLASSES)})"
                )


def _goodput(entry: dict[str, Any], where: str, source: str, request_class: str) -> Objective:
    if "min" not in entry:
        raise SloSpecError(f"{source}: {where}: field 'min': required for metric 'goodput' (e.g. min: 0.95)")
    lo = _number(entry["min"], source, f"{where}: field 'min'", low=0, high=1)
    limits = tuple(
        sorted(
            (metric, _number(entry[key], source, f"{where}: field {key!r}", low=0, open_low=True))
            for key, metric in GOODPUT_LIMITS.items()
            if key in entry
        )
    )
    if not limits:
        raise SloSpecError(
            f"{source}: {where}: field 'ttft_ms', 'tpot_ms' or 'e2e_ms': goodput needs at least one per-request limit"
        )
    name = entry.get("name") or f"goodput-{request_class}"
    return Objective(str(name), GOODPUT, request_class, min=lo, limits_ms=limits)


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


def _number(
    value: Any,
    source: str,
    where: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
) -> float:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise SloSpecError(f"{source}: {where}: must be {kind}, got {value!r}")
    if low is not None and (value <= low if open_low else value < low):
        raise SloSpecError(f"{source}: {where}: must be {'>' if open_low else '>='} {low:g}, got {value!r}")
    if high is not None and value > high:
        raise SloSpecError(f"{source}: {where}: must be <= {high:g}, got {value!r}")
    return float(value)
