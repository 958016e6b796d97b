"""A server's keep-alive close never fails a healthy run (users.py `_post`, connections.py).

A request sent on a kept-alive connection just as the server closes it for idling finds it closed
before any byte of an answer: it never reached the application, so it is sent once more on a new
connection, never counted as a failure. A close on a new connection, on one in continuous use, or
after a byte of the answer, is the server's failure and is never resent.
"""

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.server
import pytest
from slogate.launch.server import free_port
from slogate.locustfiles.load import users
from slogate.locustfiles.load.open_loop import OpenLoopChatUser
from slogate.locustfiles.load.users import RETRIED_TYPE, ChatStreamUser
from slogate.slo.gate.record import ErrorKind, RequestRecord

from tests.load.test_users import Harness

_EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
    {"choices": [{"index": 0, "delta": {"content": " there"}}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]
SSE_BODY = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _EVENTS) + b"data: [DONE]\n\n"
CHAT_PATH = b"/v1/chat/completions"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(SSE_BODY) + SSE_BODY


class ScriptedServer:
    """Serves each connection's requests by a script: `answer`, `close` (read the request, then
    close without a byte of answer, `close_delay_s` later) or `partial` (the status line, then close).
    A connection past its script answers; one for another path (the workload's /tokenize) gets a 404."""

    def __init__(self, *scripts: list[str], close_delay_s: float = 0.0) -> None:
        self.scripts = list(scripts)
        self.close_delay_s = close_delay_s
        self.connections = 0
        self.answered = 0
        self.server = gevent.server.StreamServer(("127.0.0.1", 0), self._serve)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _serve(self, sock: Any, _address: Any) -> None:
        reader = sock.makefile("rb")
        path = _read_request(reader)
        if path is not None and path != CHAT_PATH:
            sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            path = None
        if path is not None:
            script = iter(self.scripts[self.connections] if self.connections < len(self.scripts) else [])
            self.connections += 1
        while path is not None:
            step = next(script, "answer")
            if step == "answer":
                sock.sendall(ANSWER)
                self.answered += 1
                path = _read_request(reader)
                continue
            if step == "close":
                gevent.sleep(self.close_delay_s)
            else:
                sock.sendall(b"HTTP/1.1 200 OK\r\n")
            break
        reader.close()
        sock.close()

    def stop(self) -> None:
        self.server.stop()


def _read_request(reader: Any) -> bytes | None:
    """Read one request (head and Content-Length body) and return its path; None at the end of the connection."""
    length = 0
    line = reader.readline()
    if not line:
        return None
    path = line.split(b" ")[1]
    line = reader.readline()
    while line not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        line = reader.readline()
    reader.read(length)
    return path


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(*scripts: list[str], close_delay_s: float = 0.0) -> ScriptedServer:
        servers.append(ScriptedServer(*scripts, close_delay_s=close_delay_s))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


IDLE_S = 0.05  # the tests' `IDLE_CLOSE_MIN_S`, so that a connection idles past it in no time


CLOSE_DELAY_S = 0.3  # the scripted servers' close: late enough to tell the clocks apart


@pytest.fixture(autouse=True)
def short_idle_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(users, "IDLE_CLOSE_MIN_S", IDLE_S)
    monkeypatch.setattr(users, "RESEND_WINDOW_S", CLOSE_DELAY_S + 0.2)


def call_after_idling(h: Harness, n: int) -> list[RequestRecord]:
    """`n` requests, each after its connection idled past `IDLE_CLOSE_MIN_S`."""
    for _ in range(n):
        h.call(1)
        gevent.sleep(IDLE_S * 1.2)
    return h.records


def retried(h: Harness) -> list[dict[str, Any]]:
    return [e for e in h.locust_events if e["request_type"] == RETRIED_TYPE]


def test_a_request_whose_kept_alive_connection_closed_before_any_byte_is_resent_once(scripted: Any) -> None:
    # The server reads the second request on the kept-alive connection and closes it 300 ms later
    # without a byte: as a close that crossed the request on the wire, but observable.
    server = scripted(["answer", "close"], close_delay_s=CLOSE_DELAY_S)
    h = Harness(ChatStreamUser, server.url, "m")
    records = call_after_idling(h, 2)
    assert [r.error_kind for r in records] == [None, None], [r.error_message for r in records]
    assert (server.connections, server.answered) == (2, 2)  # the resend on a new connection, answered once
    [retry] = retried(h)
    assert retry["exception"] is None and retry["name"] == records[1].request_class
    assert retry["response_time"] >= 300  # the failed attempt's time
    # The closed-loop clock restarts at the resend: the 300 ms the first send waited are not TTFT.
    assert records[1].ttft_us < 250_000 and records[1].e2e_us < 250_000, records[1]
    assert records[1].completion_tokens == 2 and len(records[1].itl_us) == 1


def test_an_open_loop_request_keeps_its_scheduled_clock_through_a_resend(scripted: Any) -> None:
    server = scripted(["answer", "close"], close_delay_s=CLOSE_DELAY_S)
    h = Harness(OpenLoopChatUser, server.url, "m")
    for _ in range(2):
        h.user._dispatch(h.user.workload.next_request(h.user.rng), time.perf_counter())
        h.user.pool.join()
        gevent.sleep(IDLE_S * 1.2)
    records: list[RequestRecord] = h.records
    assert [r.error_kind for r in records] == [None, None] and len(retried(h)) == 1
    assert records[1].ttft_us >= 300_000  # measured from the scheduled time, the failed send included


@pytest.mark.parametrize(
    ("scripts", "idle"),
    [
        ([["close"]], True),  # a new connection closed: the server's failure
        ([["answer", "partial"]], True),  # a byte of the answer came: it reached the server
        ([["answer", "close"]], False),  # a connection in continuous use: not an idle close
        ([["answer", "close"]], "late"),  # closed long after the send: it may have reached the server
    ],
    ids=["new-connection", "after-a-byte", "in-continuous-use", "late-close"],
)
def test_a_close_on_a_new_connection_in_use_late_or_after_a_byte_fails_and_is_never_resent(
    scripted: Any, scripts: list[list[str]], idle: bool | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not idle:  # requests back to back: idle far below the limit, however busy the machine
        monkeypatch.setattr(users, "IDLE_CLOSE_MIN_S", 1.0)
    if idle == "late":
        monkeypatch.setattr(users, "RESEND_WINDOW_S", CLOSE_DELAY_S / 3)
    server = scripted(*scripts, close_delay_s=CLOSE_DELAY_S if idle == "late" else 0.0)
    h = Harness(ChatStreamUser, server.url, "m")
    records = call_after_idling(h, len(scripts[0])) if idle else h.call(len(scripts[0]))
    assert records[-1].error_kind is ErrorKind.CONNECT
    assert server.connections == 1 and not retried(h)


def test_a_resend_that_fails_too_counts_once(scripted: Any) -> None:
    server = scripted(["answer", "close"], ["close"])
    h = Harness(ChatStreamUser, server.url, "m")
    records = call_after_idling(h, 2)
    assert records[-1].error_kind is ErrorKind.CONNECT and len(records) == 2
    assert server.connections == 2 and len(retried(h)) == 1


def test_a_connection_idle_past_the_expiry_is_not_reused(scripted: Any) -> None:
    """The client closes an idle connection before the server's keep-alive limit would."""
    server = scripted()
    h = Harness(ChatStreamUser, server.url, "m")
    h.user.connections.expiry_s = 0.3
    h.call(1)
    h.call(1)  # at once: the same connection
    assert server.connections == 1
    gevent.sleep(0.4)
    assert h.call(1)[-1].ok and server.connections == 2 and not retried(h)


# A real uvicorn server whose keep-alive limit is short, answering chat streams as vLLM does
# (vLLM serves through uvicorn, whose default limit is 5 s); GET /served counts what it answered.
UVICORN_APP = """
import json, sys
import uvicorn

EVENTS = [b"data: " + json.dumps(e).encode() + b"\\n\\n" for e in json.loads(sys.argv[3])] + [b"data: [DONE]\\n\\n"]
served = 0

async def app(scope, receive, send):
    global served
    if scope["path"] != "/v1/chat/completions":  # GET /served; the workload's /tokenize: none here
        status, text = (200, str(served)) if scope["path"] == "/served" else (404, "")
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": text.encode()})
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for event in EVENTS:
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
    served += 1

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), timeout_keep_alive=float(sys.argv[2]),
            lifespan="off", log_level="warning", access_log=False)
"""
UVICORN_KEEPALIVE_S = IDLE_S * 2


@pytest.fixture
def uvicorn_server(tmp_path: Path) -> Iterator[str]:
    script = tmp_path / "app.py"
    script.write_text(UVICORN_APP)
    port = free_port()
    args = [sys.executable, str(script), str(port), str(UVICORN_KEEPALIVE_S), json.dumps(_EVENTS)]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_served(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _served(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(f"{url}/served", timeout=5) as resp:
        return int(resp.read())


def _wait_until_served(url: str, proc: subprocess.Popen) -> None:
    until = time.monotonic() + 30
    while time.monotonic() < until:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            _served(url)
            return
        except OSError:
            gevent.sleep(0.05)
    raise RuntimeError("uvicorn did not start")


def at_the_keepalive_boundary(url: str, users: int, rounds: int) -> Harness:
    """`users` closed-loop users, each sending `rounds` requests spaced at the server's keep-alive
    limit, give or take up to 1.5 ms (in 0.1 ms steps), where its close meets the next send."""
    h = Harness(ChatStreamUser, url, "m")
    all_users = [h.user, *(ChatStreamUser(h.env) for _ in range(users - 1))]
    for user in all_users[1:]:
        user.on_start()

    def send(index: int, user: ChatStreamUser) -> None:
        user.chat()
        for n in range(rounds):
            gevent.sleep(UVICORN_KEEPALIVE_S + ((n * users + index) % 31 - 15) * 1e-4)
            user.chat()

    gevent.joinall([gevent.spawn(send, i, u) for i, u in enumerate(all_users)], raise_error=True)
    return h


def test_requests_at_a_real_uvicorn_s_keepalive_limit_never_fail(uvicorn_server: str) -> None:
    h = at_the_keepalive_boundary(uvicorn_server, users=8, rounds=40)
    failed = [r.error_message for r in h.records if not r.ok]
    assert len(h.records) == 8 * 41 and not failed, failed
    assert _served(uvicorn_server) == len(h.records)  # each answered once: no resent request had reached it
    # The race really happened (without the resend each of these was a `connect` failure).
    assert retried(h), "no request met a keep-alive close: the test no longer reproduces the race"


def test_a_connection_given_up_before_its_response_frees_its_slot() -> None:
    """A --cancel-after-ms hang-up while the body is sent or the headers awaited leaves no response to
    release the connection with: `abandon()` closes it, else the pool's one slot is held for good."""
    from geventhttpclient import HTTPClient
    from slogate.locustfiles.load.connections import KeptAlivePool

    listener = gevent.server.StreamServer(("127.0.0.1", 0), lambda sock, _: gevent.sleep(5))
    listener.start()
    try:
        client = HTTPClient("127.0.0.1", listener.server_port, concurrency=1)
        pool = KeptAlivePool(client._connection_pool)
        sock = client._connection_pool.get_socket()  # the request's connection, out of the pool
        assert client._connection_pool._semaphore.counter == 0
        pool.abandon()
        assert client._connection_pool._semaphore.counter == 1 and sock.closed
        pool.abandon()  # nothing out any more: nothing released twice
        assert client._connection_pool._semaphore.counter == 1
        client._connection_pool.return_socket(client._connection_pool.get_socket())  # returned: not out
        pool.abandon()
        assert client._connection_pool._semaphore.counter == 1
    finally:
        listener.stop()
