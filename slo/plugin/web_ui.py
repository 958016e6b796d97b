"""A "TTFT / SLO" tab inside Locust's own web UI, and JSON/Markdown endpoints behind it.

- `/slo/status`: the live report (JSON) for scripts; `/slo/report.json`, `/slo/report.md`,
  `/slo/report.html`: the same as downloads; `/slo/series`: the TTFT time series and the SLO
  targets the tab's chart draws; `/slo/metrics`: the same live figures for Prometheus
  (slo/outputs/prometheus.py; a scraper without a login uses `--slo-metrics-port` instead). All
  honour `--web-login`.
- The tab is a Locust extended table fed through `/stats/requests` (`extended_stats`), so it
  refreshes with the rest of the UI while the test runs and keeps its figures after Stop.
- Above the table, a live chart of TTFT p50/p95 per interval and request class, with the SLO
  targets: `slo/outputs/assets/webui-tab.js`, added to Locust's page, polls `/slo/series` every 2 s and
  draws with the vendored uPlot, served by `/slo/assets/...` (no CDN). It keeps its figures after
  Stop and starts again empty after "Reset stats", like the table.
Nothing secret can reach the page: API keys and Slack credentials are not options at all, and
credentials in a host URL, on the command line or typed into the form, are taken out of it
before Locust stores or shows the host (slo/plugin/target.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from slogate.slo.gate.latency_metrics import IN_INTERVALS
from slogate.slo.gate.option_values import OptionError, check_host
from slogate.slo.gate.report import Report
from slogate.slo.outputs.html import ASSETS, render_html, script_json
from slogate.slo.outputs.html_run import percent
from slogate.slo.outputs.prometheus import exposition
from slogate.slo.outputs.render import observed_text, render_markdown

TAB_KEY = "slogate"
_COLUMNS = [
    ("item", "Item"),
    ("p50", "p50 ms"),
    ("p90", "p90 ms"),
    ("p95", "p95 ms"),
    ("p99", "p99 ms"),
    ("count", "Samples"),
    ("target", "Target"),
    ("state", "State"),
]
_LATENCY_ROWS = tuple((m.name, m.title) for m in IN_INTERVALS)
# Served from slo/outputs/assets/ by /slo/assets/<name>; nothing else there is.
SERVED_ASSETS = {
    "uPlot.iife.min.js": "application/javascript",
    "uPlot.min.css": "text/css",
    "slogate-charts.js": "application/javascript",
    "webui-tab.js": "application/javascript",
}
PAGE_ADDITIONS = (
    '<link rel="stylesheet" href="./slo/assets/uPlot.min.css">'
    '<script src="./slo/assets/uPlot.iife.min.js"></script>'
    '<script src="./slo/assets/slogate-charts.js"></script>'
    '<script src="./slo/assets/webui-tab.js"></script>'
)


def _row(item: str, count: Any, target: str = "", state: str = "", **percentiles: Any) -> dict[str, Any]:
    """One row of the tab's table (the percentile cells empty unless given)."""
    return {"item": item, **{p: percentiles.get(p, "") for p in ("p50", "p90", "p95", "p99")},
            "count": count, "target": target, "state": state}  # fmt: skip


def rows(report: Report) -> list[dict[str, Any]]:
    """The tab's table: per-tag latency percentiles, prompt tokens (mean, share reported cached),
    failures by kind and cancelled requests where there are any, each SLO, server figures, the verdict."""
    out: list[dict[str, Any]] = []
    for cls, m in report.metrics_summary().items():
        for key, label in _LATENCY_ROWS:
            s = m[f"{key}_ms"]
            out.append(_row(f"{label} {cls}", s["count"], **{p: s[p] for p in ("p50", "p90", "p95", "p99")}))
        prompt = f"mean {m['mean_prompt_tokens']} tokens, {percent(m['prompt_cache_hit_rate'])} reported cached"
        out.append(_row(f"prompt {cls}: {prompt}", m["requests"]))
        if m["failures"] or m.get("cancelled"):
            kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(m["errors_by_kind"].items()))
            outcome = f"failed {m['failures']}" + (f" ({kinds})" if kinds else "")
            outcome += f", cancelled {m['cancelled']}" if m.get("cancelled") else ""
            out.append(_row(f"requests {cls}: {outcome}", m["requests"]))
    for r in report.slos:
        o = r.objective
        item = f"SLO {o.name}: {observed_text(r.observed, o.kind.unit)}"
        out.append(_row(item, r.samples, o.describe(), str(r.result)))
    server = report.server
    if server is not None and server.available:
        out.append(_row(f"prefix cache hit rate (server): {server.prefix_cache_hit_rate}", server.scrapes))
    out.append(_row("verdict", "", "; ".join(report.reasons), str(report.verdict)))
    return out


def install(
    web_ui: Any,
    snapshot: Callable[[], Report],
    bare_host: Callable[[str], str] | None = None,
    series: Callable[[], dict[str, Any]] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> None:
    """Add the tab and the endpoints to Locust's Flask app; `snapshot()` returns the live report,
    `series()` the live chart's data (slo/outputs/charts.py, `live_chart_data`). `bare_host(url)`
    keeps the credentials of a host typed into the form and returns it without them; `on_stop()`
    is called when the page's Stop (Locust's `/stop`) is asked for: the run is then stopped by hand."""
    from flask import Response, abort, jsonify, request
    from werkzeug.datastructures import ImmutableMultiDict

    web_ui.template_args.update(
        extended_tabs=[{"title": "TTFT / SLO", "key": TAB_KEY}],
        extended_tables=[{"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in _COLUMNS]}],
        extended_csv_files=[
            {"href": "./slo/report.json", "title": "slogate report (JSON)"},
            {"href": "./slo/report.md", "title": "slogate report (Markdown)"},
            {"href": "./slo/report.html", "title": "slogate report (HTML, with charts)"},
        ],
    )
    app = web_ui.app
    if on_stop is not None:

        @app.before_request
        def note_stop() -> None:
            if request.method == "POST" and request.path.rstrip("/").endswith("/stop"):  # under any --web-base-path
                on_stop()

    @app.route("/slo/status")
    @web_ui.auth_required_if_enabled
    def slo_status() -> Response:
        return Response(json.dumps(snapshot().to_json()), mimetype="application/json")

    @app.route("/slo/report.json")
    @web_ui.auth_required_if_enabled
    def slo_report_json() -> Response:
        return Response(
            json.dumps(snapshot().to_json(), indent=2),
            mimetype="application/json",
            headers={"Content-Disposition": "attachment; filename=slo-report.json"},
        )

    @app.route("/slo/report.md")
    @web_ui.auth_required_if_enabled
    def slo_report_md() -> Response:
        return Response(
            render_markdown(snapshot()),
            mimetype="text/markdown",
            headers={"Content-Disposition": "attachment; filename=slo-summary.md"},
        )

    @app.route("/slo/report.html")
    @web_ui.auth_required_if_enabled
    def slo_report_html() -> Response:
        return Response(
            render_html(snapshot()),
            mimetype="text/html",
            headers={"Content-Disposition": "attachment; filename=slo-report.html"},
        )

    @app.route("/slo/series")
    @web_ui.auth_required_if_enabled
    def slo_series() -> Response:
        data = series() if series is not None else {"series": None, "targets": []}
        return Response(script_json(data), mimetype="application/json", headers={"Cache-Control": "no-store"})

    @app.route("/slo/metrics")
    @web_ui.auth_required_if_enabled
    def slo_metrics() -> Response:
        body, content_type = exposition(snapshot(), request.headers.get("Accept"))
        return Response(body, content_type=content_type, headers={"Cache-Control": "no-store"})

    @app.route("/slo/assets/<name>")
    @web_ui.auth_required_if_enabled
    def slo_asset(name: str) -> Response:
        if name not in SERVED_ASSETS:
            abort(404)
        return Response((ASSETS / name).read_bytes(), mimetype=SERVED_ASSETS[name])

    if bare_host is not None:
        # Locust's /swarm stores the form's host as is and echoes it back: wrap its view so that it
        # only ever sees the host without credentials (after the login check, like the view itself).
        endpoint = next(r.endpoint for r in app.url_map.iter_rules() if r.rule.endswith("/swarm"))
        swarm = app.view_functions[endpoint]

        @web_ui.auth_required_if_enabled
        @functools.wraps(swarm)
        def swarm_without_credentials(*args: Any, **kwargs: Any) -> Any:
            if request.form.get("host"):
                try:  # as on the command line: no load against a host typed without its scheme
                    check_host(request.form["host"], option="host")
                except OptionError as e:
                    return jsonify({"success": False, "message": str(e), "host": bare_host(request.form["host"])})
                form = request.form.copy()
                form["host"] = bare_host(form["host"])
                request.form = ImmutableMultiDict(form)  # werkzeug caches the parsed form: replace it
            return swarm(*args, **kwargs)

        app.view_functions[endpoint] = swarm_without_credentials

    @app.after_request
    def add_extended_stats(resp: Response) -> Response:
        if request.path.endswith("/stats/requests") and resp.is_json:
            data = resp.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": rows(snapshot())}]
            resp.set_data(json.dumps(data))
        elif request.endpoint == "locust.index" and resp.mimetype == "text/html" and not resp.direct_passthrough:
            page = resp.get_data(as_text=True)
            if "</body>" in page and "webui-tab.js" not in page:
                resp.set_data(page.replace("</body>", PAGE_ADDITIONS + "</body>", 1))
        return resp
