"""The load generator's own health: is it fast enough for its figures to mean anything?

A generator that is itself the bottleneck reports its own delay as the server's TTFT. Every
load-generating process runs `LoopLagMonitor` (slo/plugin/loop_lag.py), a greenlet that asks to wake up every 50 ms and
records how late it actually wakes (gevent's event-loop lag). At the end, `assess` looks at that
lag, at the open-loop send lag (how late requests left against their schedule) and at Locust's
CPU warning. Client delay can only add to measured latency, so it cannot turn a fail into a
pass; the gate uses the estimate to turn a fail that the delay could explain into
"inconclusive" (see slo/gate/evaluate.py), with advice on how many processes to run.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from slogate.slo.gate.metrics import MetricsStore

MAX_LOOP_LAG_P99_MS = 10.0
# Below this share of one core, a lagging event loop was not starved by its own work: other
# processes on the machine (a server beside the client, noisy neighbours) held the cores.
OWN_CPU_SATURATED = 0.5
# A request waits on the event loop up to twice before its first token (its send, then its
# response), and a stalled loop can hold up each wait by as much as its worst stall. The second
# wait does not count where reads carry the kernel's receive stamp (locustfiles/load/rx_timestamps.py),
# but TLS connections and the SDK user have none: the estimate stays the safe upper bound.
WAITS_BEFORE_FIRST_TOKEN = 2


@dataclass(frozen=True)
class Saturation:
    message: str
    client_delay_ms: float  # how much the client may have added to a TTFT (inf: unknown, CPU-bound)


def on_this_machine(target: str | None) -> str | None:
    """The target's host when it is this machine (localhost, a loopback address), else None."""
    host = urlsplit(target).hostname if target else None
    if not host:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return host
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def assess(
    metrics: MetricsStore,
    cpu_warning: bool,
    processes: int,
    max_lag_ms: float = MAX_LOOP_LAG_P99_MS,
    target: str | None = None,
) -> Saturation | None:
    """The load generator's saturation, if any, with advice; `target` (the run's URL) tells a server
    on this machine, whose advice differs: the demo, say, can only share the machine."""
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
    own = metrics.client_cpu_fraction
    if own is not None and own < OWN_CPU_SATURATED and not cpu_warning:
        local = on_this_machine(target)
        if local:
            return Saturation(
                f"the machine was busy ({'; '.join(signs)}; limit {max_lag_ms:g} ms) while the load generator "
                f"itself used {own:.0%} of a core: the server on this machine ({local}) held the cores, and the "
                "latencies include the wait for one. Expected where both share a machine (as in `slogate demo`): "
                "give each cores of its own (`taskset -c`), or run the load from another machine",
                max(delays),
            )
        return Saturation(
            f"the machine was busy ({'; '.join(signs)}; limit {max_lag_ms:g} ms) while the load generator itself "
            f"used {own:.0%} of a core: other processes held the cores, and its latencies include that delay. "
            "More load processes would not help: run it where nothing else competes for the CPU "
            "(not beside the server)",
            max(delays),
        )
    more = max(2, 2 * processes)
    used = "" if own is None else f", {own:.0%} of a core per process"
    return Saturation(
        f"the load generator was saturated ({'; '.join(signs)}{used}; limit {max_lag_ms:g} ms): its latencies "
        f"include client delay. Run with {more} processes (--processes {more}) or workers",
        max(delays),
    )


def summary(metrics: MetricsStore) -> dict[str, Any]:
    """The report's `self_check` section."""
    own = metrics.client_cpu_fraction
    return {
        "loop_lag_ms": metrics.loop_lag.summary_ms(),
        "send_lag_ms": metrics.get("all").latency["send_lag"].summary_ms(),
        "client_cpu_per_process": None if own is None else round(own, 3),
    }
