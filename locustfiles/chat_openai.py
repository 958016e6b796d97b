"""The same workload and gate as chat.py, driven through the official `openai` SDK (chat only).

locust -f locustfiles/chat_openai.py --host http://127.0.0.1:8011 --headless -u 2 -t 60s
"""

from typing import Any

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from locust import events
from slogate.locustfiles.load import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.load.endpoints import CHAT
from slogate.locustfiles.load.users_openai import OpenAIChatUser
from slogate.slo.plugin.control import usage_exit

__all__ = ["OpenAIChatUser"]


@events.init.add_listener
def _chat_only(environment: Any, **_: Any) -> None:
    opts = environment.parsed_options
    if opts is not None and opts.endpoint != CHAT.name:
        usage_exit(environment, f"--endpoint {opts.endpoint}: the openai SDK user streams chat only (use chat.py)")
