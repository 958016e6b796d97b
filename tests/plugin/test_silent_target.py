"""A target that accepts connections and never answers (a hung server, a proxy with no backend):
the run stops inconclusive within --slo-unreachable-s, with a reason that says so, instead of
waiting out --request-timeout or the model discovery's own timeout."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL, RequestRecord
from slogate.slo.plugin import target
from slogate.slo.plugin.watchers import silence_reason


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Completes every connection and answers nothing: a listening socket nobody accepts from (the
    kernel completes the handshakes into its backlog and keeps what the client sends). No thread:
    under pytest-xdist's workers threads are not greenlets, and a gevent socket cannot be shared
    between threads."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def test_the_probe_tells_silence_from_an_answer_and_from_a_refusal(silent_server, fault_server) -> None:
    started = time.monotonic()
    assert target.probe(silent_server, 0.5) == target.SILENT
    assert 0.5 <= time.monotonic() - started < 10  # its limit, not a socket's default wait
    assert target.probe(fault_server, 5) == target.ANSWERED
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert target.probe(f"http://127.0.0.1:{port}", 5) == target.FAILED  # refused: the requests say so themselves


def test_silence_is_a_reason_only_past_the_limit_and_with_no_request_succeeded() -> None:
    none = MetricsStore().get(ALL)
    assert silence_reason(target.SILENT, none, 14.9, 15) is None
    reason = silence_reason(target.SILENT, none, 15.0, 15)
    assert reason == (
        "target unreachable: it accepted connections but answered nothing in 15 s (no request succeeded, "
        "GET /v1/models got not a byte) (--slo-unreachable-s 15)"
    )
    assert "accepted no connection" in (silence_reason(target.NO_CONNECTION, none, 15, 15) or "")
    assert silence_reason(target.ANSWERED, none, 99, 15) is None  # slow, not silent: measured
    assert silence_reason(None, none, 99, 15) is None  # the probe still waits
    one = MetricsStore()
    one.add(RequestRecord("shared", 1.0, e2e_us=1000, ttft_us=500))
    assert silence_reason(target.SILENT, one.get(ALL), 99, 15) is None


@pytest.mark.parametrize("model", [[], ["--model", "m"]], ids=["discovery", "model-given"])
def test_a_run_against_a_silent_target_is_inconclusive_within_the_limit(silent_server, locust_run, model) -> None:
    """Without --model the users wait on model discovery (30 s), with it on their requests
    (--request-timeout 120 s): neither may keep the run past --slo-unreachable-s."""
    started = time.monotonic()
    run = locust_run(silent_server, "-u", "2", "-t", "60s", "--slo-unreachable-s", "3", *model, timeout=60)
    took = time.monotonic() - started
    assert run.code == 3, run.stderr[-2000:]
    report = run.report
    assert report["verdict"] == "inconclusive"
    assert any("accepted connections but answered nothing in 3 s" in r for r in report["reasons"]), report["reasons"]
    # Locust's own start and stop included (a loaded machine slows both): below the 30 s model discovery
    # and the 60 s run time that would otherwise keep it.
    assert took < 25, f"{took:.1f} s"
