"""`slo-report.html`: one self-contained page per run (or per comparison of runs).

Every script and style is inline (uPlot, vendored in slo/outputs/assets/, and slogate's chart code), and
a Content-Security-Policy forbids the page any request: it opens offline, from a CI artifact or
an e-mail, and looks the same in ten years. It shows the verdict and the SLO table (observed vs
target, coloured; a goodput objective's target with its per-request limits), goodput per class,
TTFT p50/p95 over time per request class with the SLO targets, requests and
errors per second by kind over time, percentile curves (HdrHistogram style, log x axis) of TTFT,
ITL and E2E per class, the server's figures over time (KV-cache usage, requests waiting and
running, prefix-cache hit rate; a trace replay's implied hit rate next to the measured one), the
self-check, the workload and the exact command.

The figures come from the report alone (its measurements, interval histograms included, and its
server series), so `slogate judge` on a saved report draws the same page. Size: the page carries
per-interval percentiles, not histograms; a one-hour run (720 intervals of 5 s, 3 classes, a
scrape every 2 s) is about 0.35 MB (tests/outputs/test_html_report.py measures it).

`write_html(reports, path)` takes one `Report` or several (`{name: Report}`, e.g. the profiles
of `slogate compare`): several reports get a comparison table and overlaid charts first, then
each run's section.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from slogate.slo.gate.latency_metrics import COMPARE_COLUMNS, HEADLINE, INTERVAL_METRICS
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import Report
from slogate.slo.outputs.charts import chart_data, charted_classes, percentile_grid
from slogate.slo.outputs.files import write_atomically
from slogate.slo.outputs.html_run import chart, num, run_section, verdict_badge

HTML_NAME = "slo-report.html"
ASSETS = Path(__file__).resolve().parent / "assets"
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"


@cache
def asset(name: str) -> str:
    return (ASSETS / name).read_text(encoding="utf-8")


def _finite(obj: Any) -> Any:
    """JSON-safe: NaN and infinities become None (JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def script_json(obj: Any) -> str:
    """JSON to embed in a <script> element: `</` and `<!--` cannot end or confuse it."""
    text = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


e = html.escape


def comparison_section(reports: list[tuple[str, Report]]) -> str:
    first = reports[0][1].metrics_summary()
    headline = f"{HEADLINE.name}_ms"
    rows = []
    for name, report in reports:
        for cls, m in report.metrics_summary().items():
            base = (first.get(cls) or {}).get(headline, {}).get("p95")
            p95 = m[headline]["p95"]
            ratio = f"{p95 / base:.2f}x" if p95 is not None and base else "-"
            latency = "".join(
                f"<td class=num>{num(m[f'{metric.name}_ms'][f'p{p}'])}</td>" for metric, p in COMPARE_COLUMNS
            )
            rows.append(
                f"<tr><td>{e(name)}</td><td>{e(cls)}</td><td class=num>{num(m['requests'])}</td>{latency}"
                f"<td class=num>{num(m['output_tokens_per_s'])}</td><td class=num>{ratio}</td>"
                f"<td>{verdict_badge(report) if cls == ALL else ''}</td></tr>"
            )
    classes: list[str] = []
    for _, report in reports:
        for cls in charted_classes(report.measurements):
            if cls not in classes:
                classes.append(cls)
    title, metric = HEADLINE.title, HEADLINE.name
    overlays = "".join(
        chart("overlay-time", -1, f"{title} p95 over time, {cls}: one line per run", cls=cls, metric=metric)
        + chart(
            "overlay-percentiles", -1, f"{title} percentile curves, {cls}: one line per run", cls=cls, metric=metric
        )
        for cls in classes
    )
    columns = "".join(f"<th>{e(m.title)} p{p}</th>" for m, p in COMPARE_COLUMNS)
    columns += f"<th>out tok/s</th><th>{e(title)} p95 vs first</th>"
    return f"""
<section class="comparison">
<h2>Comparison ({len(reports)} runs, same workload; ratios against {e(reports[0][0])})</h2>
<table><thead><tr><th>run</th><th>class</th><th>requests</th>{columns}<th>verdict</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<div class="charts">{overlays}</div>
</section>"""


def _as_list(reports: Report | Mapping[str, Report] | list[tuple[str, Report]]) -> list[tuple[str, Report]]:
    if isinstance(reports, Report):
        return [("", reports)]
    if isinstance(reports, Mapping):
        return list(reports.items())
    return list(reports)


def render_html(reports: Report | Mapping[str, Report] | list[tuple[str, Report]], title: str | None = None) -> str:
    """The page for one report, or for several (a comparison; names as keys)."""
    runs = _as_list(reports)
    if not runs:
        raise ValueError("render_html: no report")
    grids = {m: percentile_grid(max(_sample_count(r, m) for _, r in runs)) for m in INTERVAL_METRICS}
    data = [chart_data(r, grids) for _, r in runs]
    several = len(runs) > 1
    first = runs[0][1]
    if title is None:
        title = f"slogate: {first.verdict.upper()} (exit {first.exit_code})" if not several else "slogate comparison"
    target = first.run.target or ""
    subtitle = (
        f"{e(target)} &middot; model {e(first.run.model or '?')} &middot; {e(first.run.started_at or '')}"
        if not several
        else " &middot; ".join(f"{e(n)} {verdict_badge(r)}" for n, r in runs)
    )
    headline = "" if several else f"<p>{verdict_badge(first)}</p>"
    body = comparison_section(runs) if several else ""
    body += "".join(
        run_section(i, n if several else None, r, d) for i, ((n, r), d) in enumerate(zip(runs, data, strict=True))
    )
    payload = {"grids": grids, "names": [n for n, _ in runs], "runs": data}
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="slogate">
<link rel="icon" href="data:,">
<title>{e(title)}</title>
<style>{asset("uPlot.min.css")}</style>
<style>{asset("report.css")}</style>
</head>
<body>
<header class="top"><h1>{e(title)}</h1><div class="muted">{subtitle}</div>{headline}</header>
<main>
{body}
<footer>Written by slogate from the run's measurements (HdrHistograms per request class, per-interval
histograms also in slo-intervals.hlog). Charts by uPlot (MIT), inline: this page makes no network request.</footer>
</main>
<script id="slogate-data" type="application/json">{script_json(payload)}</script>
<script>{asset("uPlot.iife.min.js")}</script>
<script>{asset("slogate-charts.js")}</script>
<script>{asset("report-boot.js")}</script>
</body>
</html>
"""


def write_html(
    reports: Report | Mapping[str, Report] | list[tuple[str, Report]], path: str | Path, title: str | None = None
) -> Path:
    """Write the page; `slogate compare` (and `capacity`) call it with `{profile: Report}`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(p, render_html(reports, title))
    return p


def _sample_count(report: Report, metric: str) -> int:
    """The most samples a curve of this run's charts has: its own, or its baseline's."""
    counts = [report.measurements.get(ALL).latency[metric].count]
    if report.baseline_measurements is not None:
        counts.append(report.baseline_measurements.get(ALL).latency[metric].count)
    return max(counts)
