"""One run's section of `slo-report.html` (slo/outputs/html.py assembles the page): verdict, SLO
and regression tables, figures per class, goodput, charts' places, server and self-check facts,
the run, the workload and the command. Every value is escaped."""

from __future__ import annotations

import html
import json
from typing import Any

from slogate.slo.gate.engines import title
from slogate.slo.gate.latency_metrics import HEADLINE, IN_INTERVALS, table_columns
from slogate.slo.gate.metrics import CANCELLED_NOTE
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import Report, RunInfo, describe_targets, goodput_summary, trace_cache_comparison
from slogate.slo.gate.self_check import summary as self_check_summary
from slogate.slo.gate.server_figures import ServerTtft
from slogate.slo.gate.spec import Objective
from slogate.slo.gate.verdict import Outcome, Verdict

VERDICT_COLORS = {
    Verdict.PASS: "#1a7f37",
    Verdict.FAIL: "#cf222e",
    Verdict.INCONCLUSIVE: "#9a6700",
    Verdict.ERROR: "#8250df",
    Verdict.UNGATED: "#57606a",
}
RESULT_CLASSES = {Outcome.PASS: "pass", Outcome.FAIL: "fail", Outcome.INSUFFICIENT: "insufficient"}
e = html.escape


def num(value: Any, digits: int = 1) -> str:
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
    return o.kind.format_value(observed)


def _target(o: Objective) -> str:
    unit = f" {o.kind.unit}" if o.kind.unit else ""
    parts = [f"&le; {o.max:g}{unit}"] if o.max is not None else []
    if o.min is not None:
        parts.append(f"&ge; {o.min:g}{unit}")
    limits = f" of requests with {e(o.describe_limits())}" if o.limits_ms else ""  # goodput
    return " and ".join(parts) + limits


def verdict_badge(report: Report) -> str:
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
            f'<tr><td>{e(c.rule.name)}</td><td class="num">{num(c.baseline_ms)} ms</td>'
            f'<td class="num">{num(c.current_ms)} ms</td><td class="num">{change}</td><td>{interval}</td>'
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
    cancels = any(m.get("cancelled") for m in metrics.values())  # the column only in a run that cancelled
    columns = table_columns(metrics)
    for cls, m in metrics.items():
        latency = "".join(f"<td class=num>{num(m[f'{metric.name}_ms'][f'p{p}'])}</td>" for metric, p in columns)
        cancelled = f"<td class=num>{num(m['cancelled'])}</td>" if cancels else ""
        rows.append(
            f"<tr><td>{e(cls)}</td><td class=num>{num(m['requests'])}</td><td class=num>{num(m['failures'])}</td>"
            f"{cancelled}{latency}<td class=num>{num(m['output_tokens_per_s'])}</td>"
            f"<td class=num>{num(m['requests_per_s'], 2)}</td>"
            f"<td class=num>{num(m['mean_prompt_tokens'])}</td>"
            f"<td class=num>{percent(m['prompt_cache_hit_rate'])}</td></tr>"
        )
    total = metrics.get(ALL, {})
    errors = total.get("errors_by_kind") or {}
    foot = ""
    if errors:
        foot = "<p>Failures by kind: " + ", ".join(f"{e(k)} {v:,}" for k, v in errors.items()) + ".</p>"
    if cancels:
        foot += f"<p>{e(CANCELLED_NOTE)}</p>"
    return (
        "<table><thead><tr><th>class</th><th>requests</th><th>failed</th>"
        + ("<th>cancelled</th>" if cancels else "")
        + "".join(f"<th>{e(metric.title)} p{p}</th>" for metric, p in columns)
        + "<th>out tok/s</th><th>req/s</th><th>prompt tok</th><th>cached</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
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
        f"<tr><td>{e(cls)}</td><td class=num>{num(g['good'])}</td><td class=num>{num(g['requests'])}</td>"
        f"<td class=num>{percent(g['fraction'])}</td><td class=num>{num(g['goodput_rps'], 2)}</td></tr>"
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
    return f"{num(s.get('p50'))} / {num(s.get('p99'))} / {num(s.get('max'))}"


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
        ("users", _users(run)),
        ("SLO file", run.slo_file),
        ("time series interval (s)", report.measurements.intervals.interval_s or None),
        ("report generated", report.generated_at),
    ]
    return _kv_table(items)


def _users(run: RunInfo) -> str | int | None:
    """The run's users; an open-loop run's are senders, each at --arrival-rate (requests, or new
    conversations with --turns, per second)."""
    open_loop = run.workload.open_loop
    if not run.users or open_loop is None or not open_loop.rate_per_user:
        return run.users
    rate = open_loop.rate_per_user
    return f"{run.users} (open loop: {rate:g} arrivals/s each, {run.users * rate:g}/s in all)"


def _server_facts(report: Report) -> str:
    server = report.server
    if not server:
        return '<p class="muted">The server\'s /metrics was not scraped.</p>'
    if not server.available:
        return f'<p class="muted">Server figures unavailable: {e(str(server.error))}.</p>'
    ttft = server.server_ttft or ServerTtft()
    items = [
        ("engine", title(server.engine)),
        ("scrapes", server.scrapes),
        ("prefix-cache hit rate (over the run)", server.prefix_cache_hit_rate),
        ("KV-cache usage peak / mean", f"{num(server.kv_cache_usage_max, 3)} / {num(server.kv_cache_usage_mean, 3)}"),
        (
            "requests waiting peak / mean",
            f"{num(server.num_requests_waiting_max, 0)} / {num(server.num_requests_waiting_mean, 1)}",
        ),
        ("preemptions", server.preemptions),
        ("server TTFT mean / p50 / p95 (ms)", f"{num(ttft.mean)} / {num(ttft.p50)} / {num(ttft.p95)}"),
        ("client-server TTFT gap (ms)", server.client_server_ttft_gap_ms),
    ]
    if server.lora is not None:
        items.append(("LoRA", server.lora.describe()))
    restarted = server.restart_note(report.run.started_at)
    after_stop = server.after_stop_note()
    return (
        (f'<p class="restarted">{e(restarted)}</p>' if restarted else "")
        + (f"<p>{e(after_stop)}</p>" if after_stop else "")
        + _kv_table(items)
    )


def chart(kind: str, run: int, title: str, **attrs: str) -> str:
    extra = "".join(f' data-{k}="{e(v)}"' for k, v in attrs.items())
    return (
        f"<figure><figcaption>{e(title)}</figcaption>"
        f'<div class="chart" data-chart="{kind}" data-run="{run}"{extra}></div></figure>'
    )


def run_section(i: int, name: str | None, report: Report, data: dict[str, Any]) -> str:
    run = report.run
    heading = f"<h2>{e(name)} {verdict_badge(report)}</h2>" if name else ""
    reasons = "".join(f"<li>{e(r)}</li>" for r in report.reasons)
    notes = "".join(f"<li>Note: {e(n)}</li>" for n in run.notes)
    stopped = report.stop_line()
    if stopped:
        notes += f'<li class="stopped">{e(stopped)}</li>'
    interval = report.measurements.intervals.interval_s
    per = f"per {interval:g} s interval" if interval else "per interval"
    over_time = f"{HEADLINE.title} p50 (dashed) and p95 over time, {per}, per class; SLO targets as long dashes"
    summary = report.metrics_summary()
    # TTFT always; another metric where some request had it (TTFO, say, only where models reason: an
    # older report, or a run without, would draw an empty chart)
    charted = [m for m in IN_INTERVALS if m is HEADLINE or any(s[f"{m.name}_ms"]["count"] for s in summary.values())]
    charts = [
        chart("latency-time", i, over_time, metric=HEADLINE.name),
        chart("rate-time", i, f"Requests and errors by kind per second, {per}"),
        *(
            chart("percentiles", i, f"{m.title} percentile curves per class (log scales)", metric=m.name)
            for m in charted
        ),
        chart(
            "server-time",
            i,
            "Server over time (/metrics): KV-cache usage, prefix-cache hit rate, requests waiting/running",
        ),
    ]
    if data["series"] is None:
        charts.insert(0, '<p class="muted">No time series in these measurements (no interval histograms).</p>')
    command = run.command or "(not recorded)"
    workload = _flatten(run.workload.to_json())
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
