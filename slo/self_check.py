"""The load generator's own health: is it fast enough for its figures to mean anything?

A generator that is itself the bottleneck reports its own delay as the server's TTFT. Every
load-generating process runs `LoopLagMonitor`, a greenlet that asks to wake up every 50 ms and
records how late it actually wakes (gevent's event-loop lag). At the end, `assess` looks at that
lag, at the open-loop send lag (how late requests left against their schedule) and at Locust's
CPU warning. Client delay can only add to measured latency, so it cannot turn a fail into a
pass; the gate uses the estimate to turn a fail that the delay could explain into
"inconclusive" (see slo/evaluate.py), with advice on how many processes to run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from slogate.slo.histogram import LatencyHistogram
from slogate.slo.metrics import MetricsStore

TICK_S = 0.05
MAX_LOOP_LAG_P99_MS = 10.0
# A request waits on the event loop up to twice before its first token (its send, then its
# response), and a stalled loop can hold up each wait by as much as its worst stall. The second
# wait does not count where reads carry the kernel's receive stamp (locustfiles/rx_timestamps.py),
# but TLS connections and the SDK user have none: the estimate stays the safe upper bound.
WAITS_BEFORE_FIRST_TOKEN = 2


class LoopLagMonitor:
    """Records event-loop lag into whatever histogram `target()` returns at each tick."""

    def __init__(self, target: Callable[[], LatencyHistogram]) -> None:
        self._target = target
        self._greenlet: Any = None

    def _run(self) -> None:
        perf = time.perf_counter
        while True:
            asked = perf()
            gevent.sleep(TICK_S)
            self._target().record_us(int((perf() - asked - TICK_S) * 1_000_000))

    def start(self) -> None:
        self.stop()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None


@dataclass(frozen=True)
class Saturation:
    message: str
    client_delay_ms: float  # how much the client may have added to a TTFT (inf: unknown, CPU-bound)


def assess(
    metrics: MetricsStore, cpu_warning: bool, processes: int, max_lag_ms: float = MAX_LOOP_LAG_P99_MS
) -> Saturation | None:
    signs, delays = [], []
    loop_p99 = metrics.loop_lag.percentile_ms(99)
    if loop_p99 is not None and loop_p99 > max_lag_ms:
        signs.append(f"event-loop lag p99 {loop_p99:.1f} ms")
        delays.append(WAITS_BEFORE_FIRST_TOKEN * (metrics.loop_lag.max_ms() or loop_p99))
    send_p99 = metrics.get("all").latency["send_lag"].percentile_ms(99)
    if send_p99 is not None and send_p99 > max_lag_ms:
        signs.append(f"send lag p99 {send_p99:.1f} ms behind schedule")
        delays.append(send_p99)
    if cpu_warning:
        signs.append("CPU above 90%")
        delays.append(float("inf"))
    if not signs:
        return None
    more = max(2, 2 * processes)
    return Saturation(
        f"the load generator was saturated ({'; '.join(signs)}; limit {max_lag_ms:g} ms): its latencies include "
        f"client delay. Run with {more} processes (--processes {more}) or workers",
        max(delays),
    )


def summary(metrics: MetricsStore) -> dict[str, Any]:
    """The report's `self_check` section."""
    return {
        "loop_lag_ms": metrics.loop_lag.summary_ms(),
        "send_lag_ms": metrics.get("all").latency["send_lag"].summary_ms(),
    }
