"""The latency metrics, each defined once: what a request's record yields for it and where it shows.

Measurement (slo/gate/metrics.py, slo/gate/intervals.py), the SLO file's names (slo/gate/spec.py),
goodput limits, the Prometheus series, the report's tables and charts, the interval log, the
`vllm bench` export, `slogate compare` and `slogate capacity` all iterate over `LATENCY` and read
these fields; none of them names a metric. Values are recorded in microseconds (HdrHistograms,
1 us to 1 h) and reported in milliseconds (`<name>_ms` in the report). Adding a metric: a
`LatencyMetric` here, the record field it reads (slo/gate/record.py) and whatever measures that
field (docs/layout.md, "Adding a latency metric").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from slogate.slo.gate.histogram import ValueBatch
from slogate.slo.gate.record import RequestRecord

ValueOf = Callable[[RequestRecord], int | None]


@dataclass(frozen=True, slots=True)
class LatencyMetric:
    """One latency metric. Exactly one of `value_us` (one value per successful request, or None)
    and `values_us` (many values a request, e.g. the gaps between its tokens) is set."""

    name: str  # the SLO file's `metric`, the histograms' key, the report's `<name>_ms`
    title: str  # in tables, charts and logs: "TTFT"
    description: str  # one line, for the Prometheus series' help
    value_us: ValueOf | None = None
    values_us: Callable[[RequestRecord], list[int]] | None = None
    # A request in flight when the run stopped counts with this (a lower bound: what it had waited);
    # None: such requests are not in this metric.
    unfinished_us: Callable[[RequestRecord], int] | None = None
    in_intervals: bool = False  # per-interval histograms: time series, charts, interval log, web UI rows
    # Its objectives may be decided early (slo/gate/early_stop.py): one independent sample per request
    # (ITL's are many and correlated; send lag is the load generator's own delay, judged at the end).
    early_stop: bool = False
    goodput_us: ValueOf | None = None  # a goodput limit `<name>_ms` can name it; the value it compares
    prometheus: str | None = None  # its Prometheus histogram, `slogate_<prometheus>`
    table: tuple[int, ...] = ()  # the percentiles the per-class tables (Markdown, HTML) show
    # A metric only some workloads have (reasoning, tool calls): its table columns show only in a run
    # where the metric named here measured something (TTFO equals TTFT without reasoning: "reasoning").
    shown_if: str | None = None
    compare: tuple[int, ...] = ()  # the percentiles `slogate compare`'s tables show
    export: str | None = None  # its name in `vllm bench serve` result keys (`--export vllm-bench`)

    def __post_init__(self) -> None:
        if (self.value_us is None) == (self.values_us is None):
            raise ValueError(f"latency metric {self.name!r}: set exactly one of value_us and values_us")
        if self.early_stop and self.value_us is None:
            raise ValueError(f"latency metric {self.name!r}: early_stop needs one value per request (value_us)")


def _waited_us(rec: RequestRecord) -> int:
    """An unfinished request's TTFT: its first token's time, else how long it had waited."""
    return rec.e2e_us if rec.ttft_us is None else rec.ttft_us


def _tpot_or_zero(rec: RequestRecord) -> int | None:
    return rec.tpot_us or 0  # vLLM's `--goodput` counts a one-token answer's TPOT as 0


TTFT = LatencyMetric(
    "ttft",
    "TTFT",
    "Time to first token seen by the client",
    value_us=attrgetter("ttft_us"),
    unfinished_us=_waited_us,
    early_stop=True,
    in_intervals=True,
    goodput_us=attrgetter("ttft_us"),
    prometheus="time_to_first_token_seconds",
    table=(50, 95, 99),
    compare=(50, 95, 99),
    export="ttft",
)
# Reasoning models (docs/workloads/reasoning.md): the first output token after any reasoning
# (TTFT without reasoning), and the reasoning's own time (only requests that reasoned have one).
TTFO = LatencyMetric(
    "ttfo",
    "TTFO",
    "Time to first output token, after any reasoning",
    value_us=attrgetter("ttfo_us"),
    early_stop=True,
    in_intervals=True,
    prometheus="time_to_first_output_token_seconds",
    table=(95,),
    compare=(95,),
    shown_if="reasoning",
)
REASONING = LatencyMetric(
    "reasoning",
    "reasoning",
    "Reasoning time: first reasoning token to the first output token (or the end)",
    value_us=attrgetter("reasoning_us"),
    early_stop=True,
    prometheus="reasoning_time_seconds",
    table=(50,),
    shown_if="reasoning",
)
# Tool calls (docs/workloads/tools.md): the first token event of a tool call (only requests that
# called a tool have one).
TTFTC = LatencyMetric(
    "ttftc",
    "TTFTC",
    "Time to the first tool-call token",
    value_us=attrgetter("ttftc_us"),
    early_stop=True,
    prometheus="time_to_first_tool_call_seconds",
    table=(95,),
    shown_if="ttftc",
)
ITL = LatencyMetric(
    "itl",
    "ITL",
    "Gaps between consecutive token events",
    values_us=attrgetter("itl_us"),
    in_intervals=True,
    prometheus="inter_token_latency_seconds",
    table=(50,),
    export="itl",
)
TPOT = LatencyMetric(
    "tpot",
    "TPOT",
    "Time per output token after the first (vLLM's TPOT)",
    value_us=attrgetter("tpot_us"),
    early_stop=True,
    goodput_us=_tpot_or_zero,
    prometheus="time_per_output_token_seconds",
    table=(50,),
    compare=(50,),
    export="tpot",
)
E2E = LatencyMetric(
    "e2e",
    "E2E",
    "Request latency from send to the last event",
    value_us=attrgetter("e2e_us"),
    early_stop=True,
    in_intervals=True,
    goodput_us=attrgetter("e2e_us"),
    prometheus="e2e_request_latency_seconds",
    table=(95,),
    export="e2el",
)
SEND_LAG = LatencyMetric(
    "send_lag",
    "send lag",
    "Open loop: actual send time minus scheduled send time",
    value_us=attrgetter("send_lag_us"),
)

LATENCY: tuple[LatencyMetric, ...] = (TTFT, TTFO, REASONING, TTFTC, ITL, TPOT, E2E, SEND_LAG)
BY_NAME: dict[str, LatencyMetric] = {m.name: m for m in LATENCY}  # the lookup by name
# The metric `slogate compare` ratios runs on and `slogate capacity` plots against the offered rate.
HEADLINE = TTFT

# Names and views derived from the registry, for the modules that want only those.
LATENCY_METRICS: tuple[str, ...] = tuple(BY_NAME)
IN_INTERVALS: tuple[LatencyMetric, ...] = tuple(m for m in LATENCY if m.in_intervals)  # those with a time series
INTERVAL_METRICS: tuple[str, ...] = tuple(m.name for m in IN_INTERVALS)
# What a goodput limit can name, and each one's value in a record (us): vLLM's `--goodput`
# metrics (its `e2el` is our `e2e`). The SLO file's fields are these names with `_ms`.
GOODPUT_METRICS: dict[str, ValueOf] = {m.name: m.goodput_us for m in LATENCY if m.goodput_us is not None}
# The latency columns of the per-class tables (Markdown, HTML) and of `slogate compare`'s: (metric, percentile).
TABLE_COLUMNS: tuple[tuple[LatencyMetric, int], ...] = tuple((m, p) for m in LATENCY for p in m.table)


def table_columns(summary: Mapping[str, Mapping[str, Any]]) -> tuple[tuple[LatencyMetric, int], ...]:
    """The per-class tables' latency columns for a report's metrics summary (class -> figures):
    TABLE_COLUMNS less those of a workload's metric (`shown_if`) that no class measured."""
    measured = {m.name for m in LATENCY if any(s[f"{m.name}_ms"]["count"] for s in summary.values())}
    return tuple((m, p) for m, p in TABLE_COLUMNS if m.shown_if is None or m.shown_if in measured)


COMPARE_COLUMNS: tuple[tuple[LatencyMetric, int], ...] = tuple((m, p) for m in LATENCY for p in m.compare)
PROMETHEUS: tuple[LatencyMetric, ...] = tuple(m for m in LATENCY if m.prometheus)
EXPORTED: tuple[LatencyMetric, ...] = tuple(m for m in LATENCY if m.export)


# The per-record hot path (ClassMetrics.add, ClassInterval.add): (name, how to read it) per metric
# of one value a request, all of them and those kept in intervals, read straight from the record;
# a metric of many values is indexed once per record (`batches`), then recorded into every histogram.
SINGLE = tuple((m.name, m.value_us) for m in LATENCY if m.value_us is not None)
SINGLE_IN_INTERVALS = tuple((m.name, m.value_us) for m in LATENCY if m.value_us is not None and m.in_intervals)
UNFINISHED = tuple((m.name, m.unfinished_us) for m in LATENCY if m.unfinished_us is not None)
UNFINISHED_IN_INTERVALS = tuple((name, waited) for name, waited in UNFINISHED if BY_NAME[name].in_intervals)
_MANY = tuple((m.name, m.values_us) for m in LATENCY if m.values_us is not None)
Batches = list[tuple[str, ValueBatch]]


def batches(rec: RequestRecord) -> Batches:
    """A successful record's values of the metrics of many values (ITL), each as a `ValueBatch`
    (turned into histogram indexes once, recorded into any number of histograms); empty ones left out."""
    return [(name, ValueBatch(values)) for name, values_of in _MANY if (values := values_of(rec))]
