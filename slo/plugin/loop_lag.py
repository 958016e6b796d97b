"""The load generator's event-loop lag, measured by a greenlet in every load-generating process
(the self-check, slo/gate/self_check.py, judges it; this module is the only part of it that needs gevent)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gevent
from slogate.slo.gate.metrics import MetricsStore

TICK_S = 0.05


class LoopLagMonitor:
    """Records, at each tick, the event-loop lag and this process's own CPU time against wall
    time into whatever store `target()` returns (the self-check tells a busy machine from a
    saturated load generator by the latter)."""

    def __init__(self, target: Callable[[], MetricsStore]) -> None:
        self._target = target
        self._greenlet: Any = None

    def _run(self) -> None:
        perf, cpu = time.perf_counter, time.process_time
        while True:
            asked, cpu_before = perf(), cpu()
            gevent.sleep(TICK_S)
            woke = perf()
            store = self._target()
            store.loop_lag.record_us(int((woke - asked - TICK_S) * 1_000_000))
            store.client_cpu_s += cpu() - cpu_before
            store.client_wall_s += woke - asked

    def start(self) -> None:
        self.stop()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
