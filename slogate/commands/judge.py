"""`slogate judge` and `slogate baseline save`: a saved result judged again (a report, a killed
run's journal, a `vllm bench serve` result), and baselines for regression checks."""

from __future__ import annotations

import argparse
from typing import Any

from slogate.arguments import checked_number, fail
from slogate.commands.common import add_report_dir
from slogate.slo.gate import exitcodes
from slogate.slo.gate.baseline import BaselineError, save_baseline
from slogate.slo.outputs.publish import AlertSettings
from slogate.slo.outputs.slack import DEFAULT_BUDGET_S, DEFAULT_NOTIFY, NotifyPolicyError, parse_notify
from slogate.slo.outputs.vllm_export import EXPORT_FORMATS, ExportError, parse_exports
from slogate.slo.rejudge import judge_file, refuse


def cmd_judge(args: argparse.Namespace) -> int:
    try:
        alerts = AlertSettings(args.slack_channel or None, parse_notify(args.slack_notify), args.slack_timeout_s)
        exports = parse_exports(args.export)
    except (NotifyPolicyError, ExportError) as e:
        return refuse(str(e), args.report_dir)  # one line, exit 2, a report where it can be written
    return judge_file(
        args.result,
        args.slo_file,
        args.report_dir,
        baseline=args.slo_baseline,
        alerts=alerts,
        min_samples=args.slo_min_samples,
        warmup_s=args.slo_warmup_s,
        exports=exports,
    )


def cmd_baseline_save(args: argparse.Namespace) -> int:
    try:
        out = save_baseline(args.report, args.file)
    except BaselineError as e:
        return fail(str(e), exitcodes.USAGE)
    print(out)
    return 0


def register(sub: Any) -> None:
    """`slogate judge` and `slogate baseline`."""
    p = sub.add_parser("judge", help="judge a saved slo-report.json, a killed run's journal or a vllm bench result")
    p.add_argument(
        "result",
        help="a slogate slo-report.json, a report directory (its journal when a killed run left one, else its "
        "report), or a `vllm bench serve --save-detailed` JSON",
    )
    p.add_argument("--slo-file", required=True, help="the SLOs to judge the result on")
    add_report_dir(p, "slogate-report")
    p.add_argument("--slo-baseline", help="a saved report to check for regressions against")
    p.add_argument(
        "--slo-min-samples", type=checked_number("slo_min_samples", int), help="overrides the SLO file's min_samples"
    )
    p.add_argument(
        "--slo-warmup-s", type=checked_number("slo_warmup_s", float), help="overrides the SLO file's warmup_s"
    )
    p.add_argument("--slack-channel", default="", help="channel for SLACK_BOT_TOKEN (a webhook needs none)")
    p.add_argument(
        "--slack-notify",
        default=DEFAULT_NOTIFY,
        help=f"when to alert Slack, comma-separated (default {DEFAULT_NOTIFY}; also pass, recovery)",
    )
    p.add_argument(
        "--slack-timeout-s",
        type=checked_number("slack_timeout_s", float),
        default=DEFAULT_BUDGET_S,
        help=f"seconds the alert may take, retries included (default {DEFAULT_BUDGET_S:g})",
    )
    p.add_argument(
        "--export",
        nargs=2,
        metavar=("FORMAT", "FILE"),
        help=f"also write the result in another tool's format ({', '.join(EXPORT_FORMATS)})",
    )
    p.set_defaults(func=cmd_judge)

    p = sub.add_parser("baseline", help="baselines for regression checks (--slo-baseline)")
    baseline_sub = p.add_subparsers(dest="baseline_command", required=True)
    b = baseline_sub.add_parser("save", help="store a run's slo-report.json as a baseline")
    b.add_argument("report", help="the run's slo-report.json")
    b.add_argument("file", help="where to store the baseline (JSON)")
    b.set_defaults(func=cmd_baseline_save)
