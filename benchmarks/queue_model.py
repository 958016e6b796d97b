"""The fault server's queue as the capacity benchmarks model it (benchmarks/capacity_repeat.py,
benchmarks/capacity_step.py): its shape, from the same options in each, and the true knee at a p95
TTFT target, computed independently of slogate by simulating the queue."""

from __future__ import annotations

import argparse
import heapq
from dataclasses import dataclass

import numpy as np


def add_shape_arguments(ap: argparse.ArgumentParser) -> None:
    """The shape's options (`Shape.of` reads them) and the p95 TTFT target (`--target-ms`)."""
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--ttft-ms", type=float, default=200)
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--lognormal", type=float, default=0.0, help="sigma of the hold-time factor (fault server key)")
    ap.add_argument("--target-ms", type=float, default=320, help="p95 TTFT target")


@dataclass(frozen=True, slots=True)
class Shape:
    """The fault server's queue: `slots` streams at once, each holding its slot `service_ms`."""

    slots: int = 8
    ttft_ms: float = 200.0
    tokens: int = 5
    itl_ms: float = 50.0
    lognormal: float = 0.0  # sigma of the per-request factor on every hold time (0: deterministic, M/D/c)

    @property
    def service_ms(self) -> float:
        return self.ttft_ms + (self.tokens - 1) * self.itl_ms

    @property
    def capacity_rps(self) -> float:
        """Requests per second the slots serve flat out (the factor's mean is 1)."""
        return self.slots * 1000 / self.service_ms

    def model(self, seed: int = 0) -> str:
        """The `--model` that asks the fault server for this shape (`seed`: its lognormal factors'
        stream, one per search, so that searches are independent)."""
        spec = f"slots={self.slots},ttft_ms={self.ttft_ms:g},tokens={self.tokens},itl_ms={self.itl_ms:g}"
        return spec + (f",lognormal={self.lognormal:g},seed={seed}" if self.lognormal else "")

    def factors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` requests' factors on every hold time: lognormal with mean 1, or all 1 (M/D/c)."""
        s = self.lognormal
        return rng.lognormal(-s * s / 2, s, n) if s else np.ones(n)

    def waits_ms(self, arrivals_ms: np.ndarray, factor: np.ndarray) -> np.ndarray:
        """Each arrival's wait for a slot (ms) in the FCFS queue, its slot held `factor` x `service_ms`."""
        holds = (factor * self.service_ms).tolist()
        free = [0.0] * self.slots  # when each slot is next free (ms), a heap
        waits = np.empty(len(holds))
        for i, t in enumerate(arrivals_ms.tolist()):
            start = max(t, free[0])
            waits[i] = start - t
            heapq.heapreplace(free, start + holds[i])
        return waits

    def kind(self) -> str:
        return f"M/{'G' if self.lognormal else 'D'}/{self.slots}"

    @classmethod
    def of(cls, args: argparse.Namespace) -> Shape:
        """The shape `add_shape_arguments`' options give."""
        return cls(args.slots, args.ttft_ms, args.tokens, args.itl_ms, args.lognormal)


def ttft_samples(rate: float, shape: Shape, arrivals: int = 400_000, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Steady-state queue waits and TTFTs (ms) of the shape's FCFS queue at `rate` req/s: `arrivals`
    Poisson arrivals after a tenth as many to reach the steady state (discarded)."""
    rng = np.random.default_rng(seed)
    warm = arrivals // 10
    n = arrivals + warm
    times = np.cumsum(rng.exponential(1.0, n)) * (1000 / rate)  # the same draws at every rate
    factor = shape.factors(rng, n)
    waits = shape.waits_ms(times, factor)
    return waits[warm:], (waits + factor * shape.ttft_ms)[warm:]


def p95_ttft_ms(rate: float, shape: Shape, arrivals: int = 400_000, seed: int = 1) -> float:
    """The steady-state p95 TTFT (ms) of the shape's queue at `rate` req/s (`ttft_samples`)."""
    return float(np.percentile(ttft_samples(rate, shape, arrivals, seed)[1], 95))


def true_knee(shape: Shape, target_ms: float, arrivals: int = 400_000) -> float:
    """The rate (req/s) at which the steady-state p95 TTFT reaches `target_ms` (bisection)."""
    low, high = 0.01 * shape.capacity_rps, shape.capacity_rps
    if p95_ttft_ms(low, shape, arrivals) > target_ms:
        raise ValueError(f"p95 TTFT above {target_ms:g} ms even at {low:g} req/s: no knee")
    for _ in range(22):
        mid = (low + high) / 2
        low, high = (mid, high) if p95_ttft_ms(mid, shape, arrivals) <= target_ms else (low, mid)
    return (low + high) / 2
