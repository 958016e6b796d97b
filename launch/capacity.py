"""Capacity at the SLO: the highest open-loop arrival rate at which every SLO is met (the knee).

The search (`search`) starts at `rate_start` and doubles the rate until a step fails (halving
instead when the first step already fails), then bisects until the bracket [highest passing,
lowest failing] is within `precision` of the passing rate. Each step is one judged run at a fixed
offered rate: the search only sees its `Report`, through a `RunStep` callback, so it runs against
anything that can produce one: `locust_step` (a Locust subprocess per step against a URL, as
`slogate capacity` uses it), a launched profile, or a benchmark's own runner.

A step is pass, fail or inconclusive, as its report's verdict says. An inconclusive step (too
few samples, the client saturated, sends dropped on a pass) is neither: it is run again, twice
as long, once; still inconclusive, the search stops there and says why (`decided` false, exit 3).
Failing steps are cheap: `locust_step` runs them with `--slo-abort-on-fail`.

`write_capacity` writes `capacity.json` (`capacity_rps`, `first_failing_rps`, every step with its
verdict, p95 TTFT per class, goodput and server figures), `capacity.md` and `capacity.png` (p95
TTFT per class against the offered rate with the targets, and goodput; needs matplotlib).
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slogate.launch.locust_command import locust_argv
from slogate.slo import exitcodes
from slogate.slo.record import ALL
from slogate.slo.report import Report, ReportError, goodput_summary
from slogate.slo.verdict import Verdict

RunStep = Callable[[float, float, Path], Report]  # (offered rate in req/s, measured seconds, report dir) -> report
SERVER_FIGURES = ("prefix_cache_hit_rate", "kv_cache_usage_max", "num_requests_waiting_max", "preemptions")
JSON_NAME, MARKDOWN_NAME, PNG_NAME = "capacity.json", "capacity.md", "capacity.png"


class CapacityInputError(ValueError):
    """A setting the search cannot run with, or a step that could not be judged; str() is one line.
    `exit_code`: usage (2), or inconclusive (3) when a step's run failed on its own (no report);
    `partial`: the steps the search had already judged, set by `search`."""

    def __init__(self, message: str, exit_code: int = exitcodes.USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.partial: CapacityResult | None = None


@dataclass(frozen=True, slots=True)
class SearchSettings:
    rate_start: float = 1.0  # requests per second, all users together
    precision: float = 0.1  # stop when (lowest failing - highest passing) / highest passing <= this
    step_s: float = 30.0  # measured seconds per step (the warm-up is the runner's)
    max_steps: int = 12

    def check(self) -> None:
        """Raise CapacityInputError, naming the option, for a setting the search cannot use."""
        if not self.rate_start > 0 or math.isinf(self.rate_start):
            raise CapacityInputError(f"--rate-start: must be a rate > 0 requests/s, got {self.rate_start:g}")
        if not 0 < self.precision < 1:
            raise CapacityInputError(f"--precision: must be in (0, 1) (0.1 = 10 %), got {self.precision:g}")
        if not self.step_s > 0:
            raise CapacityInputError(f"--step-s: must be > 0, got {self.step_s:g}")
        if self.max_steps < 2:
            raise CapacityInputError(f"--max-steps: must be >= 2, got {self.max_steps}")


@dataclass(slots=True)
class Step:
    """One offered rate, as judged."""

    rate_rps: float
    verdict: str  # pass | fail | inconclusive
    attempts: int  # 2 when the first was inconclusive and it was run again, longer
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

    @property
    def rate_unit(self) -> str:
        """What `rate_rps` counts: requests, or with --turns new conversations (each of several
        requests; `achieved_rps` still counts requests)."""
        return "conv/s" if self.conversations else "req/s"


def step_from_report(rate: float, report: Report, attempts: int, step_s: float, wall_s: float, where: Path) -> Step:
    summary = report.metrics_summary()
    total = summary.get(ALL) or {}
    goodput = goodput_summary(report.measurements)["classes"].get(ALL) or {}
    server = {k: report.server.get(k) for k in SERVER_FIGURES if k in report.server} if report.server else {}
    return Step(
        rate_rps=rate,
        verdict=str(report.verdict),
        attempts=attempts,
        step_s=step_s,
        wall_s=round(wall_s, 3),
        reasons=list(report.reasons),
        aborted=report.run.aborted is not None,
        achieved_rps=total.get("requests_per_s"),
        requests=total.get("requests") or 0,
        dropped=total.get("dropped") or 0,
        ttft_p95_ms={cls: (m.get("ttft_ms") or {}).get("p95") for cls, m in summary.items()},
        goodput_rps=goodput.get("goodput_rps"),
        goodput_fraction=goodput.get("fraction"),
        server=server,
        report_dir=str(where),
        conversations="turns" in report.run.workload,  # recorded only for more than one turn
    )


@dataclass(slots=True)
class CapacityResult:
    settings: SearchSettings
    steps: list[Step] = field(default_factory=list)
    stopped_because: str = ""  # why the search ended, in words
    ttft_targets_ms: dict[str, float] = field(default_factory=dict)  # per class, from the SLO file (for the chart)

    def _rates(self, verdict: str) -> list[float]:
        return [s.rate_rps for s in self.steps if s.verdict == verdict]

    @property
    def rate_unit(self) -> str:
        """What the offered rates count (`Step.rate_unit`); every step runs the same workload."""
        return self.steps[0].rate_unit if self.steps else "req/s"

    @property
    def capacity_rps(self) -> float | None:
        """The highest offered rate at which every SLO was met."""
        return max(self._rates(Verdict.PASS), default=None)

    @property
    def first_failing_rps(self) -> float | None:
        """The lowest offered rate at which an SLO failed."""
        return min(self._rates(Verdict.FAIL), default=None)

    @property
    def decided(self) -> bool:
        """The knee is bracketed within the precision."""
        low, high = self.capacity_rps, self.first_failing_rps
        return low is not None and high is not None and (high - low) / low <= self.settings.precision + 1e-9

    def exit_code(self, min_capacity: float | None = None) -> int:
        """0 met (or, without a minimum, decided), 1 below the minimum, 3 the search could not tell."""
        low, high = self.capacity_rps, self.first_failing_rps
        if min_capacity is None:
            return exitcodes.PASS if self.decided else exitcodes.INCONCLUSIVE
        if low is not None and low >= min_capacity:
            return exitcodes.PASS
        if (high is not None and high <= min_capacity) or self.decided:
            return exitcodes.FAIL
        return exitcodes.INCONCLUSIVE

    def to_json(self, min_capacity: float | None = None) -> dict[str, Any]:
        return {
            "capacity_rps": self.capacity_rps,
            "first_failing_rps": self.first_failing_rps,
            "rate_unit": self.rate_unit,
            "decided": self.decided,
            "stopped_because": self.stopped_because,
            "min_capacity_rps": min_capacity,
            "exit_code": self.exit_code(min_capacity),
            "settings": asdict(self.settings),
            "ttft_targets_ms": self.ttft_targets_ms,
            "steps_run": len(self.steps),
            "wall_s": round(sum(s.wall_s for s in self.steps), 3),
            "steps": [asdict(s) for s in self.steps],
        }


def ttft_targets(report: Report) -> dict[str, float]:
    """The strictest TTFT target per class among the report's objectives."""
    out: dict[str, float] = {}
    for r in report.slos:
        o = r.objective
        if o.metric == "ttft" and o.max is not None:
            out[o.request_class] = min(out.get(o.request_class, math.inf), o.max)
    return out


def search(
    run_step: RunStep, settings: SearchSettings, out_dir: Path, on_step: Callable[[Step], None] = lambda s: None
) -> CapacityResult:
    """Find the knee; step reports go to `out_dir/step-NN-<rate>rps/`. Raises CapacityInputError,
    with the steps judged before it as `partial`, when a step's run is a usage error (a bad Locust
    option: every step would be; exit 2) or wrote no report (exit 3)."""
    settings.check()
    result = CapacityResult(settings)
    passed: float | None = None
    failed: float | None = None
    rate = settings.rate_start
    while True:
        if len(result.steps) >= settings.max_steps:
            result.stopped_because = f"--max-steps {settings.max_steps} reached before the bracket was within precision"
            return result
        where = out_dir / f"step-{len(result.steps) + 1:02d}-{rate:g}rps"
        try:
            step, report = _judge_rate(run_step, rate, settings.step_s, where)
        except CapacityInputError as e:
            e.partial = result  # what was judged before stays reported
            raise
        result.steps.append(step)
        result.ttft_targets_ms = result.ttft_targets_ms or ttft_targets(report)
        on_step(step)
        if step.verdict == Verdict.INCONCLUSIVE:
            result.stopped_because = f"the step at {rate:g} req/s was inconclusive twice: " + "; ".join(step.reasons)
            return result
        if step.verdict == Verdict.PASS:
            passed = rate
        else:
            failed = rate
        if failed is None:
            rate *= 2
        elif passed is None:
            rate /= 2
        elif result.decided:
            result.stopped_because = f"bracket [{passed:g}, {failed:g}] within --precision {settings.precision:g}"
            return result
        else:
            rate = (passed + failed) / 2


def _judge_rate(run_step: RunStep, rate: float, step_s: float, report_dir: Path) -> tuple[Step, Report]:
    """One step; run again, twice as long, when inconclusive."""
    started = time.monotonic()
    attempts = 0
    for attempt_s in (step_s, 2 * step_s):
        attempts += 1
        where = report_dir if attempts == 1 else report_dir.with_name(report_dir.name + "-longer")
        report = run_step(rate, attempt_s, where)
        if report.verdict == Verdict.ERROR:
            raise CapacityInputError(f"the step at {rate:g} req/s could not be judged: {'; '.join(report.reasons)}")
        if report.verdict == Verdict.UNGATED:
            raise CapacityInputError(f"the step at {rate:g} req/s was not gated: the search needs an SLO file")
        if report.verdict != Verdict.INCONCLUSIVE:
            break
    return step_from_report(rate, report, attempts, attempt_s, time.monotonic() - started, where), report


# -- running a step with Locust ----------------------------------------------------------------


def read_report(report_dir: Path) -> Report:
    path = report_dir / "slo-report.json"
    try:
        return Report.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, ReportError):
        log = report_dir / "locust.log"
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
        said = f": {lines[-1].strip()}" if lines else ""
        raise CapacityInputError(
            f"the step's Locust run wrote no report{said} (see {log})", exitcodes.INCONCLUSIVE
        ) from None


def locust_step(
    host: str,
    *,
    slo_file: str | Path,
    warmup_s: float,
    config: str | Path | None = None,
    locust_args: Sequence[str] = (),
    abort_on_fail: bool = True,
) -> RunStep:
    """A `RunStep` that runs the open-loop user in a Locust subprocess against `host`: one user
    sending `rate` requests/s (the arrival process and every workload option are the caller's
    `locust_args`), `warmup_s` not judged, then `step_s` measured, stopped early by
    `--slo-abort-on-fail` when an SLO fails beyond noise over the step (unless `abort_on_fail`
    is false: a plain sweep). Its output goes to `locust.log` in the step's report directory."""

    def run(rate: float, step_s: float, report_dir: Path) -> Report:
        report_dir.mkdir(parents=True, exist_ok=True)
        extra = [
            # Overridable: the window and time series resolution.
            *(["--slo-abort-on-fail", "--slo-window-s", f"{step_s:g}"] if abort_on_fail else []),
            "--slo-interval-s", "1",
            *locust_args,
            # What makes the step this step: not overridable.
            "--users", "1", "--spawn-rate", "1", "--arrival-rate", f"{rate:g}",
            "--run-time", f"{math.ceil(warmup_s + step_s)}s", "--slo-warmup-s", f"{warmup_s:g}",
        ]  # fmt: skip
        argv = locust_argv(
            host, locustfile="open-loop", config=config, slo_file=slo_file, report_dir=report_dir, extra=extra
        )
        with open(report_dir / "locust.log", "wb") as log:
            subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
        return read_report(report_dir)

    return run


# -- reports ------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(result: CapacityResult, title: str = "", min_capacity: float | None = None) -> str:
    cap, first_fail, unit = result.capacity_rps, result.first_failing_rps, result.rate_unit
    lines = [f"## slogate capacity{': ' + title if title else ''}", ""]
    lines.append(
        f"**Capacity: {_fmt(cap, 3)} {unit}** (highest rate with every SLO met); first failing: "
        f"{_fmt(first_fail, 3)} {unit}. {len(result.steps)} steps, "
        f"{sum(s.wall_s for s in result.steps):.0f} s. {result.stopped_because}."
    )
    if min_capacity is not None:
        code = result.exit_code(min_capacity)
        word = {exitcodes.PASS: "met", exitcodes.FAIL: "NOT met"}.get(code, "undecided")
        lines.append(f"`--min-capacity {min_capacity:g}`: {word} (exit {code}).")
    classes = list(dict.fromkeys(cls for s in result.steps for cls in s.ttft_p95_ms))
    lines += [
        "",
        f"| step | rate {unit} | verdict | achieved req/s | "
        + " | ".join(f"TTFT p95 {c}" for c in classes)
        + " | goodput req/s | goodput | prefix-cache hit | wall s |",
        "|---" * (8 + len(classes)) + "|",
    ]
    for i, s in enumerate(result.steps, 1):
        verdict = s.verdict + (" (aborted)" if s.aborted else "") + (" (retried)" if s.attempts > 1 else "")
        ttfts = " | ".join(_fmt(s.ttft_p95_ms.get(c)) for c in classes)
        lines.append(
            f"| {i} | {s.rate_rps:g} | {verdict} | {_fmt(s.achieved_rps, 2)} | {ttfts} | {_fmt(s.goodput_rps, 2)} | "
            f"{_fmt(s.goodput_fraction, 3)} | {_fmt(s.server.get('prefix_cache_hit_rate'), 3)} | {s.wall_s:.0f} |"
        )
    offered = "new conversations offered" if unit == "conv/s" else "rates offered"
    lines += ["", f"TTFT in ms, nearest-rank p95 per class; {offered} open loop (all users together)."]
    return "\n".join(lines) + "\n"


def plot_capacity(result: CapacityResult, out: Path, title: str = "") -> Path | None:
    """p95 TTFT per class against the offered rate (log scale), the targets dashed, goodput on a
    second axis; failing steps as crosses. None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = sorted(result.steps, key=lambda s: s.rate_rps)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    classes = list(dict.fromkeys(cls for s in steps for cls in s.ttft_p95_ms))
    for cls in classes:
        points = [(s.rate_rps, s.ttft_p95_ms.get(cls), s.verdict) for s in steps if s.ttft_p95_ms.get(cls)]
        if not points:
            continue
        (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"TTFT p95 {cls}")
        failing = [p for p in points if p[2] == Verdict.FAIL]
        ax.scatter([p[0] for p in failing], [p[1] for p in failing], marker="x", s=80, color=line.get_color())
        target = result.ttft_targets_ms.get(cls)
        if target is not None:
            ax.axhline(target, color=line.get_color(), linestyle="--", linewidth=0.8)
    if result.capacity_rps is not None:
        ax.axvline(
            result.capacity_rps,
            color="green",
            linewidth=0.8,
            label=f"capacity {result.capacity_rps:.3g} {result.rate_unit}",
        )
    ax.set_xlabel(f"offered rate ({result.rate_unit})")
    ax.set_ylabel("TTFT p95 (ms, log scale); dashed: target")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    goodput = [(s.rate_rps, s.goodput_rps) for s in steps if s.goodput_rps is not None]
    if goodput:
        ax2 = ax.twinx()
        ax2.plot([g[0] for g in goodput], [g[1] for g in goodput], color="grey", marker="s", label="goodput")
        ax2.set_ylabel("goodput (req/s)")
        ax2.legend(loc="lower right")
    ax.legend(loc="upper left")
    ax.set_title(f"Capacity at the SLO{': ' + title if title else ''}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_capacity(
    result: CapacityResult, out_dir: Path, title: str = "", min_capacity: float | None = None
) -> dict[str, Path | None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / JSON_NAME, out_dir / MARKDOWN_NAME
    js.write_text(json.dumps(result.to_json(min_capacity), indent=2) + "\n")
    md.write_text(render_markdown(result, title, min_capacity))
    return {"json": js, "markdown": md, "png": plot_capacity(result, out_dir / PNG_NAME, title)}


def step_line(step: Step) -> str:
    """One step's outcome in one line, as the search prints it."""
    ttft = ", ".join(f"{c} {v:.1f}" for c, v in step.ttft_p95_ms.items() if v is not None)
    aborted = " (aborted)" if step.aborted else ""
    return f"{step.rate_rps:g} {step.rate_unit}: {step.verdict}{aborted}; TTFT p95 ms {ttft}"


# A profile's search: its result, or the error that ended it (with the steps judged before, `partial`).
ProfileOutcome = CapacityResult | CapacityInputError


def outcome_exit_code(outcome: ProfileOutcome, min_capacity: float | None) -> int:
    """A search's exit code; one that failed: with `min_capacity`, what the steps judged before
    the failure already prove (0 a rate >= the minimum passed, 1 the capacity is below it), else
    the failure's own code (2 or 3)."""
    if not isinstance(outcome, CapacityInputError):
        return outcome.exit_code(min_capacity)
    if outcome.partial is not None and min_capacity is not None:
        proven = outcome.partial.exit_code(min_capacity)
        if proven in (exitcodes.PASS, exitcodes.FAIL):
            return proven
    return outcome.exit_code


def overall_exit_code(outcomes: dict[str, ProfileOutcome], min_capacity: float | None) -> int:
    """Several profiles: 1 when any is proven below the minimum; else the first other non-zero code
    in profile order (3 undecided or a search that failed, 2 a usage error, 4 vLLM missing); else 0."""
    codes = [outcome_exit_code(o, min_capacity) for o in outcomes.values()]
    if exitcodes.FAIL in codes:
        return exitcodes.FAIL
    return next((code for code in codes if code != exitcodes.PASS), exitcodes.PASS)


def write_summary(outcomes: dict[str, ProfileOutcome], out_dir: Path, min_capacity: float | None) -> Path:
    """Several profiles: `capacity.json` ({profile: result or error}) and `capacity.md` (one line
    each) in `out_dir`; each profile's own files are in `out_dir/<profile>/`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "profiles": {name: _outcome_json(o, min_capacity) for name, o in outcomes.items()},
        "exit_code": overall_exit_code(outcomes, min_capacity),
    }
    (out_dir / JSON_NAME).write_text(json.dumps(data, indent=2) + "\n")
    lines = ["| profile | capacity | first failing | steps | decided |", "|---|---|---|---|---|"]
    for name, o in outcomes.items():
        if isinstance(o, CapacityInputError):
            steps = len(o.partial.steps) if o.partial else 0
            lines.append(f"| {name} | error: {o} | | {steps} | False |")
            continue
        cap, fail = f"{_fmt(o.capacity_rps, 3)} {o.rate_unit}", f"{_fmt(o.first_failing_rps, 3)} {o.rate_unit}"
        lines.append(f"| {name} | {cap} | {fail} | {len(o.steps)} | {o.decided} |")
    md = out_dir / MARKDOWN_NAME
    md.write_text("\n".join(lines) + "\n")
    return md


def _outcome_json(outcome: ProfileOutcome, min_capacity: float | None) -> dict[str, Any]:
    if not isinstance(outcome, CapacityInputError):
        return outcome.to_json(min_capacity)
    data: dict[str, Any] = {"error": str(outcome), "exit_code": outcome_exit_code(outcome, min_capacity)}
    if outcome.partial is not None and outcome.partial.steps:
        data["partial"] = outcome.partial.to_json(min_capacity)
    return data


def write_error(out_dir: Path, error: CapacityInputError, min_capacity: float | None = None) -> Path:
    """A search that could not run or finish: the reason in `capacity.json`, with the steps judged
    before it (`partial`), so a CI job still has an artifact."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / JSON_NAME
    path.write_text(json.dumps(_outcome_json(error, min_capacity), indent=2) + "\n")
    return path
