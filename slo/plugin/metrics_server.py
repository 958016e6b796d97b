"""`--slo-metrics-port`: the live figures for Prometheus (`/slo/metrics`, also `/metrics`) on a port
of their own, served by gevent's WSGI server in the Locust process that judges (the master, or the
single process); workers never serve them.

A headless run has no web UI, so this is how Prometheus reaches it; a web UI run serves the same
text on Locust's web port too (slo/plugin/web_ui.py, behind `--web-login`), and this port, given,
serves it without a login (a scraper has no session). It binds `--web-host`'s interface. Started at
`test_start` (idempotent: a web UI rerun keeps it, a changed port moves it), it keeps serving the
last run's figures after the load stops, and stops at `quitting`. A port that cannot be bound is a
warning, not a refused run: the gate's verdict does not depend on it.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from gevent.pywsgi import WSGIServer
from slogate.slo.gate.report import Report
from slogate.slo.outputs.prometheus import exposition

log = logging.getLogger("slogate")
PATHS = ("/slo/metrics", "/metrics")
# Per gate, held weakly: its port and server.
_servers: weakref.WeakKeyDictionary[Any, tuple[int, WSGIServer]] = weakref.WeakKeyDictionary()


def metrics_app(snapshot: Callable[[], Report]) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """A WSGI app answering GET/HEAD on `PATHS` with the exposition of `snapshot()`, 404 elsewhere."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") not in PATHS:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: the metrics are at {PATHS[0]}\n".encode()]
        method = environ.get("REQUEST_METHOD")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        body, content_type = exposition(snapshot(), environ.get("HTTP_ACCEPT"))
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")]
        start_response("200 OK", headers)
        return [b"" if method == "HEAD" else body]

    return app


def start_metrics_server(gate: Any) -> None:
    """Serve `gate.snapshot()` on `--slo-metrics-port` (0 or less: off) unless a worker or already there."""
    port = gate.reports.metrics_port
    running = _servers.get(gate)
    if gate.is_worker or (running is not None and running[0] == port):
        return
    stop_metrics_server(gate)
    if port <= 0:
        return
    host = gate.run_options.web_host
    host = "" if host == "*" else host
    server = WSGIServer((host, port), metrics_app(gate.snapshot), log=None)
    try:
        server.start()
    except (OSError, OverflowError) as e:
        log.warning("slogate: --slo-metrics-port %s: cannot listen (%s); no Prometheus metrics this run", port, e)
        return
    _servers[gate] = (port, server)
    log.info("slogate: Prometheus metrics at http://%s:%s%s", host or "0.0.0.0", port, PATHS[0])


def stop_metrics_server(gate: Any) -> None:
    running = _servers.pop(gate, None)
    if running is not None:
        running[1].stop(timeout=1)
