"""One streamed request to any endpoint, measured by slogate's own parts (the endpoint's body, the
`SseParser`, its event applier, the `StreamTimer`) over a plain `http.client` connection: the
endpoint tests run every endpoint this way, independently of the Locust users' wiring.

Failures map onto the same `ErrorKind`s as the users' (locustfiles/load/users.py).
"""

from __future__ import annotations

import http.client
import json
import time
from urllib.parse import urlsplit

from slogate.locustfiles.load.endpoints import Endpoint, Messages
from slogate.locustfiles.load.sse import (
    SHAPE_ERRORS,
    SseParser,
    StreamErrorEvent,
    StreamProtocolError,
    unexpected_shape,
)
from slogate.locustfiles.load.timer import StreamTimer
from slogate.slo.gate.record import ErrorKind, RequestRecord, http_error_kind


def stream(
    base_url: str,
    endpoint: Endpoint,
    model: str,
    messages: Messages,
    *,
    max_tokens: int = 8,
    ignore_eos: bool = False,
    timeout_s: float = 5.0,
) -> tuple[dict, RequestRecord, str]:
    """(the body sent, the record, the answer text as streamed)."""
    body = endpoint.body(model, messages, max_tokens, 0.0, ignore_eos)
    url = urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    timer = StreamTimer("all", time.time(), time.perf_counter())
    timer.capture_answer()
    try:
        record = _measure(conn, endpoint, json.dumps(body).encode(), timer)
    finally:
        conn.close()
    return body, record, "".join(timer.answer or [])


def _measure(conn: http.client.HTTPConnection, endpoint: Endpoint, body: bytes, timer: StreamTimer) -> RequestRecord:
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    try:
        conn.request("POST", endpoint.path, body, headers)
        resp = conn.getresponse()
    except TimeoutError as e:
        return timer.fail(ErrorKind.TIMEOUT, str(e), time.perf_counter())
    except (OSError, http.client.HTTPException) as e:
        return timer.fail(ErrorKind.CONNECT, repr(e), time.perf_counter())
    if resp.status != 200:
        return timer.fail(http_error_kind(resp.status), resp.read(300).decode(errors="replace"), time.perf_counter())
    parser = SseParser()
    try:
        while line := resp.readline():
            now = time.perf_counter()
            for payload in parser.feed(line):
                try:
                    ended = endpoint.apply_event(payload, timer, now)
                except SHAPE_ERRORS as e:
                    raise unexpected_shape(e) from None
                if ended:
                    return timer.finish(now)
        return timer.fail(ErrorKind.TRUNCATED, "stream ended before its end event", time.perf_counter())
    except TimeoutError:
        return timer.fail(ErrorKind.TIMEOUT, "stream stalled", time.perf_counter())
    except StreamErrorEvent as e:
        return timer.fail(ErrorKind.STREAM_ERROR, str(e), time.perf_counter())
    except StreamProtocolError as e:
        return timer.fail(ErrorKind.PROTOCOL, str(e), time.perf_counter())
    except (OSError, http.client.HTTPException) as e:
        return timer.fail(ErrorKind.TRUNCATED, repr(e), time.perf_counter())
