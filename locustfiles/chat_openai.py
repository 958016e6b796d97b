"""The same workload and gate as chat.py, driven through the official `openai` SDK.

locust -f locustfiles/chat_openai.py --host http://127.0.0.1:8011 --headless -u 2 -t 60s
"""

import slo.locust_plugin  # noqa: F401  (registers the SLO options and the gate)
from locustfiles import options  # noqa: F401  (registers the workload options)
from locustfiles.users_openai import OpenAIChatUser

__all__ = ["OpenAIChatUser"]
