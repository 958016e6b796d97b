"""Open-loop load in rate stages (see locustfiles/load/stages.py):

    locust -f locustfiles/chat_open_loop_stages.py --host URL --headless --arrival-rate 2 \
        --stages "30s:1,60s:4,30s:8" --slo-file slo.yaml
"""

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from slogate.locustfiles.load import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.load.open_loop import OpenLoopChatUser
from slogate.locustfiles.load.stages import RateStages

__all__ = ["OpenLoopChatUser", "RateStages"]
