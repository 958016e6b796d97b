"""What every kind of objective answers: the base class of slo/gate/objective_kinds.py's kinds.

A kind (a latency percentile, a proportion, a rate, goodput, a server figure) owns everything that
differs between objectives: the SLO-file fields it takes and how they are checked, its wording,
how its value is read from the measurements, its verdict, whether and how it is decided before the
end of a run (`--slo-stop-when-decided`, with slo/gate/sequential.py's anytime-valid bounds),
whether a sliding window judges it (`--slo-abort-on-fail`, slo/gate/window.py), and how its value
is written. The spec, the judge, the early stop, the window and the outputs ask the objective's
kind (`Objective.kind`) and never look at its metric's name. docs/layout.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from slogate.slo.gate import sequential
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.sequential import FAIL, PASS, UNDECIDED
from slogate.slo.gate.verdict import Outcome

if TYPE_CHECKING:
    from slogate.slo.gate.evaluate import ObjectiveResult
    from slogate.slo.gate.objective_kinds import Objective
    from slogate.slo.gate.server_figures import ServerFigures

AT_END = "at_end"  # the state of an objective only the end of the run can judge
COMMON_KEYS = frozenset({"name", "metric", "class"})  # every objective takes these


class SloSpecError(ValueError):
    """A malformed SLO file; str() is the one-line message users see."""


class ObjectiveKind:
    """One kind of objective on `metric`. The defaults are those of a figure with a floor (`min`)
    and/or a ceiling (`max`), judged only at the end of a run, never over a window."""

    keys: frozenset[str] = COMMON_KEYS | {"max", "min"}  # the SLO-file fields it takes
    unit = ""  # of its value and targets in every output: "ms" or "" (a fraction, a count, a rate)
    si_scale = 1.0  # its value times this is in base units (seconds for ms: Prometheus)
    max_key = "max"  # the report's key for its ceiling (`target`)
    counts_samples = True  # fewer than `min_samples` samples: insufficient data
    fraction = False  # a share: `min` and `max` at most 1
    on_latency_curves = False  # its target is drawn on the latency percentile curves (HTML, compare)

    def __init__(self, metric: str) -> None:
        self.metric = metric

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.metric!r})"

    # --- the SLO file -------------------------------------------------------------------------
    def parse(self, entry: dict[str, Any], request_class: str, where: str, source: str) -> dict[str, Any]:
        """The `Objective` fields (`name`, `percentile`, `max`, `min`, `limits_ms`) of one SLO-file
        entry whose keys are `keys`; every error is an `SloSpecError` naming `where` and the field."""
        metric = self.metric
        if "max" not in entry and "min" not in entry:
            raise SloSpecError(f"{source}: {where}: field 'max' or 'min': one is required for metric {metric!r}")
        self.check_class(request_class, where, source)
        high = 1 if self.fraction else None
        lo = number(entry["min"], source, f"{where}: field 'min'", low=0, high=high) if "min" in entry else None
        hi = number(entry["max"], source, f"{where}: field 'max'", low=0, high=high) if "max" in entry else None
        if lo is not None and hi is not None and lo > hi:
            raise SloSpecError(f"{source}: {where}: field 'min': {lo:g} is greater than max {hi:g}")
        return {"name": entry.get("name") or f"{metric}-{request_class}", "max": hi, "min": lo}

    def check_class(self, request_class: str, where: str, source: str) -> None:
        """Refuse a request class this kind cannot be measured on."""

    def unknown_field_hint(self, field: str) -> str:
        """A hint after the message for an unknown `field` (e.g. `max` given to a latency)."""
        return ""

    def check_together(self, objectives: Sequence[Objective], source: str) -> None:
        """Refuse objectives of this kind that contradict one another (`objectives` are all of its kind)."""

    def goodput_limits(self, o: Objective) -> tuple[tuple[str, float], ...]:
        """The per-request limits `o` sets for counting good requests itself (goodput's own)."""
        return ()

    def implied_goodput_limits(self, o: Objective) -> tuple[tuple[str, float], ...]:
        """The per-request limits `o` implies when no objective sets any (as `vllm bench --goodput`)."""
        return ()

    # --- wording and values -------------------------------------------------------------------
    def describe(self, o: Objective) -> str:
        """Human form, e.g. `error_rate[all] <= 0.01`."""
        parts = []
        if o.min is not None:
            parts.append(f">= {o.min:g}")
        if o.max is not None:
            parts.append(f"<= {o.max:g}")
        return f"{o.metric}[{o.request_class}] {' and '.join(parts)}"

    def format_value(self, value: float) -> str:
        """An observed value for a table cell (the HTML report)."""
        return f"{value:,.1f} {self.unit}" if self.unit else f"{value:.4g}"

    # --- the verdict at the end ---------------------------------------------------------------
    def observe(self, o: Objective, metrics: MetricsStore, server: ServerFigures | None) -> tuple[float | None, int]:
        """The observed value (None: none) and the number of samples behind it."""
        cm = metrics.get(o.request_class)
        return getattr(cm, o.metric), cm.requests

    def outcome(self, o: Objective, value: float | None, samples: int, min_samples: int) -> Outcome:
        """Pass or fail against `min`/`max`; no value or too few samples: insufficient data."""
        if value is None or (self.counts_samples and samples < min_samples):
            return Outcome.INSUFFICIENT
        if (o.max is not None and value > o.max) or (o.min is not None and value < o.min):
            return Outcome.FAIL
        return Outcome.PASS

    def why_short(self, r: ObjectiveResult, min_samples: int, server: ServerFigures | None) -> str:
        """Why `r` has insufficient data, for the verdict's reason."""
        return f"{r.objective.name} has {r.samples} (min_samples {min_samples})"

    def explained_by_client_delay(self, r: ObjectiveResult, client_delay_ms: float, metrics: MetricsStore) -> bool:
        """Could the client's own delay alone have caused this failure (the self-check)? Errors and
        server figures: no."""
        return False

    # --- before the end -----------------------------------------------------------------------
    def decidable_early(self, o: Objective) -> bool:
        """Whether `look` can decide `o` before the end of the run."""
        return False

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        """`o` as the data so far decide it (asked only where `decidable_early`): passes at level
        `pass_alpha`, fails at `fail_alpha` (slo/gate/early_stop.py says why they differ)."""
        raise NotImplementedError(f"{self!r} is decided only at the end of a run")

    def windowable(self, o: Objective) -> bool:
        """Whether a sliding window of the time series judges `o` (`--slo-abort-on-fail`)."""
        return False

    def window_bound(
        self, o: Objective, window: LatencyHistogram, client_delay_ms: float
    ) -> tuple[float, float] | None:
        """The window's observed value and confidence bound when the bound breaches `o` beyond
        noise and beyond `client_delay_ms`, else None."""
        return None


def both_sides(
    decide: Callable[[float], sequential.Decision], pass_alpha: float, fail_alpha: float
) -> tuple[str, float | None, float | None]:
    """A proportion or rate decided at one level for passing and another for failing: the state,
    the failing side's lower bound and the passing side's upper bound (the side a verdict reads).
    `fail_alpha` 0: this objective cannot fail early."""
    passing = decide(pass_alpha)
    if passing.verdict == PASS:
        return PASS, passing.lower, passing.upper
    if fail_alpha <= 0:
        return UNDECIDED, None, passing.upper
    failing = decide(fail_alpha)
    return (FAIL if failing.verdict == FAIL else UNDECIDED), failing.lower, passing.upper


def when_a_floor_can_fail(fail_alpha: float, client_delay_ms: float) -> float:
    """The level a floor (goodput, a rate) fails early at: a starved or saturated client may have
    caused a missed floor (`explained_by_client_delay`), so with a client delay it can pass early
    but not fail (0)."""
    return fail_alpha if client_delay_ms <= 0 else 0.0


def number(
    value: Any,
    source: str,
    where: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
) -> float:
    """`value` checked as an SLO-file number, else an `SloSpecError` naming `where`."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise SloSpecError(f"{source}: {where}: must be {kind}, got {value!r}")
    if low is not None and (value <= low if open_low else value < low):
        raise SloSpecError(f"{source}: {where}: must be {'>' if open_low else '>='} {low:g}, got {value!r}")
    if high is not None and value > high:
        raise SloSpecError(f"{source}: {where}: must be <= {high:g}, got {value!r}")
    return float(value)
