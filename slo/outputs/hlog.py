"""`slo-intervals.hlog`: the time series as a standard HdrHistogram interval log.

One line per interval and tag, the tag naming the metric and the request class (`ttft.all`,
`ttft.shared`, `itl.unique`, `e2e.all`, ...), in the format of HdrHistogram's
`HistogramLogWriter` (log format 1.3, tagged lines):

    #[Histogram log format version 1.3]
    #[StartTime: 1764662400.000 (seconds since epoch), 2025-12-02T08:00:00Z]
    #[BaseTime: 1764662400.000 (seconds since epoch)]
    "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
    Tag=ttft.all,0.000,5.000,0.081023,HISTFAAAA...

Readers: HdrHistogram's own (Java `HistogramLogReader`/`HistogramLogProcessor`, Python
`hdrh.log.HistogramLogReader`, HdrHistogramJS) and HistogramLogAnalyzer.

Units. The histograms are slogate's own, exactly as in the report: values in **microseconds**
(1 us to 1 h, 3 significant digits). `Interval_Max` is the interval's maximum divided by
1,000,000, the default `maxValueUnitRatio` of HdrHistogram's writer, which HistogramLogAnalyzer
and HistogramLogProcessor also divide every value by: for our microseconds that is **seconds**,
so the max column and what those tools show by default agree (they label it "ms", assuming
nanosecond recordings; pass `-outputValueUnitRatio 1000` to HistogramLogProcessor for
milliseconds). Timestamps are seconds after `BaseTime`, the start of the run's first interval.

`hdrh`'s own log writer cannot be used: it writes no `Tag=` and its start-time line crashes
(`datetime.iso_format`); the lines are written here instead.
"""

from __future__ import annotations

import time
from pathlib import Path

from slogate.slo.gate.intervals import IntervalSeries
from slogate.slo.gate.latency_metrics import IN_INTERVALS
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.outputs.files import write_atomically

HLOG_NAME = "slo-intervals.hlog"
FORMAT_VERSION = "1.3"
MAX_VALUE_UNIT_RATIO = 1_000_000.0  # HdrHistogram's default: microsecond values -> seconds


def tag(metric: str, request_class: str) -> str:
    """The log tag of a metric and class; HdrHistogram tags may not hold commas or whitespace."""
    return f"{metric}.{request_class}".replace(",", "_").replace(" ", "_")


def render_hlog(intervals: IntervalSeries, comment: str = "") -> str:
    metrics = IN_INTERVALS
    lines = [f"#[slogate interval log: {', '.join(m.title for m in metrics)} per request class]"]
    if comment:
        lines.append(f"#[{comment}]")
    lines.append(f"#[Histogram log format version {FORMAT_VERSION}]")
    indexes = list(intervals)
    if indexes:
        step = intervals.interval_s
        base = indexes[0] * step
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base))
        lines += [
            f"#[StartTime: {base:.3f} (seconds since epoch), {stamp}]",
            f"#[BaseTime: {base:.3f} (seconds since epoch)]",
            f"#[Values in microseconds (1 us to 1 h, 3 significant digits); Interval_Max in seconds "
            f"(max / {MAX_VALUE_UNIT_RATIO:.0f}); one interval every {step:g} s of request start time]",
        ]
    lines.append('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"')
    for idx in indexes:
        start = idx * intervals.interval_s - indexes[0] * intervals.interval_s
        for metric in metrics:
            for cls, h in intervals.histograms(idx, metric.name).items():
                max_s = (h.max_ms() or 0.0) * 1000 / MAX_VALUE_UNIT_RATIO
                lines.append(
                    f"Tag={tag(metric.name, cls)},{start:.3f},{intervals.interval_s:.3f},{max_s:.6f},{h.encode()}"
                )
    return "\n".join(lines) + "\n"


def write_hlog(store: MetricsStore, path: str | Path, comment: str = "") -> Path:
    p = Path(path)
    write_atomically(p, render_hlog(store.intervals, comment))
    return p
