"""Open-loop load: requests leave at scheduled times, however slowly the server answers.

Closed-loop users (N users, each waiting for its answer) slow down with the server, so they
never measure the overload they cause (coordinated omission). `OpenLoopChatUser` sends at
`--arrival-rate` requests/s per user (so the total is users x rate, and Locust's user ramp, the
web UI and load shapes ramp the rate), each request in its own greenlet, and measures every
latency from the *scheduled* send time. A request that finds all `--max-in-flight` slots busy is
counted as `dropped`, never silently skipped, and makes the run inconclusive.

With `--turns` above 1 the arrivals start conversations: each later turn is scheduled when the
previous answer has ended, plus the think time, and measured from that moment, as a first turn is
from its arrival. In the steady state the request rate is the arrival rate times the mean number
of turns per conversation. A later turn that finds every slot busy is dropped and ends its
conversation; one that fails ends it too.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from typing import Any

import gevent
import gevent.pool
from locust import events, task
from slogate.locustfiles.load.arrivals import PROCESSES, arrival_gaps
from slogate.locustfiles.load.options import workload_options
from slogate.locustfiles.load.users import SseChatUser, start_timer
from slogate.locustfiles.load.workload import ChatRequest
from slogate.slo.gate.facts import OpenLoopFacts, WorkloadFacts
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.plugin.listener import report_record
from slogate.slo.plugin.parser import group


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    arrivals = group(parser, "slogate: open loop (arrivals)")
    arrivals("--arrival-rate", type=float, default=1.0, help="Requests per second per user (open loop)")
    arrivals("--arrival-process", choices=PROCESSES, default="poisson", help="Gaps between sends")
    arrivals("--burstiness", type=float, default=1.0, help="Gamma shape: < 1 burstier, 1 Poisson")
    arrivals("--max-in-flight", type=int, default=64, help="Requests in flight per user before dropping")


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


class OpenLoopSender(SseChatUser):
    """What open-loop users share: requests sent at scheduled times, each in an in-flight slot of
    its own (or dropped), conversations' later turns scheduled after their answers."""

    abstract = True

    def on_start(self) -> None:
        max_in_flight = workload_options(self.environment).arrivals.max_in_flight
        self.concurrency = max_in_flight
        super().on_start()
        self.pool = gevent.pool.Pool(max_in_flight)
        self.thinking = gevent.pool.Group()  # conversations waiting to send their next turn
        self.stopping = False

    def _dispatch(self, req: ChatRequest, scheduled: float) -> None:
        """Send `req` at `scheduled` (a perf_counter reading) in a slot of its own, or count it dropped."""
        body = json.dumps(req.body).encode()  # built before the wait: off the clock
        wait_until(scheduled)
        scheduled_wall = time.time() - (time.perf_counter() - scheduled)
        if self.pool.full():
            dropped = RequestRecord(
                req.request_class,
                scheduled_wall,
                e2e_us=0,
                error_kind=ErrorKind.DROPPED,
                error_message=f"all {self.pool.size} in-flight slots busy at the scheduled time",
                tags=req.tags,
            )
            report_record(self.environment, dropped)
            return
        self.pool.spawn(self._send, req, body, scheduled, scheduled_wall)
        gevent.sleep(0)  # the send goes out now, before this greenlet builds the next request

    def _send(self, req: ChatRequest, body: bytes, scheduled: float, scheduled_wall: float) -> None:
        timer = start_timer(req, scheduled_wall, scheduled)
        record = self._report(timer, lambda: self._stream(body, timer), scheduled)
        follow_up = None if self.stopping else self.follow_up(req, record, timer)
        if follow_up is not None:
            at = time.perf_counter() + self.workload.think_time_s(self.rng)
            self.thinking.spawn(self._dispatch, follow_up, at)

    def on_stop(self) -> None:
        self.stopping = True
        pool = getattr(self, "pool", None)
        if pool is not None:
            self.thinking.kill()  # turns not yet sent are not requests
            pool.join(timeout=self.environment.stop_timeout or 0)  # graceful stop: let requests finish
            pool.kill()
        super().on_stop()


class OpenLoopChatUser(OpenLoopSender):
    """Arrivals at `--arrival-rate` per user, from `--arrival-process`."""

    def on_start(self) -> None:
        super().on_start()
        arrivals = workload_options(self.environment).arrivals
        rng = random.Random(f"{self.workload.config.seed}:arrivals:{id(self)}")
        self.gaps = arrival_gaps(arrivals.process, arrivals.rate, rng, arrivals.burstiness)
        self.next_at = time.perf_counter()

    def workload_facts(self) -> WorkloadFacts:
        arrivals = workload_options(self.environment).arrivals
        arrival = OpenLoopFacts(arrivals.process, arrivals.rate, arrivals.burstiness, arrivals.max_in_flight)
        return replace(super().workload_facts(), open_loop=arrival)

    @task
    def arrive(self) -> None:
        self.next_at += next(self.gaps)
        self._dispatch(self.workload.next_request(self.rng), self.next_at)
