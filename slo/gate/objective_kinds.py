"""The kinds of objective, one class each, and the registry `KINDS` (metric name -> its kind).

- `LatencyPercentile`, one per latency metric of slo/gate/latency_metrics.py (ttft, itl, tpot, e2e,
  send_lag): `percentile` + `max_ms`, nearest rank; decided early where the metric has one
  independent sample per request (`early_stop`: TTFT, TPOT, E2E; not ITL), windowed where the time
  series keeps it (`in_intervals`).
- `Proportion` (error_rate): a fraction of the requests, `max` and/or `min` in 0..1.
- `FailureShare` (slo/gate/failure_share.py: invalid_output): the share of requests that failed as
  one ErrorKind, `max` and/or `min` in 0..1; a ceiling alone is decided early. `CancelledShare`
  (cancelled): the share the client cancelled on purpose.
- `Rate` (output_tokens_per_s, requests_per_s): per second over the run; a request rate floor is
  decided early (requests arrive one by one), tokens are not (they come in bursts of a request).
- `Goodput` (slo/gate/goodput_kind.py): the fraction of requests that met every per-request limit.
- `ServerFigure` (prefix_cache_hit_rate, kv_cache_usage, num_requests_waiting,
  num_requests_running, preemptions): read from the target's /metrics (slo/gate/server_figures.py);
  server-wide, no class, no `min_samples`.

`Objective` is one parsed SLO-file entry; `Objective.kind` is where everything that differs between
kinds is asked. The registry's order is the order an SLO file's error message lists the metrics in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slogate.slo.gate import sequential
from slogate.slo.gate.engines import title
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.failure_share import CancelledShare, FailureShare
from slogate.slo.gate.goodput_kind import GOODPUT_LIMITS, Goodput
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.latency_metrics import LATENCY
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.objective_kind import (
    COMMON_KEYS,
    ObjectiveKind,
    SloSpecError,
    both_sides,
    number,
    when_a_floor_can_fail,
)
from slogate.slo.gate.record import ALL, ErrorKind
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.window import lower_bound_rank, value_at_rank_ms

if TYPE_CHECKING:
    from slogate.slo.gate.evaluate import ObjectiveResult


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
    def kind(self) -> ObjectiveKind:
        """What this objective is (`KINDS`): it answers every question that differs between kinds."""
        return KINDS.get(self.metric, UNKNOWN_KIND)

    def describe_limits(self) -> str:
        """A goodput objective's per-request limits, e.g. `tpot <= 50 ms, ttft <= 200 ms`."""
        return ", ".join(f"{metric} <= {ms:g} ms" for metric, ms in self.limits_ms)

    def describe(self) -> str:
        """Human form, e.g. `p95 ttft[all] <= 200 ms`."""
        return self.kind.describe(self)


class LatencyPercentile(ObjectiveKind):
    """A latency's percentile (nearest rank, from its HdrHistogram) at or below `max_ms`."""

    keys = COMMON_KEYS | {"percentile", "max_ms"}
    unit = "ms"
    si_scale = 1 / 1000
    max_key = "max_ms"
    on_latency_curves = True

    def __init__(self, metric: str, *, per_request: bool, windowed: bool) -> None:
        super().__init__(metric)
        self.per_request = per_request  # one independent sample per request: decidable early
        self.windowed = windowed  # the time series keeps it: a window can judge it

    def parse(self, entry: dict[str, Any], request_class: str, where: str, source: str) -> dict[str, Any]:
        for key in ("percentile", "max_ms"):
            if key not in entry:
                raise SloSpecError(f"{source}: {where}: field {key!r}: required for metric {self.metric!r}")
        pct = number(entry["percentile"], source, f"{where}: field 'percentile'", low=0, high=100, open_low=True)
        max_ms = number(entry["max_ms"], source, f"{where}: field 'max_ms'", low=0, open_low=True)
        return {
            "name": entry.get("name") or f"{self.metric}-p{pct:g}-{request_class}",
            "percentile": pct,
            "max": max_ms,
        }

    def unknown_field_hint(self, field: str) -> str:
        return " (latency targets use 'max_ms')" if field == "max" else ""

    def implied_goodput_limits(self, o: Objective) -> tuple[tuple[str, float], ...]:
        return ((o.metric, float(o.max)),) if o.metric in GOODPUT_LIMITS.values() and o.max is not None else ()

    def describe(self, o: Objective) -> str:
        return f"p{o.percentile:g} {o.metric}[{o.request_class}] <= {o.max:g} ms"

    def observe(self, o: Objective, metrics: MetricsStore, server: ServerFigures | None) -> tuple[float | None, int]:
        hist = metrics.get(o.request_class).latency[o.metric]
        assert o.percentile is not None
        return hist.percentile_ms(o.percentile), hist.count

    def explained_by_client_delay(self, r: ObjectiveResult, client_delay_ms: float, metrics: MetricsStore) -> bool:
        """A latency that would meet its target without the client's delay."""
        return (r.observed or 0) - client_delay_ms <= (r.objective.max or 0)

    def decidable_early(self, o: Objective) -> bool:
        return self.per_request

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        """Passes when the percentile's upper bound is at or below `max_ms`, fails when its lower
        bound is above it beyond the client's delay (as the abort judges it)."""
        assert o.percentile is not None and o.max is not None
        h = metrics.get(o.request_class).latency[o.metric]
        up = sequential.upper_rank(h.count, o.percentile, pass_alpha)
        low = sequential.lower_rank(h.count, o.percentile, fail_alpha)
        upper = value_at_rank_ms(h, up) if up else None
        lower = value_at_rank_ms(h, low) if low else None
        state = UNDECIDED
        if upper is not None and upper <= o.max:
            state = PASS
        elif lower is not None and lower - client_delay_ms > o.max:
            state = FAIL
        return ObjectiveLook(o.name, o.describe(), state, h.count, lower, upper, "ms")

    def windowable(self, o: Objective) -> bool:
        return self.windowed

    def window_bound(
        self, o: Objective, window: LatencyHistogram, client_delay_ms: float
    ) -> tuple[float, float] | None:
        assert o.percentile is not None and o.max is not None
        rank = lower_bound_rank(window.count, o.percentile)
        if not rank:
            return None
        bound = value_at_rank_ms(window, rank)
        if bound - client_delay_ms <= o.max:
            return None
        return window.percentile_ms(o.percentile) or bound, bound


class Proportion(ObjectiveKind):
    """A fraction of the requests (`error_rate`: those that failed); a ceiling alone is decided early."""

    fraction = True

    def decidable_early(self, o: Objective) -> bool:
        return o.max is not None and o.min is None

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        cm = metrics.get(o.request_class)
        state, lower, upper = both_sides(
            lambda alpha: sequential.decide_proportion(cm.failures, cm.requests, o.max or 0.0, alpha),
            pass_alpha, fail_alpha,
        )  # fmt: skip
        return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "")


class Rate(ObjectiveKind):
    """A figure per second over the run. A floor alone is decided early when what it counts comes
    one at a time (requests, by the bounds of a Poisson rate), not in bursts (a request's tokens)."""

    def __init__(self, metric: str, *, one_at_a_time: bool) -> None:
        super().__init__(metric)
        self.one_at_a_time = one_at_a_time

    def explained_by_client_delay(self, r: ObjectiveResult, client_delay_ms: float, metrics: MetricsStore) -> bool:
        """A floor a starved client could not reach."""
        return r.objective.min is not None

    def decidable_early(self, o: Objective) -> bool:
        return self.one_at_a_time and o.min is not None and o.max is None

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        cm = metrics.get(o.request_class)
        floor = o.min or 0.0
        if floor <= 0:  # a floor of 0 holds whatever the data
            return ObjectiveLook(o.name, o.describe(), PASS, cm.requests, None, None, "")
        state, lower, upper = both_sides(
            lambda alpha: sequential.decide_rate(cm.successes, cm.duration_s or 0.0, floor, alpha),
            pass_alpha, when_a_floor_can_fail(fail_alpha, client_delay_ms),
        )  # fmt: skip
        return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "/s")


class ServerFigure(ObjectiveKind):
    """A figure of the target's own /metrics over the run (`figure`: the `ServerFigures` field it
    reads); server-wide, so no class; its samples are scrapes, which `min_samples` does not count."""

    counts_samples = False

    def __init__(self, metric: str, *, figure: str, fraction: bool = False) -> None:
        super().__init__(metric)
        self.figure = figure
        self.fraction = fraction

    def check_class(self, request_class: str, where: str, source: str) -> None:
        if request_class != ALL:
            raise SloSpecError(f"{source}: {where}: field 'class': {self.metric!r} is server-wide; leave 'class' out")

    def observe(self, o: Objective, metrics: MetricsStore, server: ServerFigures | None) -> tuple[float | None, int]:
        if server is None or not server.available:
            return None, 0
        return getattr(server, self.figure), server.scrapes

    def why_short(self, r: ObjectiveResult, min_samples: int, server: ServerFigures | None) -> str:
        if server is not None and server.available:
            return f"{r.objective.name}: {title(server.engine)}'s /metrics has no such figure (docs/engines.md)"
        return f"{r.objective.name} has no server figures (no /metrics)"


KINDS: dict[str, ObjectiveKind] = {
    kind.metric: kind
    for kind in (
        *(LatencyPercentile(m.name, per_request=m.early_stop, windowed=m.in_intervals) for m in LATENCY),
        Proportion("error_rate"),  # fraction of requests that failed
        FailureShare("invalid_output", ErrorKind.INVALID_OUTPUT),  # tool calls or answers that missed their schema
        CancelledShare("cancelled"),  # requests whose client hung up on purpose (--cancel-fraction)
        Rate("output_tokens_per_s", one_at_a_time=False),  # completion tokens per second over the run
        Rate("requests_per_s", one_at_a_time=True),  # successful requests per second over the run
        Goodput("goodput"),
        ServerFigure("prefix_cache_hit_rate", figure="prefix_cache_hit_rate", fraction=True),  # hits / queries
        ServerFigure("kv_cache_usage", figure="kv_cache_usage_max", fraction=True),  # peak, 0..1
        ServerFigure("num_requests_waiting", figure="num_requests_waiting_max"),  # peak queued in the engine
        ServerFigure("num_requests_running", figure="num_requests_running_max"),  # peak running in the engine
        ServerFigure("preemptions", figure="preemptions"),  # preemptions during the run
    )
}
# An objective of a saved report on a metric this version does not know (a newer slogate's): it is
# worded and shown as a plain figure against its bounds, as it was saved.
UNKNOWN_KIND = ObjectiveKind("unknown")
