"""The goodput objective (vLLM's and DistServe's): the fraction of requests that met every per-request limit.

`{metric: goodput, min: 0.95, ttft_ms: 200, tpot_ms: 50}`: a request is good when it succeeded and
each named figure is at or below its limit (`ttft_ms`, `tpot_ms`, `e2e_ms`). Requests are counted
good or not live, one by one, against the limits (`MetricsStore.set_goodput_targets`, fed by
slo/gate/spec.py `goodput_targets`), so a saved run judged with other limits has no value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from slogate.slo.gate import sequential
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.metrics import GOODPUT_METRICS, MetricsStore
from slogate.slo.gate.objective_kind import (
    COMMON_KEYS,
    ObjectiveKind,
    SloSpecError,
    both_sides,
    number,
    when_a_floor_can_fail,
)
from slogate.slo.gate.record import REQUEST_CLASSES
from slogate.slo.gate.sequential import PASS, UNDECIDED

if TYPE_CHECKING:
    from slogate.slo.gate.evaluate import ObjectiveResult
    from slogate.slo.gate.objective_kinds import Objective
    from slogate.slo.gate.server_figures import ServerFigures

GOODPUT_LIMITS = {f"{m}_ms": m for m in GOODPUT_METRICS}  # SLO-file field -> the metric it limits


class Goodput(ObjectiveKind):
    """A floor (`min`, 0..1) on the fraction of the class's requests that met every limit."""

    keys = COMMON_KEYS | {"min", *GOODPUT_LIMITS}

    def parse(self, entry: dict[str, Any], request_class: str, where: str, source: str) -> dict[str, Any]:
        if "min" not in entry:
            raise SloSpecError(f"{source}: {where}: field 'min': required for metric 'goodput' (e.g. min: 0.95)")
        lo = number(entry["min"], source, f"{where}: field 'min'", low=0, high=1)
        limits = tuple(
            sorted(
                (metric, number(entry[key], source, f"{where}: field {key!r}", low=0, open_low=True))
                for key, metric in GOODPUT_LIMITS.items()
                if key in entry
            )
        )
        if not limits:
            raise SloSpecError(
                f"{source}: {where}: field 'ttft_ms', 'tpot_ms' or 'e2e_ms': goodput needs at least one per-request "
                "limit"
            )
        return {"name": entry.get("name") or f"goodput-{request_class}", "min": lo, "limits_ms": limits}

    def check_together(self, objectives: Sequence[Objective], source: str) -> None:
        """A request is good or not once (as with `vllm bench serve --goodput`), counted live against
        the limits of every goodput objective it falls under. Two objectives with different limits
        must therefore never share a request: allowed only on two of slogate's own request classes
        (`shared` and `unique`, or `prefix_hit` and `prefix_miss`: no request is in two). `all`, a
        conversation tag or a dataset's or trace's class may overlap another name: with limits of
        their own, some objective would be judged against limits other than its own."""
        for i, first in enumerate(objectives):
            for other in objectives[i + 1 :]:
                disjoint = first.request_class != other.request_class and {
                    first.request_class,
                    other.request_class,
                } <= set(REQUEST_CLASSES)
                if other.limits_ms != first.limits_ms and not disjoint:
                    raise SloSpecError(
                        f"{source}: slos: goodput objectives {first.name!r} ({first.describe_limits()}) and "
                        f"{other.name!r} ({other.describe_limits()}) give different per-request limits to requests "
                        f"that can be in both ({first.request_class!r}, {other.request_class!r}); a request is good "
                        f"by one set of limits: use the same limits, or limits per request class "
                        f"({', '.join(REQUEST_CLASSES)})"
                    )

    def goodput_limits(self, o: Objective) -> tuple[tuple[str, float], ...]:
        return o.limits_ms

    def describe(self, o: Objective) -> str:
        return f"goodput[{o.request_class}] >= {o.min:g} ({o.describe_limits()})"

    def observe(self, o: Objective, metrics: MetricsStore, server: ServerFigures | None) -> tuple[float | None, int]:
        """The fraction of the class's requests that met every limit, over the requests that ended
        (failures count, never as good; requests in flight at the stop are left out, as vLLM leaves
        them out: whether they would have met the limits is unknown), and that count. No value when the
        measurements counted good requests against other limits than the objective's (a saved run
        judged with a new SLO file): `good` cannot be counted again from histograms."""
        counted = (metrics.goodput_targets_ms or {}).get(o.request_class)
        cm = metrics.get(o.request_class)
        samples = cm.requests
        if counted != dict(o.limits_ms) or not samples:
            return None, samples
        return cm.good / samples, samples

    def why_short(self, r: ObjectiveResult, min_samples: int, server: ServerFigures | None) -> str:
        if r.observed is None and r.samples:
            return (
                f"{r.objective.name}: no good requests were counted against its limits (they are counted live, per "
                "request)"
            )
        return super().why_short(r, min_samples, server)

    def explained_by_client_delay(self, r: ObjectiveResult, client_delay_ms: float, metrics: MetricsStore) -> bool:
        """A goodput that could meet its floor without the client's delay."""
        return goodput_ceiling(r.objective, metrics, client_delay_ms) >= (r.objective.min or 0)

    def decidable_early(self, o: Objective) -> bool:
        return o.min is not None and o.max is None

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        """Decided by the bounds of the proportion of requests not good (failures count, never as
        good, as the objective judges it)."""
        cm = metrics.get(o.request_class)
        floor = o.min or 0.0
        if floor <= 0:  # a floor of 0 holds whatever the data
            return ObjectiveLook(o.name, o.describe(), PASS, cm.requests, None, None, "")
        if metrics.goodput_targets_ms is None:  # good requests not counted against these limits
            return ObjectiveLook(o.name, o.describe(), UNDECIDED, cm.requests, None, None, "")
        not_good = cm.requests - cm.good
        state, low_miss, up_miss = both_sides(
            lambda alpha: sequential.decide_proportion(not_good, cm.requests, 1 - floor, alpha),
            pass_alpha, when_a_floor_can_fail(fail_alpha, client_delay_ms),
        )  # fmt: skip
        lower, upper = (None if up_miss is None else 1 - up_miss), (None if low_miss is None else 1 - low_miss)
        return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "")


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
        if metric == "ttft" and cm.cancelled:  # cancelled requests' TTFTs are there too: a bound
            over_limit = max(0, over_limit - cm.cancelled)
        over = max(over, over_limit)
    return 1 - (cm.failures + over) / cm.requests
