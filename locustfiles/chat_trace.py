"""Trace replay: a Mooncake JSONL trace sent open loop at its own times, with its prefix sharing.

    locust -f locustfiles/chat_trace.py --host http://127.0.0.1:8011 --headless -u 1 \
        --trace locustfiles/data/sample_trace.jsonl --trace-speedup 4 --slo-file slo.yaml

The run ends when the trace does (no --run-time needed); with --processes N use -u N.
"""

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from slogate.locustfiles.load import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.load.trace_user import TraceReplayUser

__all__ = ["TraceReplayUser"]
