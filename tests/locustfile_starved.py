"""A deliberately starved load generator: the chat user plus a user that hogs the CPU without
yielding (tests/test_open_loop.py checks that this is reported as inconclusive, not a fail)."""

import time

from locust import User, constant, task

import slo.locust_plugin  # noqa: F401
from locustfiles import options  # noqa: F401
from locustfiles.users import ChatStreamUser

__all__ = ["ChatStreamUser", "CpuHog"]


class CpuHog(User):
    wait_time = constant(0.02)
    fixed_count = 1

    @task
    def burn(self) -> None:
        end = time.perf_counter() + 0.08  # 80 ms without yielding to the event loop
        while time.perf_counter() < end:
            pass
