"""The listener: picks request records out of Locust's request events into a `MetricsStore`.

Any user class takes part by calling `report_record(environment, record)`: it fires Locust's
ordinary request events (`TTFT <class>` and `E2E <class>`, so the stats table and charts show
them) and carries the exact record in the event context for this listener.
"""

from __future__ import annotations

import time
from typing import Any

from slogate.slo.gate.intervals import DEFAULT_INTERVAL_S
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord

RECORD_KEY = "slogate_record"
TTFT_TYPE, E2E_TYPE = "TTFT", "E2E"
# Neither answered nor failed (in flight at the stop, or never sent): rows of their own in
# Locust's table, not failures there either, as in slogate's report.
NOT_FAILURES = {ErrorKind.UNFINISHED: "UNFINISHED", ErrorKind.DROPPED: "DROPPED", ErrorKind.CANCELLED: "CANCELLED"}


# Locust counts the requests and failures of each row of its table per second of the whole run,
# and reads only the last 12 s of them (the current RPS of its table and charts): at 20 req/s over
# slogate's rows ~2.7 MB an hour, the largest growth of a long soak's memory. Seconds older than
# this are dropped (`trim_rate_counts`): the table's totals, percentiles and charts keep theirs.
LOCUST_RATE_KEEP_S = 60.0


def trim_rate_counts(stats: Any, before: float) -> None:
    """Drop the per-second request and failure counts of Locust's `stats` (a `RequestStats`)
    older than `before` (Unix seconds), in every row and the total."""
    oldest = int(before)
    for entry in (*stats.entries.values(), stats.total):
        for per_second in (entry.num_reqs_per_sec, entry.num_fail_per_sec):
            for second in [t for t in per_second if t < oldest]:
                del per_second[second]


class RequestFailed(Exception):
    """The exception Locust shows for a failed streamed request: `<kind>: <message>`."""


def report_record(environment: Any, rec: RequestRecord) -> None:
    fire = environment.events.request.fire
    if rec.ttft_us is not None and (rec.ok or rec.error_kind == ErrorKind.CANCELLED):  # a cancelled one's counts
        fire(
            request_type=TTFT_TYPE,
            name=rec.request_class,
            response_time=rec.ttft_us / 1000,
            response_length=0,
            exception=None,
            context={},
        )
    counted_apart = NOT_FAILURES.get(rec.error_kind) if rec.error_kind else None
    fire(
        request_type=counted_apart or E2E_TYPE,
        name=rec.request_class,
        response_time=rec.e2e_us / 1000,
        response_length=rec.completion_tokens or 0,
        exception=None if rec.ok or counted_apart else RequestFailed(f"{rec.error_kind}: {rec.error_message}"),
        context={RECORD_KEY: rec},
    )


class RecordListener:
    """Collects records started after the warm-up window into `store` (totals and, every
    `interval_s`, the time series; `goodput_targets_ms` as in `MetricsStore`)."""

    def __init__(self) -> None:
        self.warmup_s = 0.0
        self.interval_s = DEFAULT_INTERVAL_S
        self.goodput_targets_ms: dict[str, dict[str, float]] | None = None
        self.run_started_at: float | None = None
        self.store = self._new_store()
        self.tap: MetricsStore | None = None  # also gets every record: the journal's (slo/plugin/journal.py)

    def _new_store(self) -> MetricsStore:
        store = MetricsStore(self.interval_s)
        store.set_goodput_targets(self.goodput_targets_ms)
        return store

    def start(
        self,
        warmup_s: float,
        interval_s: float = DEFAULT_INTERVAL_S,
        goodput_targets_ms: dict[str, dict[str, float]] | None = None,
    ) -> None:
        self.warmup_s = warmup_s
        self.interval_s = interval_s
        self.goodput_targets_ms = goodput_targets_ms
        self.store = self._new_store()
        self.run_started_at = time.time()

    def on_request(self, context: dict[str, Any] | None = None, **_: Any) -> None:
        rec = context.get(RECORD_KEY) if context else None
        if rec is None:
            return
        started = self.run_started_at
        tap = self.tap
        if started is not None and rec.started_at < started + self.warmup_s:
            self.store.warmup_excluded += 1
            if tap is not None:
                tap.warmup_excluded += 1
            return
        self.store.add(rec)
        if tap is not None:
            tap.add(rec)

    def tap_into(self, store: MetricsStore | None) -> None:
        """Add every record to `store` too from now on (None: no more)."""
        self.tap = store

    def take(self) -> MetricsStore:
        """Hand over what was collected and start a new buffer (a worker's report to the master)."""
        store, self.store = self.store, self._new_store()
        return store
