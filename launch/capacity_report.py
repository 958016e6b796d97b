"""`slogate capacity`'s files: `capacity.json` (`capacity_rps`, `first_failing_rps`, the knee's
`interval_rps` at its `confidence`, every step with its verdict and decision, p95 TTFT per class,
goodput and server figures), `capacity.md` (the interval as its headline) and `capacity.png` (p95
TTFT per class against the offered rate with the targets, the interval shaded, and goodput; needs
matplotlib); with several profiles a summary of them all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slogate.launch.knee import CapacityInputError, CapacityResult
from slogate.launch.knee_interval import UNDECIDED
from slogate.launch.knee_outcome import ProfileOutcome, outcome_exit_code, overall_exit_code
from slogate.launch.knee_step import Step
from slogate.slo.gate import exitcodes
from slogate.slo.gate.latency_metrics import HEADLINE
from slogate.slo.gate.verdict import Verdict

JSON_NAME, MARKDOWN_NAME, PNG_NAME = "capacity.json", "capacity.md", "capacity.png"
P95 = f"{HEADLINE.title} p95"  # what each step shows per class (Step.ttft_p95_ms: the headline metric, TTFT)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(cells: list[str]) -> str:
    """A Markdown table row: as many cells as the header, whatever the steps measured."""
    return "| " + " | ".join(cells) + " |"


def headline(result: CapacityResult) -> str:
    """The interval in words, e.g. `capacity 17-19 req/s (99 %)`: each end decided at that confidence."""
    low, high = result.interval_rps
    assumed = ", requests assumed independent" if result.batch_s is None else ""  # --batch-s 0
    unit, confidence = result.rate_unit, f"({100 * result.confidence:.4g} %{assumed})"
    if low is not None and high is not None:
        return f"capacity {low:g}-{high:g} {unit} {confidence}"
    if low is not None:
        return f"capacity >= {low:g} {unit} {confidence}"
    if high is not None:
        return f"capacity < {high:g} {unit} {confidence}"
    return "capacity undecided (no step decided at the confidence)"


def render_markdown(result: CapacityResult, title: str = "", min_capacity: float | None = None) -> str:
    cap, first_fail, unit = result.capacity_rps, result.first_failing_rps, result.rate_unit
    lines = [f"## slogate capacity{': ' + title if title else ''}", "", f"**{headline(result)}**", ""]
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
    header = ["step", f"rate {unit}", "verdict", "achieved req/s", *(f"{P95} {c}" for c in classes)]
    header += ["goodput req/s", "goodput", "prefix-cache hit", "wall s"]
    lines += ["", _row(header), "|---" * len(header) + "|"]
    for i, s in enumerate(result.steps, 1):
        pooled = f" (+{s.pooled_runs} earlier runs)" if s.pooled_runs else ""
        verdict = s.verdict + decision_note(s) + stop_note(s) + (" (retried)" if s.attempts > 1 else "") + pooled
        ttfts = [_fmt(s.ttft_p95_ms.get(c)) for c in classes]
        server = _fmt(s.server.get("prefix_cache_hit_rate"), 3)
        cells = [str(i), f"{s.rate_rps:g}", verdict, _fmt(s.achieved_rps, 2), *ttfts, _fmt(s.goodput_rps, 2)]
        lines.append(_row([*cells, _fmt(s.goodput_fraction, 3), server, f"{s.wall_s:.0f}"]))
    offered = "new conversations offered" if unit == "conv/s" else "rates offered"
    lines += ["", f"{HEADLINE.title} in ms, nearest-rank p95 per class; {offered} open loop (all users together)."]
    lines.append(
        "The interval's ends are the highest step decided pass and the lowest decided fail by the anytime-valid "
        "bounds; an (undecided) step was within noise of a target and bounds nothing, nor does a (probe): a short "
        "step on the way up that only says which way the knee is."
    )
    return "\n".join(lines) + "\n"


def plot_capacity(result: CapacityResult, out: Path, title: str = "") -> Path | None:
    """p95 TTFT per class against the offered rate (log scale), the targets dashed, goodput on a
    second axis; failing steps as crosses; probes left out. None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = result.latest_steps
    fig, ax = plt.subplots(figsize=(8, 4.5))
    classes = list(dict.fromkeys(cls for s in steps for cls in s.ttft_p95_ms))
    for cls in classes:
        points = [(s.rate_rps, s.ttft_p95_ms.get(cls), s.verdict) for s in steps if s.ttft_p95_ms.get(cls)]
        if not points:
            continue
        (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"{P95} {cls}")
        failing = [p for p in points if p[2] == Verdict.FAIL]
        ax.scatter([p[0] for p in failing], [p[1] for p in failing], marker="x", s=80, color=line.get_color())
        target = result.ttft_targets_ms.get(cls)
        if target is not None:
            ax.axhline(target, color=line.get_color(), linestyle="--", linewidth=0.8)
    low, high = result.interval_rps
    if low is not None and high is not None:
        ax.axvspan(low, high, color="green", alpha=0.12, label=headline(result))
    if result.capacity_rps is not None:
        ax.axvline(
            result.capacity_rps,
            color="green",
            linewidth=0.8,
            label=f"capacity {result.capacity_rps:.3g} {result.rate_unit}",
        )
    ax.set_xlabel(f"offered rate ({result.rate_unit})")
    ax.set_ylabel(f"{P95} (ms, log scale); dashed: target")
    if ax.has_data():  # no step measured a TTFT (every request failed): nothing to scale
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    goodput = [(s.rate_rps, s.goodput_rps) for s in steps if s.goodput_rps is not None]
    if goodput:
        ax2 = ax.twinx()
        ax2.plot([g[0] for g in goodput], [g[1] for g in goodput], color="grey", marker="s", label="goodput")
        ax2.set_ylabel("goodput (req/s)")
        ax2.legend(loc="lower right")
    if ax.get_legend_handles_labels()[0]:
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
    return f"{step.rate_rps:g} {step.rate_unit}: {step.verdict}{decision_note(step)}{stop_note(step)}; {P95} ms {ttft}"


def decision_note(step: Step) -> str:
    """A step that bounds nothing: a probe on the way up, or one the bounds left undecided."""
    return " (probe)" if step.probe else " (undecided)" if step.decision == UNDECIDED else ""


def stop_note(step: Step) -> str:
    """How a step ended before its time: aborted on a breach, or decided early."""
    if step.aborted:
        return " (aborted)"
    return f" (decided at {step.decided_after_s:.0f} s)" if step.decided_after_s is not None else ""


# A profile's search: its result, or the error that ended it (with the steps judged before, `partial`).
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
