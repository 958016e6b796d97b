"""The one report writer: `slo-report.json`, `slo-junit.xml` and `slo-summary.md`.

Reports are written whatever happened (pass, fail, inconclusive, or a usage error) so a CI job
always has an artifact. Nothing secret goes in: the target URL is stripped of credentials and
query strings, and API keys and Slack tokens never reach the report builder.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from xml.etree import ElementTree as ET

from slogate.slo.evaluate import FAIL, INSUFFICIENT, Verdict
from slogate.slo.metrics import MetricsStore

SCHEMA = "slogate.report/1"
JSON_NAME, JUNIT_NAME, MARKDOWN_NAME = "slo-report.json", "slo-junit.xml", "slo-summary.md"


def public_url(url: str | None) -> str | None:
    """The URL without user:password@ and without a query string or fragment."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def build_report(
    verdict: Verdict | None,
    metrics: MetricsStore,
    *,
    run: dict[str, Any],
    error: str | None = None,
    exit_code: int | None = None,
    extra: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`run` describes the target, workload and timing; `error` is set for usage errors
    (verdict `error`, nothing was judged)."""
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "verdict": verdict.status if verdict else "error",
        "exit_code": verdict.exit_code if verdict else exit_code,
        "reasons": verdict.reasons if verdict else [error or "no verdict"],
        "run": run,
        "slos": [],
        "metrics": metrics.summary() if not metrics.is_empty else {},
        "warmup_excluded_requests": metrics.warmup_excluded,
        # The raw distributions (HdrHistogram's standard base64 encoding, microseconds), so a report
        # can be re-judged, charted or compared later without the run.
        "histograms": {
            name: {m: h.encode() for m, h in metrics.get(name).latency.items() if h.count}
            for name in metrics.class_names()
        }
        if not metrics.is_empty
        else {},
    }
    if server is not None:
        report["server"] = dict(server)
        client_mean = metrics.get("all").latency["ttft"].mean_ms()
        server_mean = (server.get("server_ttft_ms") or {}).get("mean")
        if client_mean is not None and server_mean is not None:
            # Time outside the engine: network, HTTP server, and any queueing before the engine.
            report["server"]["client_server_ttft_gap_ms"] = round(client_mean - server_mean, 3)
    for r in verdict.results if verdict else []:
        o = r.objective
        report["slos"].append(
            {
                "name": o.name,
                "metric": o.metric,
                "class": o.request_class,
                "percentile": o.percentile,
                "target": {
                    k: v for k, v in (("max_ms" if o.is_latency else "max", o.max), ("min", o.min)) if v is not None
                },
                "objective": o.describe(),
                "observed": None if r.observed is None else round(r.observed, 6),
                "unit": "ms" if o.is_latency else "",
                "samples": r.samples,
                "result": r.result,
            }
        )
    if extra:
        report.update(extra)
    return report


def write_reports(report: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"json": d / JSON_NAME, "junit": d / JUNIT_NAME, "markdown": d / MARKDOWN_NAME}
    paths["json"].write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    paths["junit"].write_text(render_junit(report))
    markdown = render_markdown(report)
    paths["markdown"].write_text(markdown)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as fh:
            fh.write(markdown + "\n")
    return paths


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_markdown(report: dict[str, Any]) -> str:
    verdict = report["verdict"]
    icon = {"pass": "PASS", "fail": "FAIL", "inconclusive": "INCONCLUSIVE"}.get(verdict, "ERROR")
    run = report.get("run", {})
    lines = [f"## slogate: {icon} (exit {report['exit_code']})", ""]
    if run.get("target"):
        lines.append(f"Target `{run['target']}`, model `{run.get('model') or '?'}`.")
    for reason in report.get("reasons") or []:
        lines.append(f"- {reason}")
    if report["slos"]:
        lines += ["", "| SLO | objective | observed | samples | result |", "|---|---|---|---|---|"]
        for s in report["slos"]:
            observed = _fmt(s["observed"], 1 if s["unit"] == "ms" else 4) + (
                " ms" if s["unit"] and s["observed"] is not None else ""
            )
            result = s["result"].upper() if s["result"] == FAIL else s["result"]
            lines.append(f"| {s['name']} | {s['objective']} | {observed} | {s['samples']} | {result} |")
    metrics = report.get("metrics") or {}
    if metrics:
        lines += [
            "",
            "| class | requests | failed | TTFT p50 | TTFT p95 | TTFT p99 | ITL p50 | TPOT p50 | E2E p95 | out tok/s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, m in metrics.items():
            lines.append(
                f"| {name} | {m['requests']} | {m['failures']} | {_fmt(m['ttft_ms']['p50'])} | "
                f"{_fmt(m['ttft_ms']['p95'])} | {_fmt(m['ttft_ms']['p99'])} | {_fmt(m['itl_ms']['p50'])} | "
                f"{_fmt(m['tpot_ms']['p50'])} | {_fmt(m['e2e_ms']['p95'])} | {_fmt(m['output_tokens_per_s'])} |"
            )
        lines.append("")
        lines.append("Latencies in ms (HdrHistogram, 3 significant digits).")
        total = metrics.get("all", {})
        errors = total.get("errors_by_kind") or {}
        if errors:
            lines.append("Failures by kind: " + ", ".join(f"{k} {v}" for k, v in errors.items()) + ".")
        if total.get("unfinished"):
            lines.append(
                f"Unfinished (in flight when the run stopped; not failures): {total['unfinished']}; "
                f"{total['unfinished_waiting']} were still waiting for their first token and count in TTFT "
                "with the time they had waited (a lower bound)."
            )
    server = report.get("server")
    if server and server.get("available"):
        ttft = server.get("server_ttft_ms") or {}
        figures = [
            f"prefix-cache hit rate {_fmt(server.get('prefix_cache_hit_rate'), 3)}",
            f"KV-cache peak {_fmt(server.get('kv_cache_usage_max'), 3)}",
            f"waiting peak {_fmt(server.get('num_requests_waiting_max'), 0)}",
            f"preemptions {_fmt(server.get('preemptions'), 0)}",
            f"server TTFT mean {_fmt(ttft.get('mean'))} ms",
            f"client-server gap {_fmt(server.get('client_server_ttft_gap_ms'))} ms",
        ]
        lines.append(f"Server (/metrics, {server['scrapes']} scrapes): " + ", ".join(figures) + ".")
    elif server:
        lines.append(f"Server figures unavailable: {server.get('error')}.")
    return "\n".join(lines) + "\n"


def render_junit(report: dict[str, Any]) -> str:
    slos = report["slos"]
    suite = ET.Element(
        "testsuite",
        name="slogate",
        tests=str(max(len(slos), 1)),
        failures=str(sum(s["result"] == FAIL for s in slos)),
        errors=str(0 if slos else 1),
        skipped=str(sum(s["result"] == INSUFFICIENT for s in slos)),
    )
    if not slos:
        case = ET.SubElement(suite, "testcase", classname="slogate", name="run")
        ET.SubElement(case, "error", message="; ".join(report.get("reasons") or ["no SLO evaluated"]))
    for s in slos:
        case = ET.SubElement(suite, "testcase", classname=f"slogate.{s['class']}", name=s["name"])
        observed = "no data" if s["observed"] is None else f"{s['observed']:g}{s['unit']}"
        message = f"{s['objective']}: observed {observed} over {s['samples']} samples"
        if s["result"] == FAIL:
            ET.SubElement(case, "failure", message=message)
        elif s["result"] == INSUFFICIENT:
            ET.SubElement(case, "skipped", message=message)
        else:
            ET.SubElement(case, "system-out").text = message
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
