"""Slack alerts: one Block Kit message per run, sent by the master (or the only process).

Credentials come from the environment only: `SLACK_WEBHOOK_URL` (an incoming webhook), or
`SLACK_BOT_TOKEN` with `--slack-channel`. They are never printed, logged or written anywhere
(slo/outputs/slack_client.py silences slack-sdk's logging, which shows a webhook's URL on retries).
Slack failures never change the gate's verdict: retries honour Retry-After and back off within a
fixed time budget, then one warning line says what happened.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from slogate.slo.gate.report import Report
from slogate.slo.gate.verdict import Outcome, RegressionStatus, Verdict
from slogate.slo.outputs.render import headline, observed_text

log = logging.getLogger("slogate.slack")
NOTIFY_CHOICES = ("fail", "regression", "inconclusive", "error", "pass", "recovery")
DEFAULT_NOTIFY = "fail,regression,inconclusive,error"
DEFAULT_BUDGET_S = 20.0
# Block Kit's limits: Slack refuses a message past any of them (`invalid_blocks`), and the alert
# would be lost exactly when everything breaks.
SECTION_CHARS, HEADER_CHARS, MAX_BLOCKS = 3000, 150, 50


@dataclass
class SendResult:
    ok: bool
    attempts: int
    detail: str  # one line, never a secret


class SlackNotifier:
    def __init__(
        self,
        *,
        webhook_url: str | None = None,
        bot_token: str | None = None,
        channel: str | None = None,
        budget_s: float = DEFAULT_BUDGET_S,
        timeout_s: int = 5,
        api_base_url: str | None = None,
    ) -> None:
        if not webhook_url and not (bot_token and channel):
            raise ValueError("Slack needs SLACK_WEBHOOK_URL, or SLACK_BOT_TOKEN with --slack-channel")
        self._webhook_url, self._bot_token, self.channel = webhook_url, bot_token, channel
        self.budget_s, self.timeout_s = budget_s, timeout_s
        self._api_base_url = api_base_url

    def __repr__(self) -> str:  # never show the credentials
        kind = "webhook" if self._webhook_url else f"bot token, channel {self.channel}"
        return f"SlackNotifier({kind})"

    @classmethod
    def from_env(cls, channel: str | None = None, budget_s: float = DEFAULT_BUDGET_S) -> SlackNotifier | None:
        webhook, token = os.environ.get("SLACK_WEBHOOK_URL"), os.environ.get("SLACK_BOT_TOKEN")
        if webhook:
            return cls(webhook_url=webhook, budget_s=budget_s)
        if token and channel:
            return cls(
                bot_token=token, channel=channel, budget_s=budget_s, api_base_url=os.environ.get("SLACK_API_URL")
            )
        if token:
            log.warning("slogate: SLACK_BOT_TOKEN is set but --slack-channel is not; no Slack alert")
        return None

    def send(self, message: dict[str, Any]) -> SendResult:
        # slack-sdk is imported only to send (~60 ms of every Locust process's start otherwise)
        from slogate.slo.outputs.slack_client import post

        return post(
            message,
            webhook_url=self._webhook_url,
            bot_token=self._bot_token,
            channel=self.channel,
            deadline=time.monotonic() + self.budget_s,
            timeout_s=self.timeout_s,
            api_base_url=self._api_base_url,
        )


class NotifyPolicyError(ValueError):
    """An unknown `--slack-notify` value; str() is one line."""


def parse_notify(text: str) -> frozenset[str]:
    """`fail,regression` -> the set; an unknown value (a typo would silently disable alerts) is an error."""
    values = [v.strip() for v in (text or "").split(",") if v.strip()]
    unknown = [v for v in values if v not in NOTIFY_CHOICES]
    if unknown:
        raise NotifyPolicyError(
            f"--slack-notify: unknown value {unknown[0]!r}; choose from {', '.join(NOTIFY_CHOICES)}"
        )
    return frozenset(values)


def reasons_to_notify(report: Report, policy: frozenset[str], baseline_verdict: str | None = None) -> list[str]:
    """Which of the policy's occasions this report is (empty: send nothing)."""
    verdict = report.verdict
    reasons = []
    if verdict in policy and verdict != Verdict.UNGATED:
        reasons.append(str(verdict))
    regression = report.regression
    if "regression" in policy and regression is not None and regression.status == RegressionStatus.REGRESSION:
        reasons.append("regression")
    if "recovery" in policy and verdict == Verdict.PASS and baseline_verdict in ("fail", "inconclusive"):
        reasons.append("recovery")
    return reasons


def ci_run_url(env: dict[str, str] | None = None) -> str | None:
    e = os.environ if env is None else env
    if e.get("GITHUB_RUN_ID") and e.get("GITHUB_REPOSITORY"):
        return f"{e.get('GITHUB_SERVER_URL', 'https://github.com')}/{e['GITHUB_REPOSITORY']}/actions/runs/{e['GITHUB_RUN_ID']}"
    return e.get("CI_JOB_URL") or e.get("BUILD_URL") or None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounded_list(title: str, lines: list[str], more_hint: str) -> str:
    """`title` and as many lines as fit in one section (each clipped), then "and K more"."""
    budget = SECTION_CHARS - len(title) - 80  # room for the "and K more" line
    kept: list[str] = []
    for line in lines:
        line = _clip(line, 500)
        if sum(len(k) + 1 for k in kept) + len(line) + 1 > budget:
            break
        kept.append(line)
    text = title + "\n" + "\n".join(kept)
    if len(kept) < len(lines):
        text += f"\n…and {len(lines) - len(kept)} more {more_hint}"
    return text


def _severity(r: Any) -> float:
    """How far an objective is from its target (worst first); no data sorts last."""
    o, v = r.objective, r.observed
    if v is None:
        return -1.0
    if o.max is not None and v > o.max:
        return v / o.max if o.max else float("inf")
    if o.min is not None and v < o.min:
        return o.min / v if v else float("inf")
    return 0.0


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, SECTION_CHARS)}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(text, SECTION_CHARS)}]}


def build_message(report: Report, ci_url: str | None = None, report_path: str | None = None) -> dict[str, Any]:
    """One Block Kit message within Slack's limits, whatever the report holds: the worst breaches
    and regressions first, "and K more" for the rest, and where the full report is."""
    run = report.run
    title = headline(report)
    see = f"(see {report_path})" if report_path else "(see slo-report.json)"
    target = f"`{run.target}` model `{run.model}`" if run.target else "target unknown"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _clip(title, HEADER_CHARS)}},
        _section(f"*Target:* {target}"),
    ]
    failing = sorted(report.failing, key=_severity, reverse=True)
    if failing:
        lines = [
            f"• *{r.objective.name}* `{r.objective.describe()}`: observed "
            f"{observed_text(r.observed, r.objective.kind.unit)} ({r.result})"
            for r in failing
        ]
        blocks.append(_section(_bounded_list("*SLOs not met:*", lines, see)))
    comparisons = report.regression.comparisons if report.regression else ()
    worse = sorted(
        (c for c in comparisons if c.status != RegressionStatus.OK and c.change_pct is not None and c.interval_pct),
        key=lambda c: c.change_pct or 0.0,
        reverse=True,
    )
    if worse:
        lines = [
            f"• *{c.rule.name}*: {c.baseline_ms} → {c.current_ms} ms ({c.change_pct:+.1f}%, "
            f"95% interval {c.interval_pct[0]:+.1f}..{c.interval_pct[1]:+.1f}%, "
            f"tolerance +{c.rule.max_increase_pct:g}%): {c.status}"
            for c in worse
            if c.interval_pct is not None and c.change_pct is not None
        ]
        blocks.append(_section(_bounded_list("*Against the baseline:*", lines, see)))
    if report.reasons:
        blocks.append(_context(_bounded_list("*Why:*", [f"• {r}" for r in report.reasons], see)))
    stopped = report.stop_line()
    if stopped:
        blocks.append(_context(stopped))
    mix = run.workload.prompt_mix
    if mix is not None:
        workload = (
            f"{mix.shared_prefixes} shared prefixes x {mix.shared_prefix_tokens} tokens, "
            f"shared fraction {mix.shared_fraction}, max_tokens {mix.max_tokens}, users {run.users}"
        )
        blocks.append(_context(f"Workload: {workload}"))
    links = [f"<{ci_url}|CI run>"] if ci_url else []
    if report_path:
        links.append(f"full report: `{report_path}`")
    if links:
        blocks.append(_section(" · ".join(links)))
    failed = sum(r.result == Outcome.FAIL for r in report.slos)
    text = f"{title}: {failed} of {len(report.slos)} SLOs failed" if report.slos else title
    return {"text": _clip(text, SECTION_CHARS), "blocks": blocks[:MAX_BLOCKS]}
