"""Streaming chat load with shared and unique prefixes, gated by slogate's SLO plugin.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8011 --headless -u 2 -t 60s \
        --slo-file slo/defaults/demo.yaml --slo-report-dir slogate-report

The workload's and the SLO gate's options: `slogate run -- --help` (Locust's own `--help` cannot list them: it prints
before importing the locustfile, locustio/locust#2917).
"""

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from slogate.locustfiles.load import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.load.users import ChatStreamUser

__all__ = ["ChatStreamUser"]
