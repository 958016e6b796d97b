"""vLLM's LoRA figures (the report's `server.lora`), from its `vllm:lora_requests_info` gauge.

vLLM (0.32: vllm/v1/metrics/loggers.py) exports the adapters in its labels, not its value: each
engine step sets the child of labels `max_lora` (the adapter slots, --max-loras),
`running_lora_adapters` and `waiting_lora_adapters` (the adapters of the running and waiting
requests, comma-separated) to the current time. Every label set ever seen stays in the scrape,
so the one with the latest time is the server's state now, and the latest time of the sets that
name an adapter as running is when it last ran (between scrapes too). `read` turns them into
`parse` keys and `LoraSamples` keeps them over the run: the peak and mean of adapters running
and waiting, and which adapters ran. A server without LoRA has no such gauge, and its report no
`server.lora`. (vLLM 0.32 names the same adapters in both labels, those with any request in the
engine: vllm/v1/metrics/stats.py joins the names of a table that holds zero counts too. The
figures are the labels', as vLLM gives them.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LORA_INFO = "vllm:lora_requests_info"
RUNNING, WAITING, MAX_LORA = (f"{LORA_INFO}|{name}" for name in ("running", "waiting", "max_lora"))
RUNNING_ADAPTER = f"{LORA_INFO}|ran|"  # + the adapter's name: when it last ran (Unix seconds)


def _names(labels: dict[str, str], label: str) -> list[str]:
    return [name for name in labels.get(label, "").split(",") if name]


def read(samples: Iterable[Any]) -> dict[str, float]:
    """`parse`'s keys for `vllm:lora_requests_info`'s samples (prometheus_client's): the counts of
    the latest, and when each adapter last ran."""
    samples = list(samples)
    if not samples:
        return {}
    latest = max(samples, key=lambda s: s.value)
    running = _names(latest.labels, "running_lora_adapters")
    out = {RUNNING: float(len(running)), WAITING: float(len(_names(latest.labels, "waiting_lora_adapters")))}
    with contextlib.suppress(ValueError):  # a label that is not a number: no slots figure
        out[MAX_LORA] = float(latest.labels.get("max_lora", ""))
    for s in samples:
        for name in _names(s.labels, "running_lora_adapters"):
            out[RUNNING_ADAPTER + name] = max(out.get(RUNNING_ADAPTER + name, 0.0), s.value)
    return out


@dataclass(frozen=True, slots=True)
class LoraFigures:
    """The server's LoRA state over the run: its slots, the adapters running and waiting (peak and
    mean over the scrapes) and the adapters seen running, in the order first seen."""

    max_lora: float | None
    running_adapters_max: float
    running_adapters_mean: float
    waiting_adapters_max: float
    waiting_adapters_mean: float
    adapters_running: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "max_lora": self.max_lora,
            "running_adapters_max": self.running_adapters_max,
            "running_adapters_mean": self.running_adapters_mean,
            "waiting_adapters_max": self.waiting_adapters_max,
            "waiting_adapters_mean": self.waiting_adapters_mean,
            "adapters_running": list(self.adapters_running),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoraFigures:
        return cls(
            d.get("max_lora"),
            d.get("running_adapters_max", 0.0),
            d.get("running_adapters_mean", 0.0),
            d.get("waiting_adapters_max", 0.0),
            d.get("waiting_adapters_mean", 0.0),
            tuple(d.get("adapters_running") or ()),
        )

    def describe(self) -> str:
        """The figures in words, for the Markdown and HTML reports' server section."""
        slots = "" if self.max_lora is None else f"{self.max_lora:g} slots (--max-loras), "
        seen = ", ".join(self.adapters_running) or "none"
        return (
            f"{slots}adapters running peak {self.running_adapters_max:g} / mean "
            f"{self.running_adapters_mean:.2f}, waiting peak {self.waiting_adapters_max:g} / mean "
            f"{self.waiting_adapters_mean:.2f}; ran: {seen}"
        )


@dataclass
class LoraSamples:
    """What the scrapes showed of `read`'s keys; `summary()` is the report's `server.lora`."""

    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    max_lora: float | None = None
    before: dict[str, float] | None = None  # when each adapter had last run, at the first scrape
    adapters: dict[str, None] = field(default_factory=dict)  # those that ran since, in the order seen

    def add(self, sample: dict[str, float]) -> None:
        if RUNNING not in sample:
            return
        ran = {key[len(RUNNING_ADAPTER) :]: at for key, at in sample.items() if key.startswith(RUNNING_ADAPTER)}
        if self.before is None:  # the first scrape: what ran before it is not the run's
            self.before = ran
            return
        self.running.append(sample[RUNNING])
        self.waiting.append(sample.get(WAITING, 0.0))
        self.max_lora = sample.get(MAX_LORA, self.max_lora)
        self.adapters.update((name, None) for name, at in ran.items() if at > self.before.get(name, 0.0))

    def summary(self) -> LoraFigures | None:
        if not self.running:
            return None
        return LoraFigures(
            self.max_lora,
            max(self.running),
            round(sum(self.running) / len(self.running), 4),
            max(self.waiting),
            round(sum(self.waiting) / len(self.waiting), 4),
            tuple(self.adapters),
        )
