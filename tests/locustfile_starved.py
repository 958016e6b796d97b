"""A deliberately starved load generator: the open-loop chat user plus a user that hogs the CPU
without yielding (tests/load/test_open_loop.py checks that this is reported as inconclusive, not a
fail). The hog makes sends late against their schedule, which counts in TTFT; a late *read* would
not (the kernel's receive stamps keep it out, tests/load/test_users.py)."""

import time

import slogate.slo.plugin  # noqa: F401
from locust import User, constant, task
from slogate.locustfiles.load import options  # noqa: F401
from slogate.locustfiles.load.open_loop import OpenLoopChatUser

__all__ = ["CpuHog", "OpenLoopChatUser"]


class CpuHog(User):
    wait_time = constant(0.02)
    fixed_count = 1

    @task
    def burn(self) -> None:
        end = time.perf_counter() + 0.08  # 80 ms without yielding to the event loop
        while time.perf_counter() < end:
            pass
