"""After the verdict: alert Slack as the policy says, write the report files, print the summary.
The live gate and `slogate judge` both end here, so a saved result alerts and reports exactly
as a live run does."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from slogate.slo.gate import exitcodes
from slogate.slo.gate.facts import AlertRecord
from slogate.slo.gate.report import Report
from slogate.slo.outputs.render import JSON_NAME, headline, render_markdown, write_reports
from slogate.slo.outputs.slack import DEFAULT_BUDGET_S, SlackNotifier, build_message, ci_run_url, reasons_to_notify

log = logging.getLogger("slogate")


@dataclass(frozen=True, slots=True)
class AlertSettings:
    channel: str | None = None  # for SLACK_BOT_TOKEN; a webhook needs none
    notify: frozenset[str] = frozenset()
    budget_s: float = DEFAULT_BUDGET_S


def alert(report: Report, settings: AlertSettings, report_path: str | None = None) -> AlertRecord | None:
    """Send the Slack message the policy asks for; what it did, for the report (never a secret).
    None: no Slack credentials in the environment. A Slack failure is one warning line and never
    changes the verdict."""
    notifier = SlackNotifier.from_env(settings.channel, settings.budget_s)
    if notifier is None:
        return None
    baseline_verdict = report.regression.baseline_verdict if report.regression else None
    reasons = reasons_to_notify(report, settings.notify, baseline_verdict)
    if not reasons:
        return AlertRecord(sent=False, detail="nothing to notify under --slack-notify")
    result = notifier.send(build_message(report, ci_run_url(), report_path))
    if not result.ok:
        log.warning(
            "slogate: Slack notification failed after %d attempt(s) (%s); the verdict stands",
            result.attempts,
            result.detail,
        )
    return AlertRecord(result.ok, result.detail, result.attempts, tuple(reasons))


def publish(
    report: Report,
    report_dir: str | Path,
    settings: AlertSettings,
    exports: Sequence[tuple[str, str]] = (),
    out: TextIO = sys.stdout,
) -> Report:
    """Alert, write every report file (and `--export`s), print the Markdown summary. Returns the
    report as written: the judged one with what the alert did (`alerts`)."""
    report = replace(report, alerts=alert(report, settings, str(Path(report_dir) / JSON_NAME)))
    paths = write_reports(report, report_dir, exports)
    out.write("\n" + paths["markdown"].read_text())
    out.write(f"slogate: reports in {report_dir}/\n")
    out.flush()
    return report


def write_failed(
    report: Report, report_dir: str | Path, error: OSError, hint: str = "", out: TextIO | None = None
) -> int:
    """The reports could not be written (a full disk, a directory gone read-only, a path that is a
    file): the verdict printed all the same, with one line on stderr saying what was lost (and
    `hint`, what the user still has); exit 4. A live run's end and `slogate judge` both end here."""
    out = out or sys.stdout
    out.write("\n" + render_markdown(report))
    out.flush()
    sys.stderr.write(
        f"slogate: error: cannot write the reports to {report_dir}/ ({error.strerror or error}); "
        f"the verdict was {headline(report).removeprefix('slogate: ')}{'; ' + hint if hint else ''}\n"
    )
    sys.stderr.flush()
    return exitcodes.SETUP_FAILED
