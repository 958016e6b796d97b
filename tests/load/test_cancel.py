"""Cancellation (--cancel-fraction): clients that hang up mid-stream, counted as `cancelled`, and a
server that lets go of them (or does not) after the run."""

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import slogate.locustfiles.load.options  # noqa: F401  (registers the workload options)
from locust.argument_parser import parse_options
from slogate.launch import fault_server as fault
from slogate.locustfiles.load import users
from slogate.locustfiles.load.cancel import CancelPlan
from slogate.locustfiles.load.options import WorkloadOptions
from slogate.locustfiles.load.users import ChatStreamUser
from slogate.locustfiles.load.users_openai import OpenAIChatUser
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.plugin.cancel_drain import let_go
from slogate.slo.plugin.listener import RECORD_KEY
from slogate.slo.plugin.scraper import fetch

from tests.conftest import server_log
from tests.load.test_users import USERS, Harness


@pytest.fixture
def metrics_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fault server of this test alone that answers /metrics (its requests running), with its log."""
    log = tmp_path / "answered.jsonl"
    proc, url = fault.spawn(log, metrics=True)
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


def running(url: str) -> float:
    return fetch(url)["vllm:num_requests_running"]


@pytest.mark.parametrize("user_class", USERS)
def test_a_request_that_hangs_up_after_n_tokens_is_cancelled_and_the_server_sees_it_leave(
    metrics_server: tuple[str, Path], user_class: type
) -> None:
    url, log = metrics_server
    h = Harness(user_class, url, "tokens=200,itl_ms=10", "--cancel-fraction", "1", "--cancel-after-tokens", "3")
    records = h.call(2)
    assert [r.error_kind for r in records] == [ErrorKind.CANCELLED] * 2
    for rec in records:
        assert rec.ttft_us is not None and rec.completion_tokens == 3
        assert rec.e2e_us < 1_000_000  # 3 tokens, not the 2 s the whole answer takes
    # The connection was closed, not just left unread: the server saw the client leave mid-answer.
    rows = server_log(log, 2)
    assert [row["outcome"] for row in rows] == ["cancelled", "cancelled"], rows
    assert running(url) == 0  # and it let go
    # Not failures in Locust's table either: a CANCELLED row of their own (slo/plugin/listener.py).
    rows = [e for e in h.locust_events if RECORD_KEY in e["context"]]
    assert [(e["request_type"], e["exception"]) for e in rows] == [("CANCELLED", None)] * 2


@pytest.mark.parametrize("user_class", USERS)
def test_a_request_that_hangs_up_after_t_ms_keeps_its_ttft_and_the_user_goes_on(
    metrics_server: tuple[str, Path], user_class: type
) -> None:
    url, log = metrics_server
    # T leaves the first token (30 ms) time to come on a busy machine, where the SDK's first request
    # (its client and models built) is slow; a first token after T is the other case, tested below.
    h = Harness(
        user_class, url, "ttft_ms=30,tokens=100,itl_ms=20", "--cancel-fraction", "1", "--cancel-after-ms", "500"
    )
    rec = h.call(1)[-1]
    assert rec.error_kind == ErrorKind.CANCELLED, rec.error_message
    assert 30_000 <= rec.ttft_us < 500_000
    assert 470_000 <= rec.e2e_us < 1_200_000  # T from the start of the request (the SDK sends a few ms later)
    # Before the first token: cancelled without a TTFT. The user's connection pool is whole again.
    h2 = Harness(user_class, url, "ttft_ms=1000,tokens=2", "--cancel-fraction", "1", "--cancel-after-ms", "100")
    early = h2.call(2)
    assert [r.error_kind for r in early] == [ErrorKind.CANCELLED] * 2
    assert all(r.ttft_us is None and r.e2e_us < 600_000 for r in early)
    assert server_log(log, 3)[0]["outcome"] == "cancelled"


def test_the_seed_picks_the_requests_that_hang_up_and_leaves_the_prompts_alone(
    fault_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(*extra: str) -> tuple[list[bool], list[bytes]]:
        monkeypatch.setattr(users, "_user_numbers", itertools.count())  # the same user again: its seed
        h = Harness(ChatStreamUser, fault_server, "tokens=6", "--seed", "7", *extra)
        bodies: list[bytes] = []
        send = h.user._stream
        h.user._stream = lambda body, timer: (bodies.append(body), send(body, timer))[1]
        return [r.error_kind == ErrorKind.CANCELLED for r in h.call(20)], bodies

    picked, bodies = run("--cancel-fraction", "0.5", "--cancel-after-tokens", "2")
    assert 4 <= sum(picked) <= 16  # about half
    assert run("--cancel-fraction", "0.5", "--cancel-after-tokens", "2")[0] == picked  # the seed reproduces them
    assert run("--cancel-fraction", "0.5", "--cancel-after-ms", "5000", "--seed", "8")[0] != picked
    plain, plain_bodies = run()
    assert not any(plain)
    assert plain_bodies == bodies  # the prompts' RNG draws as without cancellation


def test_cancelled_requests_are_counted_apart_with_their_ttft_or_their_wait() -> None:
    store = MetricsStore()
    ok = RequestRecord("shared", 1.0, e2e_us=200_000, ttft_us=50_000, itl_us=[10_000] * 4, completion_tokens=5)
    cancelled = RequestRecord("shared", 1.0, e2e_us=80_000, ttft_us=40_000, itl_us=[10_000], completion_tokens=2)
    cancelled.error_kind = ErrorKind.CANCELLED
    before_first = RequestRecord("shared", 1.0, e2e_us=90_000, error_kind=ErrorKind.CANCELLED)
    for rec in (ok, cancelled, before_first):
        store.add(rec)
    m = store.get("all")
    assert (m.requests, m.failures, m.cancelled, m.error_rate) == (1, 0, 2, 0.0)
    # The cancelled one's first token counts, and the one hung up before any with its 90 ms wait.
    assert m.latency["ttft"].count == 3 and m.latency["ttft"].max_ms() == pytest.approx(90, rel=0.01)
    assert m.latency["e2e"].count == 1 and m.latency["itl"].count == 4 and m.output_tokens == 5
    summary = MetricsStore.from_wire(store.to_wire()).summary()
    assert summary["all"]["cancelled"] == summary["shared"]["cancelled"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cancel-fraction", "1.5", "--cancel-after-tokens", "2"], "between 0 and 1"),
        (["--cancel-fraction", "0.5"], "exactly one of"),
        (["--cancel-fraction", "0.5", "--cancel-after-tokens", "2", "--cancel-after-ms", "100"], "exactly one of"),
        (["--cancel-after-ms", "100"], "needs --cancel-fraction"),
        (["--cancel-fraction", "0.5", "--cancel-after-tokens", "-1"], "1 or more"),
        (["--cancel-fraction", "0.5", "--cancel-after-ms", "-5"], "above 0"),
    ],
)
def test_bad_cancellation_options_are_refused_in_one_line(args: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        WorkloadOptions.from_parsed(parse_options(args))
    assert "\n" not in str(e.value)


def test_cancellation_does_not_apply_to_a_trace() -> None:
    with pytest.raises(ValueError, match="--trace"):
        CancelPlan(0.5, 2).check(trace=True)
    assert not CancelPlan().active and CancelPlan().rng("1:0:0") is None


def test_a_server_that_keeps_generating_for_clients_that_left_is_reported(
    metrics_server: tuple[str, Path],
) -> None:
    url, _ = metrics_server
    Harness(ChatStreamUser, url, "tokens=200,itl_ms=10", "--cancel-fraction", "1", "--cancel-after-tokens", "2").call(1)
    figures = let_go(lambda: running(url), limit_s=1.0)
    assert figures is not None and figures["running_zero_after_s"] < 1.0
    lingering = "tokens=200,itl_ms=10,linger_ms=1500"
    Harness(ChatStreamUser, url, lingering, "--cancel-fraction", "1", "--cancel-after-tokens", "2").call(1)
    figures = let_go(lambda: running(url), limit_s=0.5)
    assert figures is not None and figures["still_running"] == 1.0, figures
    assert 0.5 <= figures["waited_s"] < 1.4, figures  # its last poll may end late on a loaded machine
    note = ServerFigures.from_json({"available": True, "after_stop": figures}).after_stop_note()
    assert note is not None and "still running 1 requests" in note and "hung up" in note
    assert let_go(lambda: running(url), limit_s=3.0)["running_zero_after_s"] >= 0.5  # it let go in the end
    assert ServerFigures(True).after_stop_note() is None and "after_stop" not in ServerFigures(True).to_json()


def test_an_sdk_user_hangs_up_with_the_stream_s_close(metrics_server: tuple[str, Path]) -> None:
    url, log = metrics_server
    h = Harness(OpenAIChatUser, url, "tokens=200,itl_ms=10", "--cancel-fraction", "1", "--cancel-after-tokens", "1")
    assert h.call(1)[-1].error_kind == ErrorKind.CANCELLED
    assert server_log(log, 1)[0]["outcome"] == "cancelled"


@pytest.mark.vllm
def test_vllm_lets_go_of_the_requests_whose_clients_hung_up(vllm_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the requests hang up after 4 of their 300 tokens: vLLM aborts them as their connection
    closes, so its running requests are back to 0 at once (a client that only stopped reading
    would leave each running for the rest of its 300 tokens)."""
    monkeypatch.setattr(users, "_user_numbers", itertools.count())  # user 0 of seed 2: its picks below
    args = ("--max-tokens", "300", "--ignore-eos", "--seed", "2")
    h = Harness(ChatStreamUser, vllm_server, "tiny", *args, "--cancel-fraction", "0.5", "--cancel-after-tokens", "4")
    kinds = [r.error_kind for r in h.call(6)]
    assert kinds == [ErrorKind.CANCELLED] * 2 + [None] * 3 + [ErrorKind.CANCELLED], kinds  # the last one hangs up
    assert all(r.ttft_us is not None for r in h.records) and h.records[0].completion_tokens == 4
    figures = let_go(lambda: running(vllm_server), limit_s=2.0)
    assert figures is not None and "running_zero_after_s" in figures, figures
