"""`slo-report.html`: one self-contained page per run (or per comparison of runs).

Every script and style is inline (uPlot, vendored in slo/assets/, and slogate's chart code), and
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
scrape every 2 s) is about 0.35 MB (tests/test_html_report.py measures it).

`write_html(reports, path)` takes one `Report` or several (`{name: Report}`, e.g. the profiles
of `slogate compare`): several reports get a comparison table and overlaid charts first, then
each run's section.
"""

from __future__ import annotations

import calendar
import html
import json
import math
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from slogate.slo.histogram import LatencyHistogram
from slogate.slo.intervals import INTERVAL_METRICS
from slogate.slo.metrics import MetricsStore
from slogate.slo.record import ALL
from slogate.slo.report import Report, describe_targets, goodput_summary, trace_cache_comparison
from slogate.slo.self_check import summary as self_check_summary
from slogate.slo.spec import Objective, SloSpec
from slogate.slo.verdict import Outcome, Verdict

HTML_NAME = "slo-report.html"
ASSETS = Path(__file__).resolve().parent / "assets"
POINTS_PER_DECADE = 20
MAX_CURVE_X = 1e6  # percentile curves reach 99.9999% at most
CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
VERDICT_COLORS = {
    Verdict.PASS: "#1a7f37",
    Verdict.FAIL: "#cf222e",
    Verdict.INCONCLUSIVE: "#9a6700",
    Verdict.ERROR: "#8250df",
    Verdict.UNGATED: "#57606a",
}
RESULT_CLASSES = {Outcome.PASS: "pass", Outcome.FAIL: "fail", Outcome.INSUFFICIENT: "insufficient"}
METRIC_TITLES = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}


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


def epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return float(calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def targets(objectives: list[Objective] | tuple[Objective, ...]) -> list[dict[str, Any]]:
    """The latency objectives as chart lines: one per objective with a `max_ms`."""
    return [
        {
            "name": o.name,
            "metric": o.metric,
            "class": o.request_class,
            "percentile": o.percentile,
            "max_ms": o.max,
            "label": o.describe(),
        }
        for o in objectives
        if o.is_latency and o.max is not None
    ]


def percentile_grid(max_count: int) -> list[float]:
    """x = 1 / (1 - q), POINTS_PER_DECADE per decade from 1 (q = 0) to the first point past
    `max_count` samples (where the curves end at their maximum), at most MAX_CURVE_X."""
    top = min(max(max_count, 1), MAX_CURVE_X)
    steps = math.ceil(POINTS_PER_DECADE * math.log10(top) + 1e-9) + 1
    return [float(f"{10 ** (k / POINTS_PER_DECADE):.4g}") for k in range(steps + 1)]


def curve(h: LatencyHistogram, grid: list[float]) -> list[float | None]:
    """The histogram's percentile curve on `grid`: nearest-rank values where x <= samples, the
    maximum at the first point beyond, then nothing."""
    n = h.count
    out: list[float | None] = [None] * len(grid)
    if not n:
        return out
    inside = [i for i, x in enumerate(grid) if x <= n]
    qs = [max(100.0 * (1 - 1 / grid[i]), 1e-9) for i in inside]
    values = h.percentiles_ms(qs) or []
    for i, v in zip(inside, values, strict=True):
        out[i] = round(v, 3)
    beyond = len(inside)
    if beyond < len(grid):
        out[beyond] = round(h.max_ms() or 0.0, 3)
    return out


def charted_classes(store: MetricsStore) -> list[str]:
    """The lines of the charts: `all` and the request classes, as the time series keeps them.
    Conversation tags (`follow_up`, `turn_3`, ...) cut across the classes: they are in the tables,
    where they read well, not drawn over the class lines."""
    return [ALL, *sorted(store.classes)]


def chart_data(report: Report, grids: dict[str, list[float]]) -> dict[str, Any]:
    """What the charts of one run draw (see slo/assets/slogate-charts.js); `grids`: the
    percentile curves' x points per metric (shared by every run of the page)."""
    store = report.measurements
    series = store.intervals.series() if not store.intervals.is_empty else None
    origin = epoch(report.run.started_at)
    if origin is None and series and series["t"]:
        origin = series["t"][0]
    server = report.server or {}
    classes = charted_classes(store)
    curves = {
        metric: {cls: curve(store.get(cls).latency[metric], grids[metric]) for cls in classes}
        for metric in INTERVAL_METRICS
    }
    return {
        "origin": origin,
        "series": series,
        "targets": targets([r.objective for r in report.slos]),
        "curves": curves,
        "classes": classes,
        "server": server.get("series") if server.get("available") else None,
    }


def live_chart_data(store: MetricsStore, spec: SloSpec | None, started_at: float | None) -> dict[str, Any]:
    """The web UI tab's live chart (`/slo/series`): the time series so far and the SLO targets;
    nothing else (no host, no option), so nothing secret."""
    series = store.intervals.series() if not store.intervals.is_empty else None
    return {
        "origin": started_at if started_at is not None else (series["t"][0] if series and series["t"] else None),
        "series": series,
        "targets": targets(spec.objectives) if spec is not None else [],
        "interval_s": store.intervals.interval_s,
    }


# -- HTML -------------------------------------------------------------------------------------------

e = html.escape


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else e(str(value))


def percent(fraction: float | None) -> str:
    """A share as a percentage with one decimal; "-" when unknown."""
    return "-" if fraction is None else f"{100 * fraction:.1f}%"


def _observed(observed: float | None, o: Objective) -> str:
    if observed is None:
        return "no data"
    return f"{observed:,.1f} ms" if o.is_latency else f"{observed:.4g}"


def _target(o: Objective) -> str:
    unit = " ms" if o.is_latency else ""
    parts = [f"&le; {o.max:g}{unit}"] if o.max is not None else []
    if o.min is not None:
        parts.append(f"&ge; {o.min:g}{unit}")
    limits = f" of requests with {e(o.describe_limits())}" if o.limits_ms else ""  # goodput
    return " and ".join(parts) + limits


def _verdict_badge(report: Report) -> str:
    color = VERDICT_COLORS.get(report.verdict, "#57606a")
    return (
        f'<span class="verdict" data-verdict="{e(str(report.verdict))}" style="background:{color}">'
        f'{e(report.verdict.upper())}</span> <span class="exit">exit {report.exit_code}</span>'
    )


def _slo_table(report: Report) -> str:
    if not report.slos:
        return '<p class="muted">No SLO file: measured, not gated.</p>'
    rows = []
    for r in report.slos:
        o = r.objective
        css = RESULT_CLASSES.get(r.result, "")
        rows.append(
            f'<tr class="{css}"><td class="slo-name">{e(o.name)}</td><td>{e(o.describe())}</td>'
            f'<td class="observed {css}">{e(_observed(r.observed, o))}</td><td>{_target(o)}</td>'
            f'<td class="num">{r.samples:,}</td><td class="result {css}">{e(str(r.result))}</td></tr>'
        )
    return (
        '<table class="slos"><thead><tr><th>SLO</th><th>objective</th><th>observed</th><th>target</th>'
        "<th>samples</th><th>result</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _regression_table(report: Report) -> str:
    reg = report.regression
    if reg is None:
        return ""
    if not reg.comparisons:
        reason = f": {e(reg.refused_reason)}" if reg.refused_reason else ""
        return f"<h3>Regression check</h3><p>{e(str(reg.status))}{reason}</p>"
    rows = []
    for c in reg.comparisons:
        interval = f"{c.interval_pct[0]:+.1f}..{c.interval_pct[1]:+.1f}%" if c.interval_pct else "-"
        change = "-" if c.change_pct is None else f"{c.change_pct:+.1f}%"
        css = "fail" if str(c.status) == "regression" else ("pass" if str(c.status) == "ok" else "insufficient")
        rows.append(
            f'<tr><td>{e(c.rule.name)}</td><td class="num">{_num(c.baseline_ms)} ms</td>'
            f'<td class="num">{_num(c.current_ms)} ms</td><td class="num">{change}</td><td>{interval}</td>'
            f'<td>+{c.rule.max_increase_pct:g}%</td><td class="result {css}">{e(str(c.status))}</td></tr>'
        )
    return (
        f"<h3>Regression check against the baseline ({e(str(reg.status))})</h3>"
        "<table><thead><tr><th>rule</th><th>baseline</th><th>current</th><th>change</th><th>95% interval</th>"
        "<th>tolerance</th><th>verdict</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _metrics_table(report: Report) -> str:
    metrics = report.metrics_summary()
    if not metrics:
        return '<p class="muted">No requests were measured.</p>'
    rows = []
    for cls, m in metrics.items():
        rows.append(
            f"<tr><td>{e(cls)}</td><td class=num>{_num(m['requests'])}</td><td class=num>{_num(m['failures'])}</td>"
            f"<td class=num>{_num(m['ttft_ms']['p50'])}</td><td class=num>{_num(m['ttft_ms']['p95'])}</td>"
            f"<td class=num>{_num(m['ttft_ms']['p99'])}</td><td class=num>{_num(m['itl_ms']['p50'])}</td>"
            f"<td class=num>{_num(m['tpot_ms']['p50'])}</td><td class=num>{_num(m['e2e_ms']['p95'])}</td>"
            f"<td class=num>{_num(m['output_tokens_per_s'])}</td><td class=num>{_num(m['requests_per_s'], 2)}</td>"
            f"<td class=num>{_num(m['mean_prompt_tokens'])}</td>"
            f"<td class=num>{percent(m['prompt_cache_hit_rate'])}</td></tr>"
        )
    total = metrics.get(ALL, {})
    errors = total.get("errors_by_kind") or {}
    foot = ""
    if errors:
        foot = "<p>Failures by kind: " + ", ".join(f"{e(k)} {v:,}" for k, v in errors.items()) + ".</p>"
    return (
        "<table><thead><tr><th>class</th><th>requests</th><th>failed</th><th>TTFT p50</th><th>TTFT p95</th>"
        "<th>TTFT p99</th><th>ITL p50</th><th>TPOT p50</th><th>E2E p95</th><th>out tok/s</th><th>req/s</th>"
        "<th>prompt tok</th><th>cached</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        '<p class="muted">Latencies in ms: HdrHistograms (3 significant digits), nearest-rank percentiles. '
        "Prompt tok: mean prompt tokens; cached: the share the server reported as cached "
        "(<code>usage.prompt_tokens_details.cached_tokens</code>).</p>" + foot
    )


def _goodput_table(report: Report) -> str:
    """Goodput per class (requests that met every per-request limit), when the run counted it."""
    goodput = goodput_summary(report.measurements)
    if goodput["targets_ms"] is None or report.measurements.is_empty:
        return ""
    rows = "".join(
        f"<tr><td>{e(cls)}</td><td class=num>{_num(g['good'])}</td><td class=num>{_num(g['requests'])}</td>"
        f"<td class=num>{percent(g['fraction'])}</td><td class=num>{_num(g['goodput_rps'], 2)}</td></tr>"
        for cls, g in goodput["classes"].items()
    )
    return (
        '<table class="goodput"><thead><tr><th>class</th><th>good</th><th>requests</th><th>goodput</th>'
        "<th>goodput req/s</th></tr></thead><tbody>" + rows + "</tbody></table>"
        f'<p class="muted">Goodput: requests that met every per-request limit '
        f"({e(describe_targets(goodput['targets_ms']))}).</p>"
    )


def _trace_facts(report: Report) -> str:
    text = trace_cache_comparison(report.run, report.server)
    return f'<p class="trace-cache">{e(text)}</p>' if text else ""


def _kv_table(items: list[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(_plain(v))}</td></tr>" for k, v in items if v not in (None, "", [], {}))
    return f'<table class="kv"><tbody>{rows}</tbody></table>'


def _plain(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True)
    return str(v)


def _flatten(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _self_check(report: Report) -> str:
    s = self_check_summary(report.measurements)
    loop, send = s["loop_lag_ms"], s["send_lag_ms"]
    items = [
        ("generator saturated", "yes: a fail it could explain is inconclusive" if report.saturated else "no"),
        ("event-loop lag p50 / p99 / max (ms)", _triple(loop)),
        ("send lag p50 / p99 / max (ms, open loop)", _triple(send) if send.get("count") else None),
        ("client CPU per process (cores)", s["client_cpu_per_process"]),
        ("max client lag allowed (ms)", report.run.max_client_lag_ms),
        ("Locust CPU warning", "yes" if report.run.cpu_warning else "no"),
        ("load processes", report.run.processes),
    ]
    return _kv_table(items)


def _triple(s: dict[str, Any]) -> str | None:
    if not s.get("count"):
        return None
    return f"{_num(s.get('p50'))} / {_num(s.get('p99'))} / {_num(s.get('max'))}"


def _run_facts(report: Report) -> str:
    run = report.run
    items = [
        ("target", run.target),
        ("model", run.model),
        ("measured by", run.source),
        ("started / ended (UTC)", f"{run.started_at or '?'} / {run.ended_at or '?'}"),
        ("duration (s)", run.duration_s),
        ("warm-up excluded (s)", run.warmup_s),
        ("warm-up requests excluded", report.measurements.warmup_excluded),
        (
            "mode",
            f"{run.mode}, {run.workers_complete} of {run.workers} workers complete"
            if run.mode == "master"
            else run.mode,
        ),
        ("users", run.users),
        ("SLO file", run.slo_file),
        ("time series interval (s)", report.measurements.intervals.interval_s or None),
        ("report generated", report.generated_at),
    ]
    return _kv_table(items)


def _server_facts(report: Report) -> str:
    server = report.server
    if not server:
        return '<p class="muted">The server\'s /metrics was not scraped.</p>'
    if not server.get("available"):
        return f'<p class="muted">Server figures unavailable: {e(str(server.get("error")))}.</p>'
    ttft = server.get("server_ttft_ms") or {}
    items = [
        ("scrapes", server.get("scrapes")),
        ("prefix-cache hit rate (over the run)", server.get("prefix_cache_hit_rate")),
        (
            "KV-cache usage peak / mean",
            f"{_num(server.get('kv_cache_usage_max'), 3)} / {_num(server.get('kv_cache_usage_mean'), 3)}",
        ),
        (
            "requests waiting peak / mean",
            f"{_num(server.get('num_requests_waiting_max'), 0)} / {_num(server.get('num_requests_waiting_mean'), 1)}",
        ),
        ("preemptions", server.get("preemptions")),
        (
            "server TTFT mean / p50 / p95 (ms)",
            f"{_num(ttft.get('mean'))} / {_num(ttft.get('p50'))} / {_num(ttft.get('p95'))}",
        ),
        ("client-server TTFT gap (ms)", server.get("client_server_ttft_gap_ms")),
    ]
    return _kv_table(items)


def _pair(server: dict[str, Any], name: str, digits: int) -> str:
    return f"{_num(server.get(f'{name}_max'), digits)} / {_num(server.get(f'{name}_mean'), digits)}"


def _chart(kind: str, run: int, title: str, **attrs: str) -> str:
    extra = "".join(f' data-{k}="{e(v)}"' for k, v in attrs.items())
    return (
        f"<figure><figcaption>{e(title)}</figcaption>"
        f'<div class="chart" data-chart="{kind}" data-run="{run}"{extra}></div></figure>'
    )


def _run_section(i: int, name: str | None, report: Report, data: dict[str, Any]) -> str:
    run = report.run
    heading = f"<h2>{e(name)} {_verdict_badge(report)}</h2>" if name else ""
    reasons = "".join(f"<li>{e(r)}</li>" for r in report.reasons)
    notes = "".join(f"<li>Note: {e(n)}</li>" for n in run.notes)
    interval = report.measurements.intervals.interval_s
    per = f"per {interval:g} s interval" if interval else "per interval"
    ttft_title = f"TTFT p50 (dashed) and p95 over time, {per}, per class; SLO targets as long dashes"
    charts = [
        _chart("latency-time", i, ttft_title, metric="ttft"),
        _chart("rate-time", i, f"Requests and errors by kind per second, {per}"),
        *(
            _chart("percentiles", i, f"{METRIC_TITLES[m]} percentile curves per class (log scales)", metric=m)
            for m in INTERVAL_METRICS
        ),
        _chart(
            "server-time",
            i,
            "Server over time (/metrics): KV-cache usage, prefix-cache hit rate, requests waiting/running",
        ),
    ]
    if data["series"] is None:
        charts.insert(0, '<p class="muted">No time series in these measurements (no interval histograms).</p>')
    command = run.command or "(not recorded)"
    workload = _flatten(run.workload) if run.workload else []
    return f"""
<section class="run" id="run-{i}">
{heading}
<ul class="reasons">{reasons}{notes}</ul>
<h3>SLOs</h3>
{_slo_table(report)}
{_regression_table(report)}
<h3>Measured (per request class)</h3>
{_metrics_table(report)}
{_goodput_table(report)}
<h3>Over time and in distribution</h3>
<div class="charts">{"".join(charts)}</div>
<div class="cols">
<div><h3>Server (/metrics)</h3>{_server_facts(report)}{_trace_facts(report)}</div>
<div><h3>Self-check of the load generator</h3>{_self_check(report)}</div>
</div>
<div class="cols">
<div><h3>Run</h3>{_run_facts(report)}</div>
<div><h3>Workload</h3>{_kv_table(workload) if workload else '<p class="muted">not recorded</p>'}</div>
</div>
<h3>Command</h3>
<pre class="command">{e(command)}</pre>
</section>"""


def _comparison(reports: list[tuple[str, Report]]) -> str:
    first = reports[0][1].metrics_summary()
    rows = []
    for name, report in reports:
        for cls, m in report.metrics_summary().items():
            base = (first.get(cls) or {}).get("ttft_ms", {}).get("p95")
            p95 = m["ttft_ms"]["p95"]
            ratio = f"{p95 / base:.2f}x" if p95 is not None and base else "-"
            rows.append(
                f"<tr><td>{e(name)}</td><td>{e(cls)}</td><td class=num>{_num(m['requests'])}</td>"
                f"<td class=num>{_num(m['ttft_ms']['p50'])}</td><td class=num>{_num(p95)}</td>"
                f"<td class=num>{_num(m['ttft_ms']['p99'])}</td><td class=num>{_num(m['tpot_ms']['p50'])}</td>"
                f"<td class=num>{_num(m['output_tokens_per_s'])}</td><td class=num>{ratio}</td>"
                f"<td>{_verdict_badge(report) if cls == ALL else ''}</td></tr>"
            )
    classes: list[str] = []
    for _, report in reports:
        for cls in charted_classes(report.measurements):
            if cls not in classes:
                classes.append(cls)
    overlays = "".join(
        _chart("overlay-time", -1, f"TTFT p95 over time, {cls}: one line per run", cls=cls, metric="ttft")
        + _chart("overlay-percentiles", -1, f"TTFT percentile curves, {cls}: one line per run", cls=cls, metric="ttft")
        for cls in classes
    )
    return f"""
<section class="comparison">
<h2>Comparison ({len(reports)} runs, same workload; ratios against {e(reports[0][0])})</h2>
<table><thead><tr><th>run</th><th>class</th><th>requests</th><th>TTFT p50</th><th>TTFT p95</th><th>TTFT p99</th>
<th>TPOT p50</th><th>out tok/s</th><th>TTFT p95 vs first</th><th>verdict</th></tr></thead>
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
    grids = {
        m: percentile_grid(max(r.measurements.get(ALL).latency[m].count for _, r in runs)) for m in INTERVAL_METRICS
    }
    data = [chart_data(r, grids) for _, r in runs]
    several = len(runs) > 1
    first = runs[0][1]
    if title is None:
        title = f"slogate: {first.verdict.upper()} (exit {first.exit_code})" if not several else "slogate comparison"
    target = first.run.target or ""
    subtitle = (
        f"{e(target)} &middot; model {e(first.run.model or '?')} &middot; {e(first.run.started_at or '')}"
        if not several
        else " &middot; ".join(f"{e(n)} {_verdict_badge(r)}" for n, r in runs)
    )
    headline = "" if several else f"<p>{_verdict_badge(first)}</p>"
    body = _comparison(runs) if several else ""
    body += "".join(
        _run_section(i, n if several else None, r, d) for i, ((n, r), d) in enumerate(zip(runs, data, strict=True))
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
    p.write_text(render_html(reports, title), encoding="utf-8")
    return p
