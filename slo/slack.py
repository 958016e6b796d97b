"""Slack alerts: one Block Kit message per run, sent by the master (or the only process).

Credentials come from the environment only: `SLACK_WEBHOOK_URL` (an incoming webhook), or
`SLACK_BOT_TOKEN` with `--slack-channel`. They are never printed, logged or written anywhere:
slack-sdk's clients log full request URLs (the webhook's secret) on retries, so they get a
logger that drops everything. Slack failures never change the gate's verdict: retries honour
Retry-After and back off within a fixed time budget, then one warning line says what happened.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient

log = logging.getLogger("slogate.slack")
NOTIFY_CHOICES = ("fail", "regression", "inconclusive", "error", "pass", "recovery")
DEFAULT_NOTIFY = "fail,regression,inconclusive,error"

_SILENT = logging.getLogger("slogate.slack.sdk")  # handed to slack-sdk: never emits a record
_SILENT.disabled = True
_SILENT.propagate = False


class _BoundedRetry(RetryHandler):
    """Retry 429 (after Retry-After), 5xx and connection errors, never past the deadline."""

    def __init__(self, deadline: float, max_retry_count: int = 5) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.deadline = deadline
        self.attempts = 1

    def _wait_for(self, state: RetryState, response: HttpResponse | None) -> float:
        if response is not None and response.status_code == 429:
            for key, value in response.headers.items():
                if key.lower() == "retry-after":
                    raw = value[0] if isinstance(value, list) else value
                    try:
                        return float(raw)
                    except ValueError:
                        break
            return 1.0
        return 0.5 * 2**state.current_attempt

    def _can_retry(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        retriable = error is not None or (
            response is not None and (response.status_code == 429 or response.status_code >= 500)
        )
        return retriable and time.monotonic() + self._wait_for(state, response) < self.deadline

    def prepare_for_next_attempt(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        state.next_attempt_requested = True
        time.sleep(self._wait_for(state, response))
        state.increment_current_attempt()
        self.attempts += 1


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
        budget_s: float = 20.0,
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
    def from_env(cls, channel: str | None = None, budget_s: float = 20.0) -> SlackNotifier | None:
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
        retry = _BoundedRetry(time.monotonic() + self.budget_s)
        try:
            if self._webhook_url:
                client = WebhookClient(
                    self._webhook_url, timeout=self.timeout_s, logger=_SILENT, retry_handlers=[retry]
                )
                resp = client.send_dict(message)
                ok = resp.status_code == 200
                detail = "sent" if ok else f"HTTP {resp.status_code}"
            else:
                kwargs: dict[str, Any] = {"base_url": self._api_base_url} if self._api_base_url else {}
                web = WebClient(
                    token=self._bot_token, timeout=self.timeout_s, logger=_SILENT, retry_handlers=[retry], **kwargs
                )
                web.chat_postMessage(channel=self.channel or "", text=message["text"], blocks=message["blocks"])
                ok, detail = True, "sent"
        except SlackApiError as e:
            ok, detail = False, f"Slack API error {e.response.get('error', '') if e.response else ''}".strip()
        except Exception as e:  # a notifier must never break the gate
            ok, detail = False, type(e).__name__
        return SendResult(ok, retry.attempts, detail)


def reasons_to_notify(report: dict[str, Any], policy: set[str], baseline_verdict: str | None) -> list[str]:
    verdict = report["verdict"]
    reasons = []
    if verdict in policy and verdict in ("fail", "inconclusive", "error", "pass"):
        reasons.append(verdict)
    regressions = (report.get("regression") or {}).get("comparisons") or []
    if "regression" in policy and any(c["verdict"] == "regression" for c in regressions):
        reasons.append("regression")
    if "recovery" in policy and verdict == "pass" and baseline_verdict in ("fail", "inconclusive"):
        reasons.append("recovery")
    return reasons


def ci_run_url(env: dict[str, str] | None = None) -> str | None:
    e = os.environ if env is None else env
    if e.get("GITHUB_RUN_ID") and e.get("GITHUB_REPOSITORY"):
        return f"{e.get('GITHUB_SERVER_URL', 'https://github.com')}/{e['GITHUB_REPOSITORY']}/actions/runs/{e['GITHUB_RUN_ID']}"
    return e.get("CI_JOB_URL") or e.get("BUILD_URL") or None


def build_message(report: dict[str, Any], ci_url: str | None = None) -> dict[str, Any]:
    verdict = report["verdict"].upper()
    run = report.get("run") or {}
    title = f"slogate {verdict} (exit {report.get('exit_code')})"
    target = f"`{run.get('target')}` model `{run.get('model')}`" if run.get("target") else "target unknown"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Target:* {target}"}},
    ]
    failing = [s for s in report.get("slos", []) if s["result"] != "pass"]
    if failing:
        lines = [
            f"• *{s['name']}* `{s['objective']}`: observed {s['observed'] if s['observed'] is not None else 'no data'}"
            f"{' ' + s['unit'] if s['unit'] and s['observed'] is not None else ''} ({s['result']})"
            for s in failing
        ]
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "*SLOs not met:*\n" + "\n".join(lines)}})
    comparisons = (report.get("regression") or {}).get("comparisons") or []
    worse = [c for c in comparisons if c["verdict"] != "ok"]
    if worse:
        lines = [
            f"• *{c['name']}*: {c['baseline_ms']} → {c['current_ms']} ms ({c['change_pct']:+.1f}%, "
            f"95% interval {c['interval_pct'][0]:+.1f}..{c['interval_pct'][1]:+.1f}%, "
            f"tolerance +{c['max_increase_pct']:g}%): {c['verdict']}"
            for c in worse
            if c["change_pct"] is not None
        ]
        if lines:
            blocks.append(
                {"type": "section", "text": {"type": "mrkdwn", "text": "*Against the baseline:*\n" + "\n".join(lines)}}
            )
    for reason in report.get("reasons") or []:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": reason[:300]}]})
    w = run.get("workload") or {}
    if w:
        workload = (
            f"{w.get('shared_prefixes')} shared prefixes x {w.get('shared_prefix_tokens')} tokens, "
            f"shared fraction {w.get('shared_fraction')}, max_tokens {w.get('max_tokens')}, users {run.get('users')}"
        )
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"Workload: {workload}"}]})
    if ci_url:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"<{ci_url}|CI run>"}})
    return {"text": title, "blocks": blocks}
