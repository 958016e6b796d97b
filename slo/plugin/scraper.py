"""Scrapes the target's Prometheus `/metrics` during a run, in a gevent greenlet, into
`ServerMetrics` (slo/gate/server_figures.py). A target without `/metrics` is a warning, never a crash."""

from __future__ import annotations

import contextlib
import http.client
import logging
import time
import urllib.error
import urllib.request
from typing import Any

import gevent
import gevent.lock
from slogate.slo.gate.server_figures import ServerMetrics, parse
from slogate.slo.plugin.target import split_credentials, tls_context, tls_failure

log = logging.getLogger("slogate.server_metrics")
# What a scrape may meet: refused, timed out, TLS, a body cut off mid-way (a server killed while
# answering: http.client.IncompleteRead), text that is not the exposition format.
SCRAPE_ERRORS = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)


def fetch(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> dict[str, float]:
    """The target's /metrics; an https target's certificate verified as the streams verify it (--ca-bundle)."""
    req = urllib.request.Request(f"{url}/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout, context=tls_context()) as resp:
        return parse(resp.read().decode("utf-8", "replace"))


class Scraper:
    """Scrapes `url`/metrics every `interval_s` in a gevent greenlet until `stop()`, sending
    `headers` (the target's Authorization). Credentials left in `url` become a Basic header: the
    URL kept, and named in messages, never has them.

    A server that stops answering mid-run (restarting) is one warning per outage, and scraping goes
    on: once it answers again, its counters, started anew, are summed over the segments (`ServerMetrics`).
    """

    def __init__(self, url: str, interval_s: float, headers: dict[str, str] | None = None) -> None:
        bare, basic = split_credentials(url)
        self.url = bare.rstrip("/")
        self.headers = {**(headers or {}), **({"Authorization": basic} if basic else {})}
        self.interval_s = interval_s
        self.metrics = ServerMetrics()
        self._greenlet: Any = None
        # One scrape at a time, taken and counted in order: a sample counted after a later one would
        # look like counters going down, a restart that never happened.
        self._lock = gevent.lock.Semaphore()
        self._down = False  # the last scrape failed: warned once for this outage

    def scrape_once(self) -> bool:
        with self._lock:
            try:
                sample = fetch(self.url, headers=self.headers)
            except SCRAPE_ERRORS as e:
                self._failed(e)
                return False
            restarts = len(self.metrics.restart_times)
            self.metrics.add(sample)
            self._answered(restarts)
            return True

    def _failed(self, e: Exception) -> None:
        """Warn once per outage: before any answer, the figures will be missing; after, the server may be restarting."""
        reason = getattr(e, "reason", e)
        message = f"{self.url}/metrics unavailable: {tls_failure(reason) or reason}"
        if self.metrics.error is None:
            self.metrics.error = message
        if self._down:
            return
        self._down = True
        if self.metrics.scrapes:
            log.warning("slogate: %s; scraping goes on (a restarted server's counters are summed)", message)
        else:
            log.warning("slogate: %s; server-side figures will be missing", message)

    def _answered(self, restarts_before: int) -> None:
        self._down = False
        if len(self.metrics.restart_times) > restarts_before:
            log.warning(
                "slogate: %s restarted (its /metrics counters went down): they are summed over the segments", self.url
            )

    def restart(self) -> None:
        """Take the counters' starting values now (see `ServerMetrics.restart_from`)."""
        with self._lock, contextlib.suppress(*SCRAPE_ERRORS):  # the loop reports failures
            self.metrics.restart_from(fetch(self.url, headers=self.headers))

    def _loop(self) -> None:
        while True:
            started = time.monotonic()
            self.scrape_once()
            gevent.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        self.metrics = ServerMetrics()
        self._down = False
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> ServerMetrics:
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
            self._greenlet = None
            if self.metrics.scrapes:  # the closing snapshot, so counters cover the whole run (none: nothing to close)
                self.scrape_once()
        return self.metrics
