"""`--adapters a,b,c` (or weighted, `a:3,b:1`): requests spread over LoRA adapters.

vLLM serves each LoRA module under its own model name (`--lora-modules a=PATH`), so a request for
adapter `a` names `a` as its `model`. Each conversation draws its adapter from the run's seeded
RNG, in proportion to the weights (1 each by default), and keeps it for its later turns; each of
its requests carries the tag `adapter_<name>`, which an SLO names as its `class`. Before any
load the target's `/v1/models` must list every adapter: a name it does not serve would only
fail every request (HTTP 404) and say nothing about the adapters.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random

from slogate.locustfiles.load import server
from slogate.slo.gate.record import ADAPTER_TAG_PREFIX

Adapters = tuple[tuple[str, float], ...]  # (name, weight), in the order given


def adapter_tag(name: str) -> str:
    """The tag (SLO `class`) of the requests sent to adapter `name`."""
    return f"{ADAPTER_TAG_PREFIX}{name}"


def adapter_tags(adapters: Adapters) -> list[str]:
    return [adapter_tag(name) for name, _ in adapters]


def parse_adapters(text: str) -> Adapters:
    """`a,b,c` or `a:3,b:1` as (name, weight) pairs (weight 1 where none is given); ValueError, one
    line, for an empty name, a weight that is not a positive number, or a name given twice."""
    text = str(text).strip()
    if not text:
        return ()
    out: list[tuple[str, float]] = []
    for item in text.split(","):
        name, sep, weight_text = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
        name = name.strip()
        if not name:
            raise ValueError(f"--adapters: an adapter has no name in {text!r}")
        try:
            weight = float(weight_text) if sep else 1.0
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"--adapters: the weight of {name!r} must be a positive number, got {weight_text!r}")
        if any(name == seen for seen, _ in out):
            raise ValueError(f"--adapters: {name!r} is given twice")
        out.append((name, weight))
    return tuple(out)


class AdapterMix:
    """Draws an adapter per conversation, in proportion to the weights (one draw of the RNG)."""

    def __init__(self, adapters: Adapters) -> None:
        self.names = [name for name, _ in adapters]
        self.cumulative = list(itertools.accumulate(weight for _, weight in adapters))

    def choose(self, rng: random.Random) -> str:
        i = bisect.bisect_right(self.cumulative, rng.random() * self.cumulative[-1])
        return self.names[min(i, len(self.names) - 1)]


def describe(adapters: Adapters) -> dict[str, float]:
    """The adapters as the report's `run.workload.adapters` records them: name -> weight."""
    return dict(adapters)


def check_served(host: str, headers: dict[str, str], adapters: Adapters) -> None:
    """ValueError (one line) when the target's `/v1/models` does not list every adapter;
    `server.TargetError` when it cannot be asked."""
    served = server.model_ids(host, headers)
    missing = [name for name, _ in adapters if name not in served]
    if missing:
        names = ", ".join(repr(name) for name in missing)
        raise ValueError(
            f"--adapters: {names} not served by the target (its /v1/models lists: {', '.join(map(str, served))}); "
            "serve each LoRA adapter under its name (vLLM: --enable-lora --lora-modules NAME=PATH)"
        )
