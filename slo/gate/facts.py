"""Facts about a run that travel beside its measurements, typed: what the load looked like
(`WorkloadFacts`, the report's `run.workload`) and what the Slack alert did (`AlertRecord`, the
report's `alerts`). Each has one JSON form, the report's keys as they have always been, so a
report written before these types existed reads back the same. And why and when a run stopped:
aborted on a breach (`Breach`, the report's `run.aborted`), decided early or at its run time
(`RunStop` with each objective's `ObjectiveLook`, the report's `run.stopped`).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_iso(ts: float | None) -> str | None:
    """Unix seconds as the report's UTC timestamps (whole seconds)."""
    return None if ts is None else time.strftime(ISO_FORMAT, time.gmtime(ts))


def percent(fraction: float) -> str:
    """A confidence as people write it: 0.99 -> 99%, 0.995 -> 99.5%."""
    return f"{100 * fraction:.4g}%"


def from_utc_iso(text: Any) -> float | None:
    """The report's timestamp back as Unix seconds; None when absent or malformed."""
    try:
        return float(calendar.timegm(time.strptime(str(text), ISO_FORMAT))) if text else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class OpenLoopFacts:
    """The open-loop user's arrival process (`run.workload.open_loop`)."""

    process: str | None = None  # poisson | gamma | constant
    rate_per_user: float | None = None  # requests (or new conversations) per second per user
    burstiness: float | None = None
    max_in_flight: int | None = None


@dataclass(frozen=True, slots=True)
class TraceFacts:
    """A trace replay (`run.workload.trace`); the implied hit rates are an unbounded cache's."""

    file: str | None = None
    requests: int | None = None
    block_tokens: int | None = None
    speedup: float | None = None
    implied_token_hit_rate: float | None = None
    implied_block_hit_rate: float | None = None
    exact: bool | None = None  # the prompts are token-exact, so the implied rate is too


@dataclass(frozen=True, slots=True)
class DatasetFacts:
    """A dataset's requests (`run.workload.dataset`)."""

    file: str | None = None
    format: str | None = None
    entries: int | None = None


@dataclass(frozen=True, slots=True)
class PromptMix:
    """The generated prompts' shape: shared prefixes the server's cache can reuse, and the rest."""

    shared_prefixes: int | None
    shared_prefix_tokens: int | None
    shared_fraction: float | None
    max_tokens: int | None


def _typed(cls: type, value: Any, **given: Any) -> Any:
    """`value` (a JSON object) as `cls`, its unknown keys left out and `given` fields set as given;
    None when it is not an object."""
    if not isinstance(value, Mapping):
        return None
    known = {f.name for f in fields(cls)}
    return cls(**{**{k: v for k, v in value.items() if k in known}, **given})


@dataclass(frozen=True, slots=True)
class WorkloadFacts:
    """What the load looked like, recorded in the report and compared with a baseline's, field by
    field, before any regression check (runs of different workloads do not compare).

    `settings` are the generator's settings as the load recorded them: slogate's workload options
    (`WorkloadConfig.describe()`), or a `vllm bench serve` result's run fields. They stay an open
    record compared as a whole, because every source and every version records its own set (a
    baseline written before a field existed must still compare equal); the parts the gate and
    its outputs read are typed."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    dataset: DatasetFacts | None = None
    open_loop: OpenLoopFacts | None = None
    trace: TraceFacts | None = None

    @property
    def conversations(self) -> bool:
        """More than one turn per conversation (the settings record turns only then)."""
        return "turns" in self.settings

    @property
    def prompt_mix(self) -> PromptMix | None:
        """The generated prompts' shape; None for a dataset, a trace or another tool's run."""
        s = self.settings
        if "shared_prefixes" not in s or self.dataset is not None or self.trace is not None:
            return None
        return PromptMix(s.get("shared_prefixes"), s.get("shared_prefix_tokens"), s.get("shared_fraction"),
                         s.get("max_tokens"))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        out = dict(self.settings)
        for name in ("dataset", "open_loop", "trace"):
            part = getattr(self, name)
            if part is not None:  # as recorded: a field the recording had not is left out, not filled in
                out[name] = {k: v for k, v in asdict(part).items() if v is not None}
        return out

    @classmethod
    def coerce(cls, value: WorkloadFacts | Mapping[str, Any] | None) -> WorkloadFacts:
        """`value` as it is, or read from its JSON form (as callers and tests may write it)."""
        return value if isinstance(value, WorkloadFacts) else cls.from_json(value)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> WorkloadFacts:
        d = dict(d or {})
        return cls(
            settings={k: v for k, v in d.items() if k not in ("dataset", "open_loop", "trace")},
            dataset=_typed(DatasetFacts, d.get("dataset")),
            open_loop=_typed(OpenLoopFacts, d.get("open_loop")),
            trace=_typed(TraceFacts, d.get("trace")),
        )


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """What the Slack alert did (the report's `alerts.slack`); never a secret."""

    sent: bool
    detail: str
    attempts: int | None = None  # None: nothing was sent, nothing to notify
    notified_for: tuple[str, ...] | None = None  # the policy's reasons that asked for the message

    def to_json(self) -> dict[str, Any]:
        slack: dict[str, Any] = {"sent": self.sent}
        if self.attempts is not None:
            slack["attempts"] = self.attempts
        slack["detail"] = self.detail
        if self.notified_for is not None:
            slack["for"] = list(self.notified_for)
        return {"slack": slack}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> AlertRecord | None:
        slack = (d or {}).get("slack")
        if not isinstance(slack, Mapping):
            return None
        notified = slack.get("for")
        return cls(
            bool(slack.get("sent")),
            str(slack.get("detail") or ""),
            slack.get("attempts"),
            tuple(notified) if notified is not None else None,
        )


@dataclass(frozen=True, slots=True)
class Breach:
    """Why a run was stopped: an objective's windowed percentile wholly above its target."""

    objective: str  # the objective's name
    describe: str  # its human form, e.g. `p95 ttft[all] <= 200 ms`
    at: float  # Unix time of the decision
    after_s: float  # seconds into the run
    window_s: float
    samples: int
    observed_ms: float  # the window's percentile (nearest rank)
    lower_bound_ms: float  # its ABORT_CONFIDENCE lower confidence bound, above the target
    client_delay_ms: float = 0.0  # what the load generator's own delay could have added (self-check)
    confidence: float = 0.99  # of the one-sided lower bound (slo/gate/window.py ABORT_CONFIDENCE)

    @property
    def message(self) -> str:
        return (
            f"aborted after {self.after_s:.0f} s: {self.objective} ({self.describe}) failed over the last "
            f"{self.window_s:g} s: observed {self.observed_ms:.1f} ms from {self.samples} samples, and its "
            f"{self.confidence:.0%} lower confidence bound {self.lower_bound_ms:.1f} ms is above the target"
            + (f" by more than the client's own delay ({self.client_delay_ms:.1f} ms)" if self.client_delay_ms else "")
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "at": utc_iso(self.at), "reason": self.message}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Breach | None:
        return _typed(cls, d, at=from_utc_iso(d.get("at")) or 0.0) if isinstance(d, Mapping) else None


@dataclass(frozen=True, slots=True)
class ObjectiveLook:
    """One objective as the data so far decide it (`--slo-stop-when-decided`, slo/gate/early_stop.py)."""

    name: str
    objective: str  # its human form, e.g. `p95 ttft[all] <= 200 ms`
    state: str  # pass | fail | undecided | at_end (only the end of the run judges it)
    samples: int
    lower: float | None  # the anytime-valid bounds of its figure: ms, a fraction, or a rate per second
    upper: float | None
    unit: str = ""  # "ms", "" (a fraction) or "/s"

    def bounds_text(self) -> str:
        """E.g. `p95 in [31.2, 41.0] ms` style: `[lower, upper] ms`, "-" for an unknown side."""

        def fmt(v: float | None) -> str:
            if v is None:
                return "-"
            return f"{v:.1f}" if self.unit == "ms" else f"{v:.4g}"

        return f"[{fmt(self.lower)}, {fmt(self.upper)}]{' ' + self.unit if self.unit == 'ms' else self.unit}"


# Why a run stopped (`RunStop.reason`).
DECIDED, ABORTED, RUN_TIME, INTERRUPTED = "decided", "aborted", "run_time", "interrupted"
KILLED, BY_HAND = "killed", "by_hand"  # judged from its journal (slo/gate/journal.py); the web UI's Stop
CUT_SHORT = (INTERRUPTED, KILLED)  # ended before its run time, not by the gate: too early to judge
STOP_REASONS = (RUN_TIME, DECIDED, ABORTED, INTERRUPTED, KILLED, BY_HAND)  # all of them: docs/reports.md lists these


@dataclass(frozen=True, slots=True)
class RunStop:
    """Why and when the run ended (`run.stopped`): every objective decided (`--slo-stop-when-decided`),
    aborted on a breach (`--slo-abort-on-fail`), its `--run-time` reached, interrupted by a signal
    before it (`signal`: e.g. SIGTERM, what a cancelled CI job or `timeout` sends), killed (judged
    afterwards from its journal: `after_s` is the journal's last entry), or stopped by hand in the
    web UI (the user decided the run was over: judged as it stands)."""

    reason: str  # DECIDED | ABORTED | RUN_TIME | INTERRUPTED | KILLED | BY_HAND
    after_s: float  # seconds into the run
    planned_s: float | None = None  # its --run-time, when it had one
    verdict: str | None = None  # DECIDED: the certain verdict, pass or fail
    confidence: float | None = None  # DECIDED: of each bound
    objectives: tuple[ObjectiveLook, ...] = ()  # DECIDED: every objective at the stop, with its bounds
    signal: str | None = None  # INTERRUPTED: the signal
    correlated: bool = False  # DECIDED: latency percentiles on batches (--slo-correlated-requests)

    def line(self) -> str:
        """One line for the summary, the HTML report and Slack."""
        of = f" of {self.planned_s:g} s" if self.planned_s else ""
        if self.reason == RUN_TIME:
            return f"Ran its whole run time ({self.after_s:.0f} s)."
        if self.reason == INTERRUPTED:
            by = f" by {self.signal}" if self.signal else ""
            return f"Interrupted{by} after {self.after_s:.0f} s{of}."
        if self.reason == KILLED:
            return (
                f"Killed after {self.after_s:.0f} s{of} (or still running): judged from its journal, "
                "whose last entry was then."
            )
        if self.reason == BY_HAND:
            return f"Stopped by hand (web UI) after {self.after_s:.0f} s{of}."
        if self.reason == ABORTED:
            return f"Stopped after {self.after_s:.0f} s{of}: aborted on a breach (--slo-abort-on-fail)."
        decided = [o for o in self.objectives if o.state in ("pass", "fail")]
        shown = [o for o in decided if o.state == self.verdict] or decided
        detail = "; ".join(f"{o.name} {o.state} {o.bounds_text()} ({o.samples:,} samples)" for o in shown)
        confidence = f" at {percent(self.confidence)} confidence" if self.confidence else ""
        batches = " (percentiles on batches of correlated requests; bounds per request)" if self.correlated else ""
        return (
            f"Stopped after {self.after_s:.0f} s{of}: verdict certain ({self.verdict}){confidence}{batches}: {detail}."
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "objectives": [asdict(o) for o in self.objectives]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> RunStop | None:
        if not isinstance(d, Mapping):
            return None
        looks = tuple(_typed(ObjectiveLook, o) for o in d.get("objectives") or () if isinstance(o, Mapping))
        return _typed(cls, d, objectives=looks)
