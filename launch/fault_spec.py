"""The fault server's spec: the request's `model` string read as its behaviour (launch/fault_server.py
documents every key), the faults `mix=` injects, and the seeded draws: `mix`'s faults with `seed=`,
and `lognormal=`'s service-time factors.

A lognormal factor has mean 1: mu = -sigma^2/2, so that a server of `slots=` and `lognormal=` has the
mean service time of the same server without it, and the median factor is exp(mu). Factors are drawn
in arrival order from one generator per model string, seeded by `seed=` (default `DEFAULT_SEED`), so
a run's sequence repeats exactly.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator

DEFAULTS = {
    "status": 200,
    "ttft_ms": 0.0,
    "role_first": 1,
    "tokens": 5,
    "itl_ms": 0.0,
    "usage": 1,
    "done": 1,
    "stall_ms": 3_600_000.0,
    "trickle_ms": 250.0,
    "huge_line_bytes": 10 * 1024 * 1024,
}
# What `mix` injects, by the name the log gives it. Each ErrorKind a server can cause is here.
FAULTS: dict[str, dict[str, float]] = {
    "http_429": {"status": 429},
    "http_503": {"status": 503},
    "http_400": {"status": 400},
    "closed_before_response": {"close": 1},
    "cut_mid_stream": {"cut_after": 2},
    "not_json": {"bad_json_after": 2},
    "bad_shape": {"bad_shape_after": 2},
    "error_event": {"error_after": 2},
    "no_done": {"done": 0},
    "no_content": {"tokens": 0},
    "stall": {"stall_after": 1},
    "trickle": {"trickle_after": 1},
    "huge_line": {"huge_line_after": 1},
    "not_sse": {"not_sse": 1},
}
MIX_ALL = ("ok", *FAULTS)
DEFAULT_SEED = 0  # lognormal's factors without `seed=`


def parse_behaviour(model: str) -> dict[str, float]:
    """The keys of `model` (`ttft_ms=150,tokens=5`) over `DEFAULTS`; ValueError (its message the
    server's 400 answer) for a value that is not a number, or a `lognormal` sigma that is not > 0."""
    b: dict[str, float] = dict(DEFAULTS)
    for part in filter(None, (model or "").split(",")):
        if "=" in part:
            key, value = part.split("=", 1)
            if key.strip() != "mix":
                b[key.strip()] = float(value)
    if "lognormal" in b and not (0 < b["lognormal"] < math.inf):
        raise ValueError(f"lognormal: must be a sigma > 0, got {b['lognormal']:g}")
    return b


def parse_mix(model: str) -> tuple[str, ...] | None:
    """The faults `mix=` cycles through (or draws from), or None without `mix`."""
    for part in filter(None, (model or "").split(",")):
        key, _, value = part.partition("=")
        if key.strip() == "mix":
            value = value.strip()
            if value in ("1", "all"):
                return MIX_ALL
            names = tuple(value.split("+"))
            unknown = [n for n in names if n not in MIX_ALL]
            if unknown:
                raise ValueError(f"mix: unknown fault {unknown[0]!r} (known: {', '.join(MIX_ALL)})")
            return names
    return None


def faults(names: tuple[str, ...], seed: float | None) -> Iterator[str]:
    """`mix`'s faults: `names` in turn, or drawn at random (seeded) with a seed."""
    if seed is None:
        return itertools.cycle(names)
    rng = random.Random(seed)
    return iter(lambda: rng.choice(names), None)


def lognormal_factors(sigma: float, seed: float) -> Iterator[float]:
    """Service-time factors: lognormal of `sigma` and mean 1 (mu = -sigma^2/2), seeded."""
    rng = random.Random(seed)
    mu = -sigma * sigma / 2
    return iter(lambda: rng.lognormvariate(mu, sigma), None)


def scaled(b: dict[str, float], factor: float) -> dict[str, float]:
    """`b` with its first-token wait and every inter-token gap `factor` times as long."""
    return {**b, "ttft_ms": b["ttft_ms"] * factor, "itl_ms": b["itl_ms"] * factor}
