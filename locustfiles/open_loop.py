"""Open-loop load: requests leave at scheduled times, however slowly the server answers.

Closed-loop users (N users, each waiting for its answer) slow down with the server, so they
never measure the overload they cause (coordinated omission). `OpenLoopChatUser` sends at
`--arrival-rate` requests/s per user (so the total is users x rate, and Locust's user ramp, the
web UI and load shapes ramp the rate), each request in its own greenlet, and measures every
latency from the *scheduled* send time. A request that finds all `--max-in-flight` slots busy is
counted as `dropped`, never silently skipped, and makes the run inconclusive.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import gevent
import gevent.pool
from locust import events, task
from slogate.locustfiles.arrivals import PROCESSES, arrival_gaps
from slogate.locustfiles.timer import StreamTimer
from slogate.locustfiles.users import SseChatUser
from slogate.slo.listener import report_record
from slogate.slo.locust_plugin import note_workload
from slogate.slo.record import ErrorKind, RequestRecord


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--arrival-rate", type=float, default=1.0, help="Requests per second per user (open loop)")
    parser.add_argument("--arrival-process", choices=PROCESSES, default="poisson", help="Gaps between sends")
    parser.add_argument("--burstiness", type=float, default=1.0, help="Gamma shape: < 1 burstier, 1 Poisson")
    parser.add_argument("--max-in-flight", type=int, default=64, help="Requests in flight per user before dropping")


# gevent's timers fire up to a millisecond late (the event loop waits in epoll, whose timeout is
# in whole milliseconds), and every such late send counts as TTFT: sleep until just before the
# scheduled time, then yield to other greenlets until it comes (benchmarks/RESULTS.md, "floor").
_SPIN_S = 0.0015


def wait_until(deadline: float) -> None:
    """Return at `deadline` (a perf_counter reading), within microseconds rather than a millisecond."""
    perf = time.perf_counter
    coarse = deadline - perf() - _SPIN_S
    if coarse > 0:
        gevent.sleep(coarse)
    while perf() < deadline:
        gevent.sleep(0)


class OpenLoopChatUser(SseChatUser):
    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.concurrency = opts.max_in_flight
        super().on_start()
        self.pool = gevent.pool.Pool(opts.max_in_flight)
        rng = random.Random(f"{self.workload.config.seed}:arrivals:{id(self)}")
        self.gaps = arrival_gaps(opts.arrival_process, opts.arrival_rate, rng, opts.burstiness)
        self.next_at = time.perf_counter()
        arrival = {
            "process": opts.arrival_process,
            "rate_per_user": opts.arrival_rate,
            "burstiness": opts.burstiness,
            "max_in_flight": opts.max_in_flight,
        }
        note_workload(self.environment, self.workload.model, {**self.workload.config.describe(), "open_loop": arrival})

    @task
    def arrive(self) -> None:
        self.next_at += next(self.gaps)
        req = self.workload.next_request(self.rng)  # built before the wait: off the clock
        body = json.dumps(req.body).encode()
        wait_until(self.next_at)
        scheduled_wall = time.time() - (time.perf_counter() - self.next_at)
        if self.pool.full():
            dropped = RequestRecord(
                req.request_class,
                scheduled_wall,
                e2e_us=0,
                error_kind=ErrorKind.DROPPED,
                error_message=f"all {self.pool.size} in-flight slots busy at the scheduled time",
            )
            report_record(self.environment, dropped)
            return
        self.pool.spawn(self._send, req.request_class, body, self.next_at, scheduled_wall)
        gevent.sleep(0)  # the send goes out now, before this greenlet builds the next request

    def _send(self, request_class: str, body: bytes, scheduled: float, scheduled_wall: float) -> None:
        timer = StreamTimer(request_class, scheduled_wall, scheduled)
        self._report(timer, lambda: self._stream(body, timer), scheduled)

    def on_stop(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.join(timeout=self.environment.stop_timeout or 0)  # graceful stop: let requests finish
            pool.kill()
        super().on_stop()
