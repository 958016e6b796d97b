"""The same workload and gate as chat.py, driven through the official `openai` SDK.

locust -f locustfiles/chat_openai.py --host http://127.0.0.1:8011 --headless -u 2 -t 60s
"""

import slogate.slo.locust_plugin  # noqa: F401  (registers the SLO options and the gate)
from slogate.locustfiles import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.users_openai import OpenAIChatUser

__all__ = ["OpenAIChatUser"]
