"""Open-loop arrival processes: the gaps between scheduled sends, independent of the server.

`constant` sends every 1/rate s; `poisson` draws exponential gaps (mean 1/rate); `gamma` draws
gamma gaps with shape `burstiness` and the same mean, as `vllm bench serve --burstiness` does
(< 1 burstier than Poisson, > 1 more regular, 1 is Poisson).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

PROCESSES = ("constant", "poisson", "gamma")


def arrival_gaps(process: str, rate: float, rng: random.Random, burstiness: float = 1.0) -> Iterator[float]:
    if rate <= 0:
        raise ValueError(f"--arrival-rate must be > 0, got {rate}")
    if process == "constant":
        while True:
            yield 1.0 / rate
    elif process == "poisson":
        while True:
            yield rng.expovariate(rate)
    elif process == "gamma":
        if burstiness <= 0:
            raise ValueError(f"--burstiness must be > 0, got {burstiness}")
        scale = 1.0 / (rate * burstiness)
        while True:
            yield rng.gammavariate(burstiness, scale)
    else:
        raise ValueError(f"--arrival-process must be one of {', '.join(PROCESSES)}, got {process!r}")
