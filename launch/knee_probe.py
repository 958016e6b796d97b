"""The way up: short probe steps that bracket the knee before any step is decided.

A decided pass needs many samples (p95 at 99 %: ~110 all under the target), which a low rate
takes long to send: the old way up, doubling from `--rate-start` with whole decided steps, spent
most of a search below the knee (1, 2 and 4 req/s: 35 s each, left undecided). Nothing on the way
up needs a decision, only a direction, so it is probed: each probe runs `--probe-s` seconds after
a short warm-up (the probe `RunStep` the caller gives), the rate doubling from `--rate-start`,
until a probe is over a target (its verdict fail, or an objective failed in an inconclusive one)
or `--rate-max` is reached. A probe is listed (`probe` true) but bounds nothing, with one
exception: a probe the anytime-valid bounds decided fail is a decided fail (its short warm-up
from an empty queue can only have lowered its latencies), so the search needs no step there
again. The decided steps then start at the first probe over (a fail far above the knee is decided
in seconds), and on the way down go to the geometric middle between the lowest failing rate and
the highest probe that looked fine (launch/knee_next.py `_way_down`), not to half the rate: the slow
decided pass at a low rate is skipped. A probe inconclusive for too few samples at a low rate
says "not over": the way goes on up.
"""

from __future__ import annotations

from collections.abc import Callable


def probe_up(run_probe: Callable[[float], bool], rate_start: float, rate_max: float) -> float:
    """Probe from `rate_start`, doubling, until a probe is over (`run_probe(rate)`); its rate, where
    the decided steps start, or `rate_max` when none was over up to it."""
    rate = rate_start
    while not run_probe(rate) and rate < rate_max:
        rate = min(rate * 2, rate_max)
    return rate
