"""A capacity step as judged (launch/knee.py runs it): its rate, its verdict and decision, the figures
of its last run's report, and, left undecided, what more runs at its rate could do (launch/knee_next.py
reads them to pick the next rate). `capacity.json` lists the steps as they are here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slogate.launch.knee_interval import UNDECIDED
from slogate.slo.gate.facts import DECIDED
from slogate.slo.gate.latency_metrics import HEADLINE
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import Report, goodput_summary

SERVER_FIGURES = ("prefix_cache_hit_rate", "kv_cache_usage_max", "num_requests_waiting_max", "preemptions")


@dataclass(slots=True)
class Step:
    """One offered rate, as judged."""

    rate_rps: float
    verdict: str  # pass | fail | inconclusive
    attempts: int  # its runs (more than 1: run again, inconclusive or undecided; earlier runs pooled not counted)
    step_s: float  # measured seconds asked of the last attempt
    wall_s: float  # every attempt, warm-up and an early abort included
    reasons: list[str]
    aborted: bool  # --slo-abort-on-fail stopped it
    achieved_rps: float | None  # successful requests per second measured
    requests: int
    dropped: int
    ttft_p95_ms: dict[str, float | None]  # per class, `all` first
    goodput_rps: float | None
    goodput_fraction: float | None
    server: dict[str, Any]  # the SERVER_FIGURES the report has (from /metrics)
    report_dir: str
    conversations: bool = False  # --turns > 1: the offered rate counts new conversations
    decided_after_s: float | None = None  # --slo-stop-when-decided (or -failed) ended it this far into its run
    decision: str = UNDECIDED  # pass | fail | undecided, by the anytime-valid bounds (launch/knee_interval.py)
    probe: bool = False  # a probe on the way up (launch/knee_probe.py): it bounds nothing unless decided fail
    # Undecided, its budget (`StepJudge.attempts`; the test at R's: one run of their seconds) spent or, projected
    # from its runs, not enough to decide it: within noise of a target (or too few requests at its rate);
    # launch/knee_next.py bisects no gap past it, and judges it again only while no pass is decided and
    # `decide_in_s` says it might.
    undecidable: bool = False
    runs_left: int = 0  # undecided: the runs its budget had left (on batches a rate judged again pools its runs)
    pooled_runs: int = 0  # earlier runs at its rate (an earlier step's) that its decision pooled with its own
    # Undecided, on adaptive batches: the projected seconds of runs more that would decide it, if within
    # twice its runs left (StepJudge.seconds_to_decide; a point estimate).
    decide_in_s: float | None = None
    # An undecided pass, on adaptive batches, that its runs left could not decide even had none of its
    # requests been over a target: too few requests at its rate; a lower rate sends fewer (knee_next.py
    # goes no lower).
    too_few_requests: bool = False

    @property
    def rate_unit(self) -> str:
        """What `rate_rps` counts: requests, or with --turns new conversations (each of several
        requests; `achieved_rps` still counts requests)."""
        return "conv/s" if self.conversations else "req/s"


def step_from_report(
    rate: float, report: Report, attempts: int, step_s: float, wall_s: float, where: Path, decision: str = UNDECIDED
) -> Step:
    summary = report.metrics_summary()
    stopped = report.run.stopped
    total = summary.get(ALL) or {}
    goodput = goodput_summary(report.measurements)["classes"].get(ALL) or {}
    server = report.server.to_json() if report.server is not None else {}
    server = {k: server[k] for k in SERVER_FIGURES if k in server}
    return Step(
        rate_rps=rate,
        verdict=str(report.verdict),
        attempts=attempts,
        step_s=step_s,
        wall_s=round(wall_s, 3),
        reasons=list(report.reasons),
        aborted=report.run.aborted is not None,
        decided_after_s=stopped.after_s if stopped is not None and stopped.reason == DECIDED else None,
        achieved_rps=total.get("requests_per_s"),
        requests=total.get("requests") or 0,
        dropped=total.get("dropped") or 0,
        ttft_p95_ms={cls: (m.get(f"{HEADLINE.name}_ms") or {}).get("p95") for cls, m in summary.items()},
        goodput_rps=goodput.get("goodput_rps"),
        goodput_fraction=goodput.get("fraction"),
        server=server,
        report_dir=str(where),
        conversations=report.run.workload.conversations,
        decision=decision,
    )
