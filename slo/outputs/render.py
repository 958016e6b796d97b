"""The report's files: `slo-report.json`, `slo-junit.xml`, `slo-summary.md` (also appended to
`$GITHUB_STEP_SUMMARY`), `slo-report.html` (self-contained, with charts: slo/outputs/html.py) and
`slo-intervals.hlog` (the time series as an HdrHistogram interval log: slo/outputs/hlog.py). Written
whatever happened (pass, fail, inconclusive, or a usage error), so a CI job always has an
artifact. `exports` adds files in other tools' formats (`vllm-bench`: slo/outputs/vllm_export.py)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from slogate.slo.gate.engines import title
from slogate.slo.gate.latency_metrics import table_columns
from slogate.slo.gate.metrics import CANCELLED_NOTE
from slogate.slo.gate.record import ALL
from slogate.slo.gate.report import JSON_NAME, Report, describe_targets, goodput_summary, trace_cache_comparison
from slogate.slo.gate.verdict import Outcome
from slogate.slo.outputs.files import write_atomically
from slogate.slo.outputs.hlog import HLOG_NAME, write_hlog
from slogate.slo.outputs.html import HTML_NAME, write_html
from slogate.slo.outputs.html_run import percent
from slogate.slo.outputs.vllm_export import write_export

log = logging.getLogger("slogate")
JUNIT_NAME, MARKDOWN_NAME = "slo-junit.xml", "slo-summary.md"


def headline(report: Report) -> str:
    """`slogate: FAIL (exit 1)`: the verdict and the exit code the process returns, always together."""
    return f"slogate: {report.verdict.upper()} (exit {report.exit_code})"


def write_reports(
    report: Report, out_dir: str | Path, exports: Sequence[tuple[str, str | Path]] = ()
) -> dict[str, Path]:
    """Every report file into `out_dir`; `exports`: (format, path) pairs, e.g. ("vllm-bench", "bench.json")."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"json": d / JSON_NAME, "junit": d / JUNIT_NAME, "markdown": d / MARKDOWN_NAME}
    write_atomically(paths["json"], json.dumps(report.to_json(), indent=2) + "\n")
    write_atomically(paths["junit"], render_junit(report))
    markdown = render_markdown(report)
    write_atomically(paths["markdown"], markdown)
    paths["html"] = write_html(report, d / HTML_NAME)
    paths["hlog"] = write_hlog(report.measurements, d / HLOG_NAME, f"run started {report.run.started_at or '?'}")
    for fmt_name, path in exports:
        try:
            paths[f"export:{fmt_name}"] = write_export(report, fmt_name, path)
        except OSError as e:  # the verdict stands; a failed export is one warning line
            log.warning("slogate: --export %s %s failed: %s", fmt_name, path, e.strerror or e)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as fh:
            fh.write(markdown + "\n")
    return paths


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def observed_text(observed: float | None, unit: str) -> str:
    if observed is None:
        return "no data"
    return f"{observed:.1f} ms" if unit == "ms" else f"{observed:.4g}"


def render_markdown(report: Report) -> str:
    run = report.run
    lines = [f"## {headline(report)}", ""]
    if run.target:
        lines.append(f"Target `{run.target}`, model `{run.model or '?'}`.")
    if run.source != "locust":
        lines.append(f"Measured by `{run.source}`; judged by slogate.")
    lines += [f"- {reason}" for reason in report.reasons]
    lines += [f"- Note: {note}" for note in run.notes]
    stopped = report.stop_line()
    if stopped:
        lines.append(f"- {stopped}")
    if report.slos:
        lines += ["", "| SLO | objective | observed | samples | result |", "|---|---|---|---|---|"]
        for r in report.slos:
            o = r.objective
            result = r.result.upper() if r.result == Outcome.FAIL else str(r.result)
            observed = observed_text(r.observed, o.kind.unit)
            lines.append(f"| {o.name} | {o.describe()} | {observed} | {r.samples} | {result} |")
    if report.regression is not None and report.regression.comparisons:
        lines += [
            "",
            "| regression rule | baseline | current | change | 95% interval | tolerance | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in report.regression.comparisons:
            interval = f"{c.interval_pct[0]:+.1f}..{c.interval_pct[1]:+.1f}%" if c.interval_pct else "-"
            change = "-" if c.change_pct is None else f"{c.change_pct:+.1f}%"
            lines.append(
                f"| {c.rule.name} | {fmt(c.baseline_ms)} ms | {fmt(c.current_ms)} ms | {change} | {interval} | "
                f"+{c.rule.max_increase_pct:g}% | {c.status} |"
            )
    metrics = report.metrics_summary()
    if metrics:
        cancels = any(m.get("cancelled") for m in metrics.values())  # the column only in a run that cancelled
        columns = table_columns(metrics)
        header = ["class", "requests", "failed", *(["cancelled"] if cancels else [])]
        header += [*(f"{metric.title} p{p}" for metric, p in columns), "out tok/s", "prompt tok", "cached"]
        lines += ["", "| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        for name, m in metrics.items():
            latency = [fmt(m[f"{metric.name}_ms"][f"p{p}"]) for metric, p in columns]
            cells = [name, str(m["requests"]), str(m["failures"]), *([str(m["cancelled"])] if cancels else [])]
            cells += [*latency, fmt(m["output_tokens_per_s"])]
            cells += [fmt(m["mean_prompt_tokens"]), percent(m["prompt_cache_hit_rate"])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines.append(
            "Latencies in ms (HdrHistogram, 3 significant digits; nearest-rank percentiles). Prompt tok: mean "
            "prompt tokens; cached: the share of them the server reported as cached (`cached_tokens`)."
        )
        total = metrics.get(ALL, {})
        errors = total.get("errors_by_kind") or {}
        if errors:
            lines.append("Failures by kind: " + ", ".join(f"{k} {v}" for k, v in errors.items()) + ".")
        if total.get("unfinished"):
            waiting = total["unfinished_waiting"]
            still = (
                "1 was still waiting for its first token and counts in TTFT with the time it had waited"
                if waiting == 1
                else f"{waiting} were still waiting for their first token and count in TTFT with the time they "
                "had waited"
            )
            lines.append(
                f"Unfinished (in flight when the run stopped; not failures): {total['unfinished']}; {still} "
                "(a lower bound)."
            )
        if total.get("cancelled"):
            lines.append(CANCELLED_NOTE)
    lines += _goodput_markdown(report)
    server = report.server
    if server is not None and server.available:
        figures = [
            f"prefix-cache hit rate {fmt(server.prefix_cache_hit_rate, 3)}",
            f"KV-cache peak {fmt(server.kv_cache_usage_max, 3)}",
            f"waiting peak {fmt(server.num_requests_waiting_max, 0)}",
            f"preemptions {fmt(server.preemptions, 0)}",
            f"server TTFT mean {fmt(server.server_ttft.mean if server.server_ttft else None)} ms",
            f"client-server gap {fmt(server.client_server_ttft_gap_ms)} ms",
        ]
        lines.append(f"Server ({title(server.engine)} /metrics, {server.scrapes} scrapes): " + ", ".join(figures) + ".")
        if server.lora is not None:
            lines.append(f"LoRA: {server.lora.describe()}.")
        restarted = server.restart_note(run.started_at)
        if restarted:
            lines.append(restarted)
        after_stop = server.after_stop_note()
        if after_stop:
            lines.append(after_stop)
    elif server is not None:
        lines.append(f"Server figures unavailable: {server.error}.")
    trace = trace_cache_comparison(run, server)
    if trace:
        lines.append(trace)
    return "\n".join(lines) + "\n"


def _goodput_markdown(report: Report) -> list[str]:
    """Goodput per class (requests that met every per-request limit), when the run counted it."""
    goodput = goodput_summary(report.measurements)
    if goodput["targets_ms"] is None or report.measurements.is_empty:
        return []
    lines = ["", "| class | good | requests | goodput | goodput req/s |", "|---|---|---|---|---|"]
    for name, g in goodput["classes"].items():
        lines.append(
            f"| {name} | {g['good']} | {g['requests']} | {percent(g['fraction'])} | {fmt(g['goodput_rps'], 2)} |"
        )
    limits = describe_targets(goodput["targets_ms"])
    return [*lines, "", f"Goodput: requests that met every per-request limit ({limits}).", ""]


def render_junit(report: Report) -> str:
    slos = report.slos
    suite = ET.Element(
        "testsuite",
        name="slogate",
        tests=str(max(len(slos), 1)),
        failures=str(sum(r.result == Outcome.FAIL for r in slos)),
        errors=str(0 if slos else 1),
        skipped=str(sum(r.result == Outcome.INSUFFICIENT for r in slos)),
    )
    cancelled = {name: m["cancelled"] for name, m in report.metrics_summary().items() if m.get("cancelled")}
    if cancelled:  # --cancel-fraction: requests the client hung up on purpose, per class
        properties = ET.SubElement(suite, "properties")
        for name, count in cancelled.items():
            ET.SubElement(properties, "property", name=f"cancelled.{name}", value=str(count))
    if not slos:
        case = ET.SubElement(suite, "testcase", classname="slogate", name="run")
        ET.SubElement(case, "error", message="; ".join(report.reasons or ["no SLO evaluated"]))
    for r in slos:
        o = r.objective
        case = ET.SubElement(suite, "testcase", classname=f"slogate.{o.request_class}", name=o.name)
        message = f"{o.describe()}: observed {observed_text(r.observed, o.kind.unit)}"
        message += f" over {r.samples} samples"
        if r.result == Outcome.FAIL:
            ET.SubElement(case, "failure", message=message)
        elif r.result == Outcome.INSUFFICIENT:
            ET.SubElement(case, "skipped", message=message)
        else:
            ET.SubElement(case, "system-out").text = message
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
