"""The same workload and gate as chat.py, driven through the official `openai` SDK (chat only).

locust -f locustfiles/chat_openai.py --host http://127.0.0.1:8011 --headless -u 2 -t 60s
"""

from typing import Any

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from locust import events
from slogate.locustfiles.load import options  # registers the workload options
from slogate.locustfiles.load.endpoints import CHAT
from slogate.locustfiles.load.users_openai import OpenAIChatUser
from slogate.slo.plugin import settings
from slogate.slo.plugin.control import usage_exit

__all__ = ["OpenAIChatUser"]


@events.init.add_listener
def _chat_only(environment: Any, **_: Any) -> None:
    if settings.parsed(environment) is None:
        return
    endpoint = options.workload_options(environment).config.endpoint  # checked by options.py's init
    if endpoint != CHAT.name:
        usage_exit(environment, f"--endpoint {endpoint}: the openai SDK user streams chat only (use chat.py)")
