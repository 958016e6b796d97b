"""The GPU sweep's report: `RESULTS.md`, `results.json`, `ttft_vs_rate.png` and the archive, rebuilt
from every profile's `sweep.json` under `--out` (so profiles measured in separate commands end up in one
report). `sweep.py` measures; this module only reads what it kept and writes."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from slogate.launch.compare import plot_by_class, write_comparison
from slogate.slo.gate.report import Report


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:g} req/s"


def load_sweeps(out: Path) -> dict[str, dict[str, Any]]:
    found = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/sweep.json"))}
    return dict(sorted(found.items(), key=lambda kv: kv[1].get("started_at", 0)))


def _table_head(load: str) -> list[str]:
    cells = ["profile", load, "requests", "TTFT p50 shared / unique", "TTFT p95 shared / unique", "TTFT p95 all",
             "TPOT p50", "out tok/s", "prefix-cache hits", "verdict"]  # fmt: skip
    return ["| " + " | ".join(cells) + " |", "|---" * len(cells) + "|"]


def render(sweeps: dict[str, dict[str, Any]]) -> str:
    lines = ["## Open-loop sweep (Poisson arrivals, latency from the scheduled send)", "", *_table_head("rate (req/s)")]
    for name, s in sweeps.items():
        for run in sorted((r for r in s["runs"] if r["rate"] is not None), key=lambda r: r["rate"]):
            lines.append(_row(name, f"{run['rate']:g}", run))
    lines += ["", "## Closed loop (N users, each waits for its answer)", "", *_table_head("users")]
    for name, s in sweeps.items():
        for run in (r for r in s["runs"] if r["kind"] == "closed"):
            lines.append(_row(name, str(run["users"]), run))
    lines += ["", "## Capacity: the highest open-loop rate with every SLO met (`slogate capacity`'s search)", ""]
    lines += ["| profile | capacity | first failing | steps | decided | server | healthy after |", "|---" * 7 + "|"]
    for name, s in sweeps.items():
        c = s.get("capacity") or {}
        cap = "not searched" if not c else c.get("error") or f"**{_rate(c['capacity_rps'])}**"
        server = f"vLLM {s.get('vllm_version')} | {s.get('healthy_after_s')} s"
        steps = f"{c.get('steps_run', '-')} | {c.get('decided', '-')}"
        lines.append(f"| {name} | {cap} | {_rate(c.get('first_failing_rps'))} | {steps} | {server} |")
    checks = [(name, s["cross_check"]) for name, s in sweeps.items() if s.get("cross_check")]
    for name, c in checks:
        lines += ["", f"## Cross-check on {name} at {c['rate']:g} req/s: slogate vs `vllm bench serve`", ""]
        lines += ["| client | requests | TTFT p50 | TTFT p95 | TTFT p99 | TPOT p50 | out tok/s |", "|---" * 7 + "|"]
        clients = (("slogate ChatStreamUser", c.get("slogate")), ("vllm bench serve", c.get("vllm_bench_serve")))
        for client, m in clients:
            if m:
                t = m["ttft_ms"]
                tps = m.get("output_tokens_per_s")
                lines.append(
                    f"| {client} | {m.get('requests')} | {_ms(t['p50'])} | {_ms(t['p95'])} | {_ms(t['p99'])} "
                    f"| {_ms(m.get('tpot_p50_ms'))} | {'-' if tps is None else f'{tps:,.0f}'} |"
                )
    lines += ["", "Latencies in ms. Every run's slo-report.json is in this archive under <profile>/<run>/."]
    return "\n".join(lines) + "\n"


def _row(name: str, load: str, run: dict[str, Any]) -> str:
    s = run["summary"]
    if not s or "all" not in s:
        return f"| {name} | {load} | no report | | | | | | | |"
    sh, un, al = s.get("shared"), s.get("unique"), s["all"]

    def pair(p: str) -> str:
        return f"{_ms(sh['ttft_ms'][p]) if sh else '-'} / {_ms(un['ttft_ms'][p]) if un else '-'}"

    hits = s.get("prefix_cache_hit_rate")
    tps = al["output_tokens_per_s"]
    lost = al["failures"] + al["dropped"]
    verdict = s["verdict"] + (f" ({lost} failed/dropped)" if lost else "")
    verdict += " (client saturated)" if s["saturated"] else ""
    return (
        f"| {name} | {load} | {al['requests']} | {pair('p50')} | {pair('p95')} | {_ms(al['ttft_ms']['p95'])} "
        f"| {_ms(al['tpot_p50_ms'])} | {'-' if tps is None else f'{tps:,.0f}'} "
        f"| {'-' if hits is None else f'{hits:.2f}'} | {verdict} |"
    )


def plot(sweeps: dict[str, dict[str, Any]], target_ms: float | None, out: Path) -> Path | None:
    """p95 TTFT against the offered rate, per profile and class, with the target line."""

    def draw(ax: Any, cls: str) -> None:
        for name, s in sweeps.items():
            points = sorted(
                (r["rate"], r["summary"][cls]["ttft_ms"]["p95"])
                for r in s["runs"]
                if r["rate"] is not None and r["summary"] and cls in r["summary"]
            )
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=name)

    return plot_by_class(out, draw, "p95 TTFT", "offered load (requests/s, Poisson)", "p95 TTFT", target_ms)


def write_report(out: Path, target_ms: float | None, compare_rate: float | None) -> Path:
    sweeps = load_sweeps(out)
    (out / "results.json").write_text(json.dumps(sweeps, indent=2) + "\n")
    text = render(sweeps)
    if compare_rate is not None:
        reports = {}
        for name in sweeps:
            path = out / name / f"sweep-{compare_rate:g}" / "slo-report.json"
            if path.exists():
                reports[name] = Report.from_json(json.loads(path.read_text()), str(path))
        if len(reports) > 1:
            write_comparison(reports, out / "compare")
            table = (out / "compare" / "comparison.md").read_text()
            text += f"\n## Per-profile comparison at {compare_rate:g} req/s\n\n{table}"
    (out / "RESULTS.md").write_text(text)
    plot(sweeps, target_ms, out / "ttft_vs_rate.png")
    archive = out.with_suffix(".tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(out, arcname=out.name)
    return archive
