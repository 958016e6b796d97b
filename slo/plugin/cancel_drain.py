"""After a run with --cancel-fraction: did the server let go of the requests whose clients hung up?

A client that hangs up closes its connection; a server that notices stops generating for it (vLLM
aborts the request). One that does not keeps spending its capacity on answers nobody reads. Once
the load has stopped (every client gone: those that cancelled and those the stop ended), the
server's running-requests gauge (`vllm:num_requests_running`, or its engine's: slo/gate/engines.py)
should return to 0 within `LIMIT_S`. `wait_for_let_go` reads `/metrics` every `POLL_S` until it
does, and keeps how long that took, or what still ran at the limit, in the server figures
(`ServerFigures.after_stop`: the report's `server.after_stop` and its sentence `after_stop_note`).
A note, not a breach: the SLOs judge what the clients saw.

Only a run whose clients cancelled waits (at most `LIMIT_S`): another run's server may well be
serving other clients after it, and its stop would wait for nothing.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from slogate.slo.gate.record import ALL
from slogate.slo.plugin.gate import Gate
from slogate.slo.plugin.scraper import SCRAPE_ERRORS, fetch

LIMIT_S = 2.0  # the server must let go within this long after the load's stop
POLL_S = 0.05
RUNNING = "num_requests_running"


def wait_for_let_go(gate: Gate, limit_s: float = LIMIT_S) -> None:
    """Before the scraper stops (test_stop), for a run whose clients cancelled requests, against a
    server whose running requests `/metrics` shows: wait until they are 0, at most `limit_s`, and
    note the outcome in `scraper.metrics.after_stop`. (A master's figures hold every worker's by its
    test_stop: each flushes before it reports stopped.)"""
    scraper = gate.run.scraper
    if scraper is None or not scraper.metrics.scrapes or not gate.metrics().get(ALL).cancelled:
        return
    gauge = scraper.metrics.engine.gauges.get(RUNNING)
    if gauge is None:
        return
    scraper.metrics.after_stop = let_go(lambda: fetch(scraper.url, headers=scraper.headers).get(gauge), limit_s)


def let_go(running: Any, limit_s: float = LIMIT_S, poll_s: float = POLL_S) -> dict[str, float] | None:
    """Read `running()` (the gauge now: a number, None when absent) until it is 0 or `limit_s` has
    passed; the `after_stop` figures, or None when `/metrics` never answered."""
    start = time.monotonic()
    last: float | None = None
    while True:
        try:
            value = running()
        except SCRAPE_ERRORS:
            value = None
        waited = time.monotonic() - start
        if value is not None:
            if value <= 0:
                return {"running_zero_after_s": round(waited, 3)}
            last = value
        if waited >= limit_s:
            return None if last is None else {"still_running": last, "waited_s": round(waited, 3)}
        gevent.sleep(poll_s)
