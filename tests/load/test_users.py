"""The streaming users against the fault server: TTFT truth, and every failure counted by kind."""

import statistics
import time
import tracemalloc
from typing import Any

import gevent
import pytest
import slogate.locustfiles.load.options  # noqa: F401  (registers the workload options)
from locust.argument_parser import parse_options
from locust.env import Environment
from locust.event import Events
from slogate.launch.server import free_port
from slogate.locustfiles.load.sse import MAX_LINE_BYTES
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.users import ChatStreamUser
from slogate.locustfiles.load.users_openai import OpenAIChatUser
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.plugin.listener import RECORD_KEY

USERS = [ChatStreamUser, OpenAIChatUser]


class Harness:
    """One user in a fresh Environment; `call(n)` runs its task n times and returns the records."""

    def __init__(self, user_class: type, host: str, model: str, *extra: str) -> None:
        opts = parse_options(["--model", model, "--no-prime-prefixes", "--shared-prefix-tokens", "20", *extra])
        self.env = Environment(user_classes=[user_class], events=Events(), host=host, parsed_options=opts)
        self.records: list[RequestRecord] = []
        self.locust_events: list[dict[str, Any]] = []
        self.env.events.request.add_listener(self._on_request)
        self.user = user_class(self.env)
        self.user.on_start()

    def _on_request(self, **kw: Any) -> None:
        self.locust_events.append(kw)
        if RECORD_KEY in kw["context"]:
            self.records.append(kw["context"][RECORD_KEY])

    def call(self, n: int = 1) -> list[RequestRecord]:
        for _ in range(n):
            self.user.chat()
        return self.records


@pytest.mark.parametrize("user_class", USERS)
def test_ttft_is_the_first_content_chunk_not_the_role_chunk(fault_server: str, user_class: type) -> None:
    records = Harness(user_class, fault_server, "role_first=1,ttft_ms=150,tokens=4,itl_ms=20").call(6)
    # The true delay is 150 ms and the role chunk came at ~0 ms: nothing may be below 150 ms. The
    # upper side only has to rule out gross errors (a busy shared machine delays a few events).
    assert all(rec.ttft_us >= 150_000 for rec in records)
    assert statistics.median(rec.ttft_us for rec in records) < 200_000
    for rec in records:
        assert rec.ok, rec.error_message
        assert rec.completion_tokens == 4 and len(rec.itl_us) == 3
    # The server writes a chunk every 20 ms. A client stalled a while (the shared machine) reads the
    # chunks queued meanwhile at once, stamped (nearly) together, so the median gap, not each, must be 20 ms: near 0
    # would mean chunks stamped together, far above a client that reads late.
    gaps = [gap for rec in records for gap in rec.itl_us]
    assert 10_000 <= statistics.median(gaps) < 100_000, gaps


def test_ttft_is_when_the_token_arrived_not_when_a_busy_client_parsed_it(fault_server: str) -> None:
    """A client core busy elsewhere reads the first token late; the kernel's receive stamp keeps
    that wait out of the server's TTFT (locustfiles/load/rx_timestamps.py)."""
    h = Harness(ChatStreamUser, fault_server, "ttft_ms=100,tokens=2,itl_ms=5")
    h.call(1)  # connected and warm

    def hog_the_event_loop() -> None:
        gevent.sleep(0.03)  # the request is out; now nothing else runs for 400 ms
        end = time.perf_counter() + 0.4
        while time.perf_counter() < end:
            pass

    hog = gevent.spawn(hog_the_event_loop)
    started = time.perf_counter()
    rec = h.call(1)[-1]
    hog.join()
    assert time.perf_counter() - started >= 0.43  # the stream really was parsed after the stall
    assert rec.ok, rec.error_message
    assert 100_000 <= rec.ttft_us < 300_000, rec.ttft_us


def test_sdk_ttft_starts_when_the_request_leaves_not_while_the_sdk_prepares_it(
    fault_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openai.resources.chat.completions import Completions

    create = Completions.create

    def slow_to_prepare(self: Completions, *args: Any, **kwargs: Any) -> Any:
        gevent.sleep(0.3)  # client-side work before anything is sent
        return create(self, *args, **kwargs)

    monkeypatch.setattr(Completions, "create", slow_to_prepare)
    rec = Harness(OpenAIChatUser, fault_server, "ttft_ms=100,tokens=2,itl_ms=5").call(1)[-1]
    assert rec.ok, rec.error_message
    assert 100_000 <= rec.ttft_us < 300_000, rec.ttft_us
    assert rec.e2e_us < 300_000, rec.e2e_us


def test_locust_stats_get_ttft_and_e2e_entries_per_class(fault_server: str) -> None:
    h = Harness(ChatStreamUser, fault_server, "ttft_ms=20,tokens=3")
    h.call(6)
    names = {(e["request_type"], e["name"]) for e in h.locust_events}
    assert names <= {("TTFT", "shared"), ("TTFT", "unique"), ("E2E", "shared"), ("E2E", "unique")}
    assert ("TTFT", h.records[0].request_class) in names
    ttft_events = [e for e in h.locust_events if e["request_type"] == "TTFT"]
    assert len(ttft_events) == 6 and all(e["response_time"] >= 20 for e in ttft_events)


FAULTS = [
    ("status=500", ErrorKind.HTTP_5XX),
    ("status=429", ErrorKind.HTTP_429),
    ("status=404", ErrorKind.HTTP_4XX),
    ("tokens=5,cut_after=2", ErrorKind.TRUNCATED),
    ("tokens=5,error_after=2", ErrorKind.STREAM_ERROR),
    ("tokens=5,stall_after=1", ErrorKind.TIMEOUT),
    ("tokens=0", ErrorKind.NO_CONTENT),
    ("tokens=5,bad_shape_after=2", ErrorKind.PROTOCOL),  # `{"choices": [null]}`: the SDK passes it on
    ("tokens=5,bad_json_after=2", ErrorKind.PROTOCOL),  # the SDK parses it itself (JSONDecodeError)
    # A byte every 50 ms never trips a between-bytes timeout: --request-timeout is the whole request's.
    ("tokens=5,trickle_after=1,trickle_ms=50", ErrorKind.TIMEOUT),
    ("tokens=3,huge_line_after=1", ErrorKind.PROTOCOL),  # a 10 MiB line: failed at 1 MiB
    ("not_sse=1", ErrorKind.PROTOCOL),  # 200 with the whole answer as JSON
]


@pytest.mark.parametrize("user_class", USERS)
@pytest.mark.parametrize(("model", "kind"), FAULTS)
def test_faults_are_counted_by_kind_without_crash_or_loss(
    fault_server: str, user_class: type, model: str, kind: ErrorKind
) -> None:
    # A stall ends only at the timeout, so keep that one short; the others need room to answer (a 10 MiB
    # line took over 0.5 s to reach its 1 MiB limit on a loaded CI machine: a timeout, not the fault).
    h = Harness(user_class, fault_server, model, "--request-timeout", "0.2" if kind is ErrorKind.TIMEOUT else "5")
    records = h.call(3)
    assert len(records) == 3  # one record per request: nothing lost
    assert [r.error_kind for r in records] == [kind] * 3
    failed = [e for e in h.locust_events if e["exception"] is not None]
    assert len(failed) == 3 and str(kind) in str(failed[0]["exception"])


@pytest.mark.parametrize("user_class", USERS)
def test_a_10_mib_line_fails_at_the_cap_and_the_client_never_holds_it(fault_server: str, user_class: type) -> None:
    h = Harness(user_class, fault_server, "tokens=3,huge_line_after=1")
    h.call(1)  # the client's own first-use allocations, off the measure
    tracemalloc.start()
    try:
        record = h.call(1)[-1]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record.error_kind is ErrorKind.PROTOCOL and "longer than 1 MiB" in record.error_message
    assert peak < 4 * MAX_LINE_BYTES, peak  # holding the line would take 10 MiB at least


@pytest.mark.parametrize(
    "chunk",
    [
        {"choices": [{"index": 0, "delta": {"content": 5}}]},
        {"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": 2, "total_tokens": 1}},
    ],
)
def test_the_sdk_users_chunks_are_checked_as_the_raw_users_events(chunk: dict) -> None:
    """The SDK builds chunks without validating them (`construct_type`): text that is not a
    string and counts that are not counts are protocol errors there too, not figures carried
    into the report."""
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk
    from slogate.locustfiles.load.sse import StreamProtocolError
    from slogate.locustfiles.load.users_openai import _apply_chunk

    fields = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", **chunk}
    built = construct_type(type_=ChatCompletionChunk, value=fields)
    with pytest.raises(StreamProtocolError):
        _apply_chunk(built, StreamTimer("shared", 0.0, t0=0.0), 0.1)


def test_the_sdk_users_empty_usage_is_no_usage() -> None:
    """The SDK turns `"usage": {}` into a usage whose counts are None: absent, as raw SSE reads it
    (a stream that never sent its usage is truncated)."""
    from openai._models import construct_type
    from openai.types.chat import ChatCompletionChunk
    from slogate.locustfiles.load.users_openai import _apply_chunk

    fields = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [], "usage": {}}
    built = construct_type(type_=ChatCompletionChunk, value=fields)
    assert built.usage is not None and not _apply_chunk(built, StreamTimer("shared", 0.0, t0=0.0), 0.1)


def test_only_the_event_applier_s_shape_errors_count_as_protocol(fault_server: str, monkeypatch: Any) -> None:
    # A server's event of the wrong shape is a protocol failure...
    assert [r.error_kind for r in Harness(ChatStreamUser, fault_server, "bad_shape_after=1").call(1)] == [
        ErrorKind.PROTOCOL
    ]

    # ...but the same exception type raised by slogate's own code past the applier is a bug, not
    # the server's fault: it is raised, never counted as the server's protocol failure.
    def broken_finish(self: Any, now: float) -> None:
        raise TypeError("a bug in the client")

    monkeypatch.setattr(StreamTimer, "finish", broken_finish)
    with pytest.raises(TypeError, match="a bug in the client"):
        Harness(ChatStreamUser, fault_server, "tokens=2").call(1)


@pytest.mark.parametrize("user_class", USERS)
def test_connection_refused_is_a_connect_failure(fault_server: str, user_class: type) -> None:
    h = Harness(user_class, fault_server, "tokens=2")
    dead = f"http://127.0.0.1:{free_port()}"
    h.user.base_url = dead
    h.user.connect()
    records = h.call(2)
    assert [r.error_kind for r in records] == [ErrorKind.CONNECT] * 2


def test_a_request_after_a_cut_stream_uses_a_fresh_connection(fault_server: str) -> None:
    h = Harness(ChatStreamUser, fault_server, "tokens=5,cut_after=2")
    h.call(1)
    h.user.workload = type(h.user.workload)(
        h.user.workload.config.__class__(model="tokens=2", shared_prefix_tokens=20), "tokens=2", 1.0
    )
    assert h.call(1)[-1].ok
