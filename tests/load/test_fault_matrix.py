"""Every fault kind in one run: the fault server injects a different fault per request and logs
what it injected; the report must account for every request, exactly, by kind. Then the same
faults on each endpoint, in that endpoint's own event format. (TLS, a fault of the whole server
rather than of one request, has its own runs: tests/load/test_faults_tls.py.)"""

import concurrent.futures
import itertools
import json
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from slogate.launch import fault_server as fault
from slogate.locustfiles.load.endpoints import ENDPOINTS
from slogate.slo.gate.record import ErrorKind

from tests.conftest import server_log
from tests.stream_client import stream

# What the server injected -> how the client must count it (None: a success).
EXPECTED_KIND: dict[str, ErrorKind | None] = {
    "ok": None,
    "http_429": ErrorKind.HTTP_429,
    "http_503": ErrorKind.HTTP_5XX,
    "http_400": ErrorKind.HTTP_4XX,
    "closed_before_response": ErrorKind.CONNECT,
    "cut_mid_stream": ErrorKind.TRUNCATED,  # the connection dropped mid-stream
    "not_json": ErrorKind.PROTOCOL,  # a data line that is not JSON
    "bad_shape": ErrorKind.PROTOCOL,  # JSON, but not the event's shape (`{"choices": [null]}`)
    "error_event": ErrorKind.STREAM_ERROR,  # an SSE error event
    "no_done": ErrorKind.TRUNCATED,  # a proper end of the body, but no `data: [DONE]`
    "no_content": ErrorKind.NO_CONTENT,
    "stall": ErrorKind.TIMEOUT,  # 3 s without a byte, past --request-timeout 1
    # A byte every 250 ms: never 1 s without one, but never done within --request-timeout 1 in all.
    "trickle": ErrorKind.TIMEOUT,
    "huge_line": ErrorKind.PROTOCOL,  # a 10 MiB line, failed at 1 MiB (sse.MAX_LINE_BYTES)
    "not_sse": ErrorKind.PROTOCOL,  # 200, but the whole answer as JSON: stream ignored
}
# A fault of the whole server (every handshake), with runs of its own: tests/load/test_faults_tls.py.
SERVER_FAULTS: dict[str, ErrorKind] = {"tls": ErrorKind.TLS}
TOKENS = 5


def test_every_fault_kind_is_named_and_expected() -> None:
    assert set(EXPECTED_KIND) == set(fault.MIX_ALL)
    # Made by the client: dropped and unfinished (open loop, the stop), cancelled (--cancel-fraction),
    # invalid_output (its check of --tools / --response-format).
    client_made = (ErrorKind.DROPPED, ErrorKind.UNFINISHED, ErrorKind.CANCELLED, ErrorKind.INVALID_OUTPUT)
    server_made = {k for k in ErrorKind if k not in client_made}
    expected = {k for k in EXPECTED_KIND.values() if k} | set(SERVER_FAULTS.values())
    assert expected == server_made  # every kind a server can cause


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_one_run_with_every_fault_accounts_for_every_request_by_kind(own_fault_server, locust_run, endpoint) -> None:
    url, log = own_fault_server
    model = f"mix=1,stall_ms=3000,tokens={TOKENS}"
    # Four users: a cycle's two 1 s faults (stall, trickle) hold two of them, the others go on.
    run = locust_run(
        url, "-u", "4", "-r", "4", "-t", "4s", "--stop-timeout", "5", "--request-timeout", "1",
        "--model", model, "--no-prime-prefixes", "--shared-prefix-tokens", "20", "--endpoint", endpoint, timeout=60,
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]  # no SLO file: measured, not gated
    total = run.report["metrics"]["all"]
    # --stop-timeout lets every request in flight at the end finish (each ends within the 1 s
    # timeout): none is unfinished, none dropped, so the server's log has each of them.
    assert total["unfinished"] == 0 and total["dropped"] == 0
    rows = server_log(log, total["requests"])
    injected = Counter(row["fault"] or "ok" for row in rows)
    assert len(rows) == total["requests"], (injected, total)
    assert set(injected) == set(fault.MIX_ALL) and min(injected.values()) >= 2, injected  # each at least twice

    expected = Counter()
    for name, n in injected.items():
        if EXPECTED_KIND[name] is not None:
            expected[str(EXPECTED_KIND[name])] += n
    assert total["errors_by_kind"] == dict(expected), (injected, total["errors_by_kind"])
    assert total["failures"] == sum(expected.values())
    successes = total["requests"] - total["failures"]
    assert successes == injected["ok"] == sum(r["outcome"] == "ok" for r in rows)
    assert total["ttft_ms"]["count"] == successes and total["output_tokens"] == TOKENS * successes
    by_class = [run.report["metrics"][c] for c in ("shared", "unique")]  # the classes add up to the whole
    assert sum(m["requests"] for m in by_class) == total["requests"]
    assert sum((Counter(m["errors_by_kind"]) for m in by_class), Counter()) == expected
    # The server says what it could not finish: never a success, always a connection it closed or
    # cut (a fault after which the client stops reading may find it gone, or not: either is fine).
    unfinished_by_server = Counter(r["fault"] or "ok" for r in rows if not r["completed"])
    assert unfinished_by_server["ok"] == 0, unfinished_by_server
    for name in ("closed_before_response", "cut_mid_stream"):
        assert unfinished_by_server[name] == injected[name]


def test_mix_cycles_or_draws_seeded() -> None:
    server = fault.Server(None)
    names = fault.parse_mix("mix=ok+stall+http_429,tokens=3")
    assert names == ("ok", "stall", "http_429") and fault.parse_mix("mix=1") == fault.MIX_ALL
    assert [server.next_fault("a", names, None) for _ in range(4)] == ["ok", "stall", "http_429", "ok"]
    drawn = [server.next_fault("b", fault.MIX_ALL, 7) for _ in range(50)]
    again = fault.Server(None)
    assert drawn == [again.next_fault("b", fault.MIX_ALL, 7) for _ in range(50)] and len(set(drawn)) > 5
    assert fault.parse_behaviour("mix=1,stall_ms=2000")["stall_ms"] == 2000
    with pytest.raises(ValueError, match="mix: unknown fault 'http_999'"):
        fault.parse_mix("mix=ok+http_999")


def test_slots_serve_at_most_that_many_streams_at_once(tmp_path: Path) -> None:
    """`slots=1`: three requests sent together are served one after the other, so each first
    token comes at least one service time (ttft_ms + (tokens-1) * itl_ms) after the previous one."""
    log = tmp_path / "served.jsonl"
    proc, url = fault.spawn(log)
    try:
        body = json.dumps({"model": "slots=1,ttft_ms=100,tokens=3,itl_ms=25", "stream": True}).encode()

        def post(_: int) -> bytes:
            req = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.read()

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(post, range(3)))
        assert all(a.rstrip().endswith(b"data: [DONE]") for a in answers)
        firsts = sorted(r["first_content_at"] for r in server_log(log, 3))
        assert all(later - earlier >= 0.15 for earlier, later in itertools.pairwise(firsts))
    finally:
        proc.terminate()
        proc.wait()


# The faults whose reading is the event parser's: the plain http.client reader below has no total
# deadline (a trickle would hold it for minutes) and reads any Content-Type; the users have both,
# and the Locust run above covers those two faults on each endpoint.
PARSER_FAULTS = tuple(name for name in fault.MIX_ALL if name not in ("trickle", "not_sse"))


@pytest.mark.parametrize("name", sorted(ENDPOINTS))
def test_every_fault_on_each_endpoint_is_counted_by_kind(name: str, tmp_path: Path) -> None:
    """Each fault once (`mix=...` cycles through them), on one endpoint: each request counted as
    the fault it met; the successes with the right TTFT event, usage and answer; and the log's
    `body` (--log-bodies) is exactly what was sent."""
    endpoint = ENDPOINTS[name]
    log = tmp_path / "served.jsonl"
    proc, url = fault.spawn(log, log_bodies=True)
    try:
        model = f"mix={'+'.join(PARSER_FAULTS)},stall_ms=1500,tokens=3,ttft_ms=30"
        sent = []
        for i in range(len(PARSER_FAULTS)):
            messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"request {i}"}]
            sent.append(stream(url, endpoint, model, messages, timeout_s=1.0))
        rows = server_log(log, len(PARSER_FAULTS))
    finally:
        proc.terminate()
        proc.wait()
    assert sorted(r["fault"] or "ok" for r in rows) == sorted(PARSER_FAULTS)
    for row in rows:
        # each body is unique (`request i`): the row's logged body names the request it was
        [(record, answer)] = [(record, answer) for body, record, answer in sent if body == row["body"]]
        injected = row["fault"] or "ok"
        assert record.error_kind == EXPECTED_KIND[injected], (injected, record.error_message)
        if injected == "ok":
            assert record.ttft_us >= 30_000 and len(record.itl_us) == 2  # the opening events did not count
            assert (record.prompt_tokens, record.completion_tokens) == (10, 3)
            assert answer == " tok0 tok1 tok2"
