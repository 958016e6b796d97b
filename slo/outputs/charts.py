"""What the report's charts draw (slo/outputs/assets/slogate-charts.js), from a report alone: the
time series, the SLO targets, percentile curves per class on a shared grid, and the server's
scrapes; the web UI tab's live chart too (`live_chart_data`)."""

from __future__ import annotations

import math
from typing import Any

from slogate.slo.gate.facts import from_utc_iso
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.latency_metrics import INTERVAL_METRICS
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import Report
from slogate.slo.gate.spec import Objective, SloSpec

POINTS_PER_DECADE = 20
MAX_CURVE_X = 1e6  # percentile curves reach 99.9999% at most


def targets(objectives: list[Objective] | tuple[Objective, ...]) -> list[dict[str, Any]]:
    """The latency objectives as chart lines: one per objective with a `max_ms`."""
    return [
        {
            "name": o.name,
            "metric": o.metric,
            "class": o.request_class,
            "percentile": o.percentile,
            "max_ms": o.max,
            "label": o.describe(),
        }
        for o in objectives
        if o.kind.on_latency_curves and o.max is not None
    ]


def percentile_grid(max_count: int) -> list[float]:
    """x = 1 / (1 - q), POINTS_PER_DECADE per decade from 1 (q = 0) to the first point past
    `max_count` samples (where the curves end at their maximum), at most MAX_CURVE_X."""
    top = min(max(max_count, 1), MAX_CURVE_X)
    steps = math.ceil(POINTS_PER_DECADE * math.log10(top) + 1e-9) + 1
    return [float(f"{10 ** (k / POINTS_PER_DECADE):.4g}") for k in range(steps + 1)]


def curve(h: LatencyHistogram, grid: list[float]) -> list[float | None]:
    """The histogram's percentile curve on `grid`: nearest-rank values where x <= samples, the
    maximum at the first point beyond, then nothing."""
    n = h.count
    out: list[float | None] = [None] * len(grid)
    if not n:
        return out
    inside = [i for i, x in enumerate(grid) if x <= n]
    qs = [max(100.0 * (1 - 1 / grid[i]), 1e-9) for i in inside]
    values = h.percentiles_ms(qs) or []
    for i, v in zip(inside, values, strict=True):
        out[i] = round(v, 3)
    beyond = len(inside)
    if beyond < len(grid):
        out[beyond] = round(h.max_ms() or 0.0, 3)
    return out


def covered_s(starts: list[float], step: float, first: float | None, last: float | None) -> list[float]:
    """Seconds of each interval inside the measured window [first, last]: the first and last
    intervals of a run are partial, and their requests per second are counted over what they
    covered (else a run's ends read as dips in the rate)."""
    lo = -math.inf if first is None else first
    hi = math.inf if last is None else last
    return [round(max(min(t + step, hi) - max(t, lo), 1e-3), 3) for t in starts]


def charted_classes(store: MetricsStore) -> list[str]:
    """The lines of the charts: `all` and the request classes, as the time series keeps them.
    Conversation tags (`follow_up`, `turn_3`, ...) cut across the classes: they are in the tables,
    where they read well, not drawn over the class lines."""
    return [ALL, *sorted(store.classes)]


def chart_data(report: Report, grids: dict[str, list[float]]) -> dict[str, Any]:
    """What the charts of one run draw (see slo/outputs/assets/slogate-charts.js); `grids`: the
    percentile curves' x points per metric (shared by every run of the page)."""
    store = report.measurements
    series = store.intervals.series() if not store.intervals.is_empty else None
    origin = from_utc_iso(report.run.started_at)
    if origin is None and series and series["t"]:
        origin = series["t"][0]
    if series is not None:
        measured_from = None if origin is None else origin + report.run.warmup_s
        ended = from_utc_iso(report.run.ended_at)
        series["covered_s"] = covered_s(series["t"], series["interval_s"], measured_from, ended)
    server = report.server
    classes = charted_classes(store)
    curves = {
        metric: {cls: curve(store.get(cls).latency[metric], grids[metric]) for cls in classes}
        for metric in INTERVAL_METRICS
    }
    base = report.baseline_measurements
    baseline_curves = None
    if base is not None:  # the baseline's curves for the classes both runs have, drawn dashed beside the run's
        shared = [cls for cls in classes if cls == ALL or cls in base.classes]
        baseline_curves = {
            metric: {cls: curve(base.get(cls).latency[metric], grids[metric]) for cls in shared}
            for metric in INTERVAL_METRICS
        }
    return {
        "origin": origin,
        "series": series,
        "targets": targets([r.objective for r in report.slos]),
        "curves": curves,
        "baseline_curves": baseline_curves,
        "classes": classes,
        "server": server.series if server is not None and server.available else None,
    }


def live_chart_data(store: MetricsStore, spec: SloSpec | None, started_at: float | None) -> dict[str, Any]:
    """The web UI tab's live chart (`/slo/series`): the time series so far and the SLO targets;
    nothing else (no host, no option), so nothing secret."""
    series = store.intervals.series() if not store.intervals.is_empty else None
    return {
        "origin": started_at if started_at is not None else (series["t"][0] if series and series["t"] else None),
        "series": series,
        "targets": targets(spec.objectives) if spec is not None else [],
        "interval_s": store.intervals.interval_s,
    }
