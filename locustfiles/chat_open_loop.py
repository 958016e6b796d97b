"""Open-loop streaming chat load: `--arrival-rate` requests/s per user, measured from the schedule.

    locust -f locustfiles/chat_open_loop.py --host http://127.0.0.1:8011 --headless -u 4 -t 60s \
        --arrival-rate 2 --arrival-process poisson --slo-file slo.yaml     # 8 requests/s in total
"""

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from slogate.locustfiles.load import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.load.open_loop import OpenLoopChatUser

__all__ = ["OpenLoopChatUser"]
