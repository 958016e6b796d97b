"""Slack's clients (slack-sdk), imported by `SlackNotifier.send` (slo/outputs/slack.py) only when
a message goes out: slack-sdk's import costs every process ~60 ms otherwise.

slack-sdk's clients log full request URLs (the webhook's secret) on retries, so they get a logger
that drops everything. Retries honour Retry-After and back off, never past the deadline."""

from __future__ import annotations

import logging
import time
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.webhook import WebhookClient
from slogate.slo.outputs.slack import SendResult

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


def post(
    message: dict[str, Any],
    *,
    webhook_url: str | None,
    bot_token: str | None,
    channel: str | None,
    deadline: float,
    timeout_s: int,
    api_base_url: str | None,
) -> SendResult:
    """One message through the webhook, or the bot token to `channel`; never raises."""
    retry = _BoundedRetry(deadline)
    try:
        if webhook_url:
            client = WebhookClient(webhook_url, timeout=timeout_s, logger=_SILENT, retry_handlers=[retry])
            resp = client.send_dict(message)
            ok = resp.status_code == 200
            detail = "sent" if ok else f"HTTP {resp.status_code}"
        else:
            kwargs: dict[str, Any] = {"base_url": api_base_url} if api_base_url else {}
            web = WebClient(token=bot_token, timeout=timeout_s, logger=_SILENT, retry_handlers=[retry], **kwargs)
            web.chat_postMessage(channel=channel or "", text=message["text"], blocks=message["blocks"])
            ok, detail = True, "sent"
    except SlackApiError as e:
        ok, detail = False, f"Slack API error {e.response.get('error', '') if e.response else ''}".strip()
    except Exception as e:  # a notifier must never break the gate
        ok, detail = False, type(e).__name__
    return SendResult(ok, retry.attempts, detail)
