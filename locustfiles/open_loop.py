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

from locustfiles.arrivals import PROCESSES, arrival_gaps
from locustfiles.timer import StreamTimer
from locustfiles.users import SseChatUser
from locustfiles.workload import ChatRequest
from slo.listener import report_record
from slo.locust_plugin import note_workload
from slo.record import ErrorKind, RequestRecord


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--arrival-rate", type=float, default=1.0, help="Requests per second per user (open loop)")
    parser.add_argument("--arrival-process", choices=PROCESSES, default="poisson", help="Gaps between sends")
    parser.add_argument("--burstiness", type=float, default=1.0, help="Gamma shape: < 1 burstier, 1 Poisson")
    parser.add_argument("--max-in-flight", type=int, default=64, help="Requests in flight per user before dropping")


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
        delay = self.next_at - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        req = self.workload.next_request(self.rng)
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
        self.pool.spawn(self._send, req, self.next_at, scheduled_wall)

    def _send(self, req: ChatRequest, scheduled: float, scheduled_wall: float) -> None:
        timer = StreamTimer(req.request_class, scheduled_wall, scheduled)
        self._send_and_report(json.dumps(req.body).encode(), timer, scheduled)

    def on_stop(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.join(timeout=self.environment.stop_timeout or 0)  # graceful stop: let requests finish
            pool.kill()
        super().on_stop()
