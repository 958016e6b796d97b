"""Locust users that stream from the `--endpoint` (chat by default) and report exact per-request records.

`ChatStreamUser` speaks HTTP with geventhttpclient and reads the body line by line as it
arrives (`readline`, not `iter_content`, which waits for 1 KiB and adds tens of ms to TTFT).
`OpenAIChatUser` uses the official `openai` SDK, for teams that want their app's exact client;
it costs several times more CPU per chunk (docs/workloads.md, benchmarks/RESULTS.md).

With `--turns` above 1 a closed-loop user runs one conversation at a time: each later turn is
sent when the previous answer has ended and the think time has passed; a failed turn ends it.

Every request is bounded (locustfiles/load/bounds.py): `--request-timeout` in all, however the
server trickles, and its lines to `sse.MAX_LINE_BYTES`. An https target's certificate is verified
against the process's one TLS context (`target.tls_context`, --ca-bundle); a handshake that fails
is `tls`, and a 200 whose Content-Type is not `text/event-stream` is `protocol`.

A server closes a kept-alive connection that idled past its limit (uvicorn, so vLLM and SGLang:
5 s), and a request sent on it at that moment meets a closed connection: it never reached the
application. `KeptAlivePool` (locustfiles/load/connections.py) keeps that from failing a healthy
run: the client closes a connection idle for `KEEPALIVE_EXPIRY_S` itself, before the server's
limit (as browsers and httpx do), and a request whose connection had idled in the pool for
`IDLE_CLOSE_MIN_S` or more and closed before any byte of an answer came, within `RESEND_WINDOW_S`
of its send, is sent once more on a new connection (a `RETRIED <class>` row in Locust's table,
never a failure). A close on a new connection, on one in continuous use (an idle close meets only
an idle connection), a late one (a server that died with the request read) or one after any
byte of the answer is the server's failure, and counts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from locust import User, constant, task
from slogate.locustfiles.load import options
from slogate.locustfiles.load.bounds import RequestDeadline, bound_lines, deadline
from slogate.locustfiles.load.cancel import StreamCancelled, hang_up_clock, read_until_cancelled
from slogate.locustfiles.load.connections import KeptAlivePool
from slogate.locustfiles.load.rx_timestamps import TimestampedSocket, timestamped_socket
from slogate.locustfiles.load.server import TargetError
from slogate.locustfiles.load.sse import (
    SHAPE_ERRORS,
    SseParser,
    StreamErrorEvent,
    StreamProtocolError,
    not_an_event_stream,
    unexpected_shape,
)
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.workload import ChatRequest, Workload
from slogate.slo.gate.facts import WorkloadFacts
from slogate.slo.gate.record import ErrorKind, RequestRecord, http_error_kind
from slogate.slo.plugin import target
from slogate.slo.plugin.control import BAD_CONFIG, abort_run, note_workload
from slogate.slo.plugin.listener import report_record

_user_numbers = itertools.count()
UNREACHABLE_BACKOFF_S = 0.1  # a closed-loop user's pause after a request that could not connect
# Servers' idle limits are a second or more (uvicorn's option takes whole seconds, gunicorn's is
# 2 s): a connection that idled less than this was not closed for idling.
IDLE_CLOSE_MIN_S = 0.5
# An idle close crosses the request on the wire: its end of stream comes back within a round trip
# of the send. One later may be a server that read the request and died before answering (an OOM
# kill): that request may have reached the application, and is the server's failure, never resent.
RESEND_WINDOW_S = 0.25
RETRIED_TYPE = "RETRIED"  # Locust's table: requests resent after a keep-alive close, not failures


class ChatUser(User):
    """What every user shares: the workload, a per-user seeded RNG, conversations and reporting."""

    abstract = True
    wait_time = constant(0)
    next_turn: ChatRequest | None = None  # closed loop: the conversation's next turn, if any

    def on_start(self) -> None:
        try:
            self.workload: Workload = options.workload_for(self.environment)
            self.cancels = options.workload_options(self.environment).cancel
        except TargetError as e:
            abort_run(self.environment, f"target unreachable: {e}")
            raise gevent.GreenletExit from None
        except ValueError as e:  # options changed in the web UI since they were checked
            abort_run(self.environment, f"{BAD_CONFIG}: {e}")
            raise gevent.GreenletExit from None
        note_workload(self.environment, self.workload.model, self.workload_facts())
        # The bare URL and its Authorization header (credentials never stay in a URL: slo/plugin/target.py).
        self.base_url, self.auth_headers = target.resolve(self.environment, self.host)
        worker = getattr(self.environment.runner, "worker_index", 0)
        seed = f"{self.workload.config.seed}:{worker}:{next(_user_numbers)}"
        self.rng = random.Random(seed)
        self.cancel_rng = self.cancels.rng(seed)  # None without --cancel-fraction

    def workload_facts(self) -> WorkloadFacts:
        """What the report records as `run.workload`; every user of a process notes the same."""
        return WorkloadFacts.from_json(self.workload.describe())

    def turn_to_send(self) -> ChatRequest:
        """Closed loop: the conversation's next turn, or a new conversation's first."""
        req, self.next_turn = self.next_turn, None
        return req or self.workload.next_request(self.rng)

    def after_turn(self, req: ChatRequest, record: RequestRecord, timer: StreamTimer) -> None:
        """Closed loop: keep the conversation's next turn and wait the think time before it; after
        a request that could not connect, wait `UNREACHABLE_BACKOFF_S` (a refused connection fails in
        microseconds: a server restarting would otherwise see one user retry thousands of times a
        second, taking a core from it and filling the report with what measures only the retry loop)."""
        if record.error_kind in (ErrorKind.CONNECT, ErrorKind.TLS):
            gevent.sleep(UNREACHABLE_BACKOFF_S)
        self.next_turn = self.follow_up(req, record, timer)
        if self.next_turn is not None:
            think = self.workload.think_time_s(self.rng)
            if think > 0:
                gevent.sleep(think)

    def follow_up(self, req: ChatRequest, record: RequestRecord, timer: StreamTimer) -> ChatRequest | None:
        """The turn after `req`, or None: the conversation is over, or this turn failed (which ends it)."""
        if not req.has_follow_up or not record.ok:
            return None
        return self.workload.follow_up(req, "".join(timer.answer or ()), self.rng)

    def _report(
        self, timer: StreamTimer, stream: Callable[[], RequestRecord], scheduled: float | None = None
    ) -> RequestRecord:
        """Run one request (`stream`), report its record and return it. One that the end of the run
        stops (Locust kills the greenlet past --stop-timeout) is reported as unfinished, with its
        TTFT if its first token had come: never silently lost. `scheduled` (open loop) gives the send lag.
        The request's --request-timeout runs from here (`bounds.deadline`), as a --cancel-after-ms
        hang-up does (cancel.py)."""
        sent = time.perf_counter()
        timeout = deadline(self.workload.config.request_timeout_s)
        hang_up = hang_up_clock(self.cancels, timer) if self.cancels.picks(self.cancel_rng) else None
        try:
            record = stream()
        except StreamCancelled:  # --cancel-after-ms: the client's own hang-up, wherever it waited
            record = timer.cancel(time.perf_counter())
        except RequestDeadline as e:  # past where the user's client maps it to its own timeout
            record = timer.fail(ErrorKind.TIMEOUT, str(e), time.perf_counter())
        except gevent.GreenletExit:
            unfinished = timer.fail(ErrorKind.UNFINISHED, "in flight when the run stopped", time.perf_counter())
            report_record(self.environment, unfinished)
            raise
        finally:
            timeout.close()
            if hang_up is not None:
                hang_up.close()
        if scheduled is not None:
            record.send_lag_us = int((sent - scheduled) * 1_000_000)
        report_record(self.environment, record)
        return record


def start_timer(req: ChatRequest, started_at: float, t0: float) -> StreamTimer:
    """The timer of `req`; it keeps the streamed answer when a later turn will resend it or its
    output is checked at the end (--tools, --response-format), and then the tool calls too."""
    timer = StreamTimer(req.request_class, started_at, t0, req.tags)
    if req.has_follow_up or req.output is not None:
        timer.capture_answer()
    if req.output is not None:
        timer.output = req.output.capture()
    return timer


class SseChatUser(ChatUser):
    """Raw SSE over geventhttpclient: the HTTP side that the closed- and open-loop users share."""

    abstract = True
    concurrency = 1  # connections; the open-loop user needs one per request in flight
    # TTFT runs from just before the request is sent, and the send that counts is the one that
    # reached the server: a closed-loop user's resend (`_post`) restarts the clock. An open-loop
    # request's clock runs from its scheduled time, whatever delays its send (send lag, a resend).
    resend_restarts_clock = False

    def on_start(self) -> None:
        super().on_start()
        self.connect()

    def connect(self) -> None:
        """(Re)create the HTTP client for `base_url`."""
        url = urlsplit(self.base_url)
        timeout = self.workload.config.request_timeout_s  # in all: `_report`'s deadline; these bound each step
        self.http = HTTPClient(
            url.hostname,
            port=url.port or (443 if url.scheme == "https" else 80),
            ssl=url.scheme == "https",
            ssl_context_factory=_tls_context,
            connection_timeout=timeout,
            network_timeout=timeout,
            concurrency=self.concurrency,
        )
        # Every connection stamps its reads with the kernel's arrival time (rx_timestamps).
        self.http._connection_pool._create_tcp_socket = timestamped_socket
        self.connections = KeptAlivePool(self.http._connection_pool)
        self.endpoint = self.workload.endpoint
        self.path = url.path.rstrip("/") + self.endpoint.path
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self.auth_headers}

    def on_stop(self) -> None:
        http = getattr(self, "http", None)
        if http is not None:
            http.close()

    def _post(self, body: bytes, timer: StreamTimer) -> Any:
        """POST `body` and return the response once its headers have come. When the server closed a
        connection that had idled in the pool for `IDLE_CLOSE_MIN_S` or more before any byte of an
        answer (`HTTPConnectionClosed`: end of stream or a reset before the status line, the send's
        EPIPE included), within `RESEND_WINDOW_S` of the send, it closed it for idling and the
        request never reached the application: it goes once more on a new connection.
        geventhttpclient resends no POST."""
        attempt = time.perf_counter()
        try:
            return self.http.request("POST", self.path, body=body, headers=self.headers)
        except HTTPConnectionClosed:
            idled_s = self.connections.idled_s
            now = time.perf_counter()
            if idled_s is None or idled_s < IDLE_CLOSE_MIN_S or now - attempt > RESEND_WINDOW_S:
                raise  # a new connection, one in continuous use, or a late close: the server's failure
        self.environment.events.request.fire(
            request_type=RETRIED_TYPE,
            name=timer.request_class,
            response_time=(now - attempt) * 1000,  # the failed attempt's
            response_length=0,
            exception=None,
            context={},
        )
        if self.resend_restarts_clock:
            timer.sent(now)
        self.connections.fresh()
        return self.http.request("POST", self.path, body=body, headers=self.headers)

    def _stream(self, body: bytes, timer: StreamTimer) -> Any:
        try:
            resp = self._post(body, timer)
        except StreamCancelled:  # --cancel-after-ms while sending or awaiting the headers: no response holds
            self.connections.abandon()  # the connection, which would keep the pool's slot forever
            raise
        except TimeoutError as e:
            return timer.fail(ErrorKind.TIMEOUT, f"no response: {_one_line(e)}", time.perf_counter())
        except (OSError, HTTPParseError) as e:
            tls = target.tls_failure(e)
            return timer.fail(ErrorKind.TLS if tls else ErrorKind.CONNECT, tls or _one_line(e), time.perf_counter())
        try:
            if resp.status_code != 200:
                detail = resp.read(300).decode("utf-8", "replace")
                return timer.fail(
                    http_error_kind(resp.status_code),
                    f"HTTP {resp.status_code}: {_one_line(detail)}",
                    time.perf_counter(),
                )
            not_sse = not_an_event_stream(resp.get("content-type"))
            if not_sse is not None:
                raise not_sse
            bound_lines(resp)
            parser = SseParser()
            apply_event = self.endpoint.apply_event
            readline = resp.readline
            arrived = _arrival_clock(resp)
            if timer.cancel_after_tokens:  # a request picked to hang up: the loop that counts
                cut = read_until_cancelled(readline, parser, apply_event, arrived, timer, lambda: _drain(resp))
                if cut is not None:
                    return cut
                return timer.fail(ErrorKind.TRUNCATED, "stream ended before its end event", time.perf_counter())
            while line := readline(b"\n"):
                now = arrived()
                for payload in parser.feed(line):
                    try:
                        ended = apply_event(payload, timer, now)
                    except SHAPE_ERRORS as e:
                        raise unexpected_shape(e) from None
                    if ended:
                        record = timer.finish(now)
                        _drain(resp)
                        return record
            return timer.fail(ErrorKind.TRUNCATED, "stream ended before its end event", time.perf_counter())
        except TimeoutError as e:
            return timer.fail(ErrorKind.TIMEOUT, f"stream stalled or trickling: {_one_line(e)}", time.perf_counter())
        except StreamErrorEvent as e:
            return timer.fail(ErrorKind.STREAM_ERROR, str(e), time.perf_counter())
        except StreamProtocolError as e:
            return timer.fail(ErrorKind.PROTOCOL, _one_line(e), time.perf_counter())
        except (OSError, HTTPParseError) as e:
            return timer.fail(ErrorKind.TRUNCATED, f"stream broken: {_one_line(e)}", time.perf_counter())
        finally:
            resp.release()


class ChatStreamUser(SseChatUser):
    """Closed loop: each user sends its next request when the previous one has ended."""

    resend_restarts_clock = True

    @task
    def chat(self) -> None:
        req = self.turn_to_send()
        body = json.dumps(req.body).encode()
        timer = start_timer(req, time.time(), time.perf_counter())
        record = self._report(timer, lambda: self._stream(body, timer))
        self.after_turn(req, record, timer)


def _arrival_clock(resp: Any) -> Callable[[], float]:
    """When the line `readline` just returned had arrived: the socket's receive stamp where the
    connection has one (geventhttpclient keeps the socket in `_sock`), else the time of parsing."""
    sock = getattr(resp, "_sock", None)
    if isinstance(sock, TimestampedSocket):
        return lambda: sock.received_at
    return time.perf_counter


def _drain(resp: Any) -> None:
    """Read the rest of the body (the chunked terminator) so the connection can be kept alive."""
    # On failure release() closes the connection instead; the record is complete either way.
    # A --cancel-after-ms hang-up now finds the stream complete: the record stands, release() closes.
    with contextlib.suppress(OSError, HTTPParseError, StreamProtocolError, StreamCancelled):
        resp.read()


def _tls_context(**_: Any) -> Any:
    """geventhttpclient's `ssl_context_factory`: the process's one context (--ca-bundle), not a
    bundle loaded per user (~40 ms of CPU each, while other users' streams are in flight)."""
    return target.tls_context()


def _one_line(value: Any) -> str:
    text = " ".join(str(value).split())
    return text[:200] or type(value).__name__
