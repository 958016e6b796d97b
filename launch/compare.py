"""Before/after comparison of deployment profiles under the same workload.

For each profile: launch it, run the same Locust workload (same seed, so the same prompts),
collect its report, stop it. Then write `comparison.md` (per class and, for conversations, per
first turn and follow-up: the latency percentiles the registry's `compare` fields name, TTFT and
TPOT, throughput, SLO verdict, the headline metric's p95 against the first profile's),
`comparison.json`, `comparison.html` (every run's figures and charts side by side,
self-contained) and `ttft.png` (the headline metric's, TTFT's, percentile curves per profile and
class, from the reports' histograms).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slogate.slo.gate.latency_metrics import COMPARE_COLUMNS, HEADLINE
from slogate.slo.gate.record import ALL, FIRST_TURN, FOLLOW_UP, PREFIX_CLASSES
from slogate.slo.gate.report import Report
from slogate.slo.gate.verdict import Outcome
from slogate.slo.outputs.html import write_html
from slogate.slo.outputs.html_run import percent

CLASSES = (*PREFIX_CLASSES, FIRST_TURN, FOLLOW_UP, ALL)  # the tags compared; conversation ones where measured


def column(metric: str, percentile: int) -> str:
    """A row's key for a latency percentile: `ttft_p95`."""
    return f"{metric}_p{percentile}"


RATIO = f"{column(HEADLINE.name, 95)}_vs_first"  # the row's key for the headline p95 against the first profile's


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def comparison_rows(reports: dict[str, Report]) -> list[dict[str, Any]]:
    rows = []
    summaries = {profile: report.metrics_summary() for profile, report in reports.items()}
    first = next(iter(reports))
    headline = f"{HEADLINE.name}_ms"
    for profile, report in reports.items():
        for cls in CLASSES:
            m = summaries[profile].get(cls)
            if not m:
                continue
            base = summaries[first].get(cls, {})
            rows.append(
                {
                    "profile": profile,
                    "class": cls,
                    "requests": m["requests"],
                    **{column(metric.name, p): m[f"{metric.name}_ms"][f"p{p}"] for metric, p in COMPARE_COLUMNS},
                    "output_tokens_per_s": m["output_tokens_per_s"],
                    "prompt_cache_hit_rate": m.get("prompt_cache_hit_rate"),
                    "verdict": str(report.verdict),
                    RATIO: _ratio(m[headline]["p95"], base.get(headline, {}).get("p95")),
                }
            )
    return rows


def render_markdown(reports: dict[str, Report]) -> str:
    header = ["profile", "class", "requests", *(f"{m.title} p{p}" for m, p in COMPARE_COLUMNS), "out tok/s"]
    header += ["cached", f"{HEADLINE.title} p95 vs first", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for r in comparison_rows(reports):
        tps = "-" if r["output_tokens_per_s"] is None else f"{r['output_tokens_per_s']:.1f}"
        latency = [_ms(r[column(m.name, p)]) for m, p in COMPARE_COLUMNS]
        cells = [r["profile"], r["class"], str(r["requests"]), *latency, tps, percent(r["prompt_cache_hit_rate"])]
        lines.append("| " + " | ".join([*cells, r[RATIO], r["verdict"]]) + " |")
    lines.append("")
    lines.append(
        "Latencies in ms; same workload and seed for every profile. Cached: the share of the prompt tokens "
        "the server reported as cached (`usage.prompt_tokens_details.cached_tokens`)."
    )
    for profile, report in reports.items():
        hit_rate = report.server.prefix_cache_hit_rate if report.server is not None else None
        if hit_rate is not None:
            lines.append(f"- {profile}: server prefix-cache hit rate (/metrics) {hit_rate:.3f}")
    for profile, report in reports.items():
        failing = [r.objective.name for r in report.slos if r.result == Outcome.FAIL]
        if failing:
            lines.append(f"- {profile}: failed {', '.join(failing)}")
    return "\n".join(lines) + "\n"


def plot_by_class(
    out: Path, draw: Callable[[Any, str], None], title: str, xlabel: str, ylabel: str, target_ms: float | None = 200.0
) -> Path | None:
    """One panel per prefix class (shared, unique) on a shared log-scale latency axis, with the
    target (if any) as a dashed line; `draw(ax, cls)` plots the lines. None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, cls in zip(axes, PREFIX_CLASSES, strict=True):
        draw(ax, cls)
        if target_ms is not None:
            ax.axhline(target_ms, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{title}, {cls} prefixes")
        ax.set_xlabel(xlabel)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a class the workload did not send has no lines
            ax.legend()
    target = f"; dashed: {target_ms:g} ms" if target_ms is not None else ""
    axes[0].set_ylabel(f"{ylabel} (ms, log scale){target}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_ttft(reports: dict[str, Report], out: Path) -> Path | None:
    """Percentile curves of the headline metric (TTFT) per profile and class, from the reports' histograms."""
    percentiles = [p / 10 for p in range(1, 1000)]

    def draw(ax: Any, cls: str) -> None:
        for profile, report in reports.items():
            h = report.measurements.get(cls).latency[HEADLINE.name]
            if h.count:
                ax.plot(percentiles, [h.percentile_ms(p) for p in percentiles], label=profile)

    return plot_by_class(out, draw, HEADLINE.title, "percentile", HEADLINE.title)


def write_comparison(reports: dict[str, Report], out_dir: Path) -> dict[str, Path | None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "comparison.md"
    md.write_text(render_markdown(reports))
    js = out_dir / "comparison.json"
    js.write_text(json.dumps({"profiles": list(reports), "rows": comparison_rows(reports)}, indent=2) + "\n")
    html = write_html(reports, out_dir / "comparison.html", "slogate compare: " + " vs ".join(reports))
    return {"markdown": md, "json": js, "html": html, "png": plot_ttft(reports, out_dir / "ttft.png")}


def run_comparison(
    profiles: list[str], out_dir: Path, run_one: Callable[[str, Path], Report]
) -> dict[str, Path | None]:
    """`run_one(profile, report_dir)` launches, loads and stops one profile and returns its report."""
    reports = {name: run_one(name, out_dir / name) for name in profiles}
    return write_comparison(reports, out_dir)
