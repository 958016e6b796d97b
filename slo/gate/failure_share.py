"""The objective kind `FailureShare`: the share of requests that failed as one `ErrorKind`, so that an
SLO file can gate on one failure kind apart from the error rate, e.g. `invalid_output` (tool calls or
structured answers that do not match their schema: docs/workloads/tools.md), and `CancelledShare`, the
share of requests the client cancelled (`cancelled`: docs/workloads/cancellation.md):

    - {name: valid-json, metric: invalid_output, max: 0.01}

A fraction (`max` and/or `min` in 0..1) of the requests of its class, read from the per-kind failure
counts every report has (`errors_by_kind`); a ceiling alone is decided early, as the error rate's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slogate.slo.gate import sequential
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.metrics import ClassMetrics, MetricsStore
from slogate.slo.gate.objective_kind import ObjectiveKind, both_sides
from slogate.slo.gate.record import ErrorKind

if TYPE_CHECKING:
    from slogate.slo.gate.objective_kinds import Objective
    from slogate.slo.gate.server_figures import ServerFigures


class Share(ObjectiveKind):
    """A share of a class's requests (`counts`: those counted, and those it is a share of), `max`
    and/or `min` in 0..1; a ceiling alone is decided early."""

    fraction = True

    def counts(self, cm: ClassMetrics) -> tuple[int, int]:
        raise NotImplementedError

    def observe(self, o: Objective, metrics: MetricsStore, server: ServerFigures | None) -> tuple[float | None, int]:
        events, requests = self.counts(metrics.get(o.request_class))
        return (events / requests if requests else None), requests

    def decidable_early(self, o: Objective) -> bool:
        return o.max is not None and o.min is None

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        events, requests = self.counts(metrics.get(o.request_class))
        state, lower, upper = both_sides(
            lambda alpha: sequential.decide_proportion(events, requests, o.max or 0.0, alpha),
            pass_alpha, fail_alpha,
        )  # fmt: skip
        return ObjectiveLook(o.name, o.describe(), state, requests, lower, upper, "")


class FailureShare(Share):
    """The share of requests that failed as `failure` (the objective's `metric` names it)."""

    def __init__(self, metric: str, failure: ErrorKind) -> None:
        super().__init__(metric)
        self.failure = str(failure)

    def counts(self, cm: ClassMetrics) -> tuple[int, int]:
        return cm.errors_by_kind.get(self.failure, 0), cm.requests


class CancelledShare(Share):
    """The share of requests whose client hung up on purpose (`cancelled`, --cancel-fraction): not
    failures, counted apart from the requests that ended, so the share is of both together. A gate
    on it checks the load it meant to send (`{metric: cancelled, min: 0.4, max: 0.6}`)."""

    def counts(self, cm: ClassMetrics) -> tuple[int, int]:
        return cm.cancelled, cm.requests + cm.cancelled
