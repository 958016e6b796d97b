"""The gate's options, registered with Locust's `init_command_line_parser`: command line,
`locust.conf` and the web UI form alike (`--export` is headless only), in three groups of the help
(the gate, its reports and metrics, Slack alerts). Registering them also makes Locust's parser
refuse bad input in one line before any load (slo/plugin/parser.py)."""

from __future__ import annotations

from typing import Any

from locust import events
from slogate.slo.gate.early_stop import DEFAULT_CONFIDENCE
from slogate.slo.gate.intervals import DEFAULT_INTERVAL_S
from slogate.slo.gate.self_check import MAX_LOOP_LAG_P99_MS
from slogate.slo.gate.window import DEFAULT_WINDOW_S
from slogate.slo.outputs.slack import DEFAULT_BUDGET_S, DEFAULT_NOTIFY, NOTIFY_CHOICES
from slogate.slo.outputs.vllm_export import EXPORT_FORMATS
from slogate.slo.plugin.parser import group, guard


@events.init_command_line_parser.add_listener
def add_arguments(parser: Any) -> None:
    guard(parser)
    gate = group(parser, "slogate: the SLO gate")
    reports = group(parser, "slogate: reports and live metrics")
    alerts = group(parser, "slogate: Slack alerts")
    gate("--slo-file", type=str, default="", help="YAML file of SLOs to gate the run on (slogate)")
    reports(
        "--slo-report-dir",
        "--report-dir",
        type=str,
        default="slogate-report",
        help="Where slo-report.json, slo-junit.xml and slo-summary.md go (also spelled --report-dir)",
    )
    gate(
        "--slo-warmup-s",
        type=float,
        default=-1.0,  # not None: the web UI form would turn a None default into a string
        help="Seconds at the start not judged (default: warmup_s of the SLO file)",
    )
    gate("--slo-baseline", type=str, default="", help="A saved report to check for regressions against")
    alerts("--slack-channel", type=str, default="", help="Channel for SLACK_BOT_TOKEN (a webhook needs none)")
    alerts(
        "--slack-notify",
        type=str,
        default=DEFAULT_NOTIFY,
        help=f"When to alert Slack, comma-separated from {','.join(NOTIFY_CHOICES)}",
    )
    gate(
        "--slo-unreachable-s",
        type=float,
        default=15.0,
        help="Stop (inconclusive) when no request has succeeded and some were refused or timed out "
        "for this long (0: never)",
    )
    alerts(
        "--slack-timeout-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="Seconds the Slack alert may take, retries included; then one warning and the verdict stands",
    )
    gate(
        "--max-client-lag-ms",
        type=float,
        default=MAX_LOOP_LAG_P99_MS,
        help="Self-check: p99 event-loop/send lag above which the load generator counts as saturated",
    )
    reports(
        "--server-metrics-interval",
        type=float,
        default=2.0,
        help="Seconds between scrapes of the target's /metrics (0: off)",
    )
    reports(
        "--slo-metrics-port",
        type=int,
        default=0,
        help="Serve the live figures for Prometheus at /slo/metrics on this port (for headless runs; "
        "a web UI run also has them on its web port; 0: off)",
    )
    reports(
        "--slo-interval-s",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help="Seconds per interval of the time series (slo-intervals.hlog and the charts; 0: none)",
    )
    reports(
        "--export",
        nargs=2,
        metavar=("FORMAT", "FILE"),
        default=None,
        include_in_web_ui=False,
        help=f"Also write the figures in another tool's format: {', '.join(EXPORT_FORMATS)} "
        "(`vllm bench serve` result keys)",
    )
    gate(
        "--slo-min-samples",
        type=int,
        default=0,
        help="Samples needed per SLO (default: min_samples of the SLO file)",
    )
    gate(
        "--slo-abort-on-fail",
        action="store_true",
        default=False,
        help="Stop the run (fail, exit 1) once a latency SLO fails beyond noise over the last --slo-window-s",
    )
    gate(
        "--slo-window-s",
        type=float,
        default=DEFAULT_WINDOW_S,
        help="Seconds of the sliding window --slo-abort-on-fail judges",
    )
    gate(
        "--slo-stop-when-decided",
        action="store_true",
        default=False,
        help="Stop the run as soon as every SLO is decided, pass or fail, at --slo-confidence (anytime-valid "
        "bounds: a wrong verdict has probability <= 1 - confidence however often the run is looked at)",
    )
    gate(
        "--slo-stop-when-failed",
        action="store_true",
        default=False,
        help="Stop the run as soon as an SLO is decided failed by --slo-stop-when-decided's bounds at "
        "--slo-confidence; a run not decided failed goes to its --run-time (a rate sweep's step past capacity "
        "ends in seconds, and no pass rests on a partial look)",
    )
    gate(
        "--slo-confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="Confidence of each early decision of --slo-stop-when-decided (default 0.99: <= 1 %% wrong)",
    )
    gate(
        "--slo-correlated-requests",
        action="store_true",
        default=False,
        help="--slo-stop-when-decided (or -failed) decides TTFT, TTFO and E2E percentiles (of a class or all) on "
        "batches of consecutive requests as long as the run's measured correlation (from the --slo-interval-s "
        "time series; 1 s suits it): near saturation requests queue together and the per-request bounds would be "
        "overconfident. About twice the requests far from saturation, 2 x tau times near it; approximate",
    )
    gate(
        "--slo-not-blocking",
        type=str,
        default="",
        help="Comma-separated SLO names (or 'regressions') that --slo-stop-when-decided does not wait for: "
        "judged at the stop as usual (server figures, tokens/s and regressions cannot be decided early)",
    )
