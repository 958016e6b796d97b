"""Scrapes the target's Prometheus `/metrics` during a run, in a gevent greenlet, into
`ServerMetrics` (slo/gate/server_figures.py). A target without `/metrics` is a warning, never a crash."""

from __future__ import annotations

import contextlib
import logging
import time
import urllib.error
import urllib.request
from typing import Any

import gevent
from slogate.slo.gate.server_figures import ServerMetrics, parse
from slogate.slo.plugin.target import split_credentials

log = logging.getLogger("slogate.server_metrics")


def fetch(url: str, timeout: float = 5.0, headers: dict[str, str] | None = None) -> dict[str, float]:
    req = urllib.request.Request(f"{url}/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return parse(resp.read().decode("utf-8", "replace"))


class Scraper:
    """Scrapes `url`/metrics every `interval_s` in a gevent greenlet until `stop()`, sending
    `headers` (the target's Authorization). Credentials left in `url` become a Basic header: the
    URL kept, and named in messages, never has them."""

    def __init__(self, url: str, interval_s: float, headers: dict[str, str] | None = None) -> None:
        bare, basic = split_credentials(url)
        self.url = bare.rstrip("/")
        self.headers = {**(headers or {}), **({"Authorization": basic} if basic else {})}
        self.interval_s = interval_s
        self.metrics = ServerMetrics()
        self._greenlet: Any = None

    def scrape_once(self) -> bool:
        try:
            self.metrics.add(fetch(self.url, headers=self.headers))
            return True
        except (urllib.error.URLError, OSError, ValueError) as e:
            if self.metrics.error is None:
                self.metrics.error = f"{self.url}/metrics unavailable: {getattr(e, 'reason', e)}"
                log.warning("slogate: %s; server-side figures will be missing", self.metrics.error)
            return False

    def restart(self) -> None:
        """Take the counters' starting values now (see `ServerMetrics.restart_from`)."""
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):  # the loop reports failures
            self.metrics.restart_from(fetch(self.url, headers=self.headers))

    def _loop(self) -> None:
        while True:
            started = time.monotonic()
            self.scrape_once()
            gevent.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        self.metrics = ServerMetrics()
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> ServerMetrics:
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
            self._greenlet = None
            self.scrape_once()  # the closing snapshot, so counters cover the whole run
        return self.metrics
