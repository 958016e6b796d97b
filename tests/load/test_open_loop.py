"""Open-loop arrivals and the load generator's self-check."""

import random
import statistics
from pathlib import Path

import pytest
from slogate.launch.locust_command import LOCUSTFILE_DIR
from slogate.locustfiles.load.arrivals import arrival_gaps
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.self_check import Saturation
from slogate.slo.gate.spec import parse_spec

from tests.conftest import ROOT


@pytest.mark.parametrize(
    ("process", "burstiness", "cv"),
    [("constant", 1, 0.0), ("poisson", 1, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4, 0.5)],
)
def test_scheduled_sends_match_the_requested_rate_and_distribution(process: str, burstiness: float, cv: float) -> None:
    gaps = arrival_gaps(process, 20.0, random.Random(42), burstiness)
    sample = [next(gaps) for _ in range(20_000)]
    assert sum(sample) / len(sample) == pytest.approx(1 / 20, rel=0.03)  # 20 sends/s
    assert statistics.pstdev(sample) / statistics.mean(sample) == pytest.approx(cv, abs=0.06)


def test_same_seed_same_schedule() -> None:
    a, b = arrival_gaps("poisson", 5, random.Random(1)), arrival_gaps("poisson", 5, random.Random(1))
    assert [next(a) for _ in range(100)] == [next(b) for _ in range(100)]


def test_bad_arrival_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="--arrival-rate must be > 0"):
        next(arrival_gaps("poisson", 0, random.Random(1)))
    with pytest.raises(ValueError, match="--arrival-process must be one of"):
        next(arrival_gaps("bursty", 1, random.Random(1)))


def store(ttft_ms: float) -> MetricsStore:
    s = MetricsStore()
    for i in range(50):
        s.add(RequestRecord("shared", float(i), e2e_us=int(ttft_ms * 1000) + 5000, ttft_us=int(ttft_ms * 1000)))
    return s


SPEC = parse_spec({"slos": [{"metric": "ttft", "percentile": 95, "max_ms": 200}], "min_samples": 10})


def test_a_fail_that_client_delay_could_explain_is_inconclusive() -> None:
    verdict = evaluate(SPEC, store(230), saturation=Saturation("saturated", client_delay_ms=45))
    assert verdict.status == "inconclusive" and verdict.exit_code == 3 and "saturated" in verdict.reasons[0]


def test_a_fail_beyond_the_client_delay_stays_a_fail_and_a_pass_stays_a_pass() -> None:
    assert evaluate(SPEC, store(400), saturation=Saturation("saturated", 45)).status == "fail"
    passing = evaluate(SPEC, store(100), saturation=Saturation("saturated", 45))
    assert passing.status == "pass" and "verdict stands" in passing.reasons[0]


def test_dropped_and_late_sends_are_counted(own_fault_server, locust_run, tmp_path: Path) -> None:
    url, _ = own_fault_server
    run = locust_run(
        url, "-u", "1", "-t", "3s",
        "--arrival-rate", "20", "--arrival-process", "constant", "--max-in-flight", "2",
        "--model", "ttft_ms=300,tokens=2", "--shared-prefix-tokens", "20", locustfile="open-loop",
    )  # fmt: skip
    total = run.report["metrics"]["all"]
    # 20/s with 2 slots of >= 0.3 s each (at most ~6.7 answered a second): most sends find no free slot,
    # however slow the machine (a slower answer only drops more).
    assert total["dropped"] > total["requests"] >= 6
    assert 20 <= total["dropped"] + total["requests"] <= 63  # 20/s over the (at most 3 s) the user was sending
    assert total["ttft_ms"]["p50"] >= 300  # measured from the schedule
    assert total["send_lag_ms"]["count"] == total["requests"]
    assert any("scheduled requests were dropped" in r for r in run.report["reasons"])
    assert run.report["run"]["workload"]["open_loop"]["rate_per_user"] == 20


def test_requests_in_flight_at_the_stop_are_reported_unfinished_with_their_ttft() -> None:
    s = store(100)
    s.add(RequestRecord("shared", 60.0, e2e_us=900_000, ttft_us=700_000, error_kind=ErrorKind.UNFINISHED))
    s.add(RequestRecord("shared", 61.0, e2e_us=300_000, error_kind=ErrorKind.UNFINISHED))
    total = s.get("all")
    assert (total.unfinished, total.unfinished_waiting, total.failures, total.requests) == (2, 1, 0, 50)
    # The first token came at 700 ms; the other had waited 300 ms (a lower bound) when the run stopped.
    assert total.latency["ttft"].count == 52 and total.latency["ttft"].max_ms() == pytest.approx(700, rel=0.01)
    assert total.latency["e2e"].count == 50  # no end-to-end figure for an answer that did not end


def test_a_server_too_slow_to_answer_before_the_stop_fails_instead_of_vanishing() -> None:
    overloaded = store(100)  # 50 answered fast; then the server stalled
    for i in range(10):
        late = RequestRecord("shared", 60.0 + i, e2e_us=5_000_000 - i * 100_000, error_kind=ErrorKind.UNFINISHED)
        overloaded.add(late)
    verdict = evaluate(SPEC, overloaded)
    assert verdict.status == "fail" and verdict.results[0].observed >= 4000  # without them: p95 100 ms, a pass


@pytest.mark.parametrize(
    ("locustfile", "extra"),
    [("open-loop", ["--arrival-rate", "2"]), ("chat", []), ("openai", [])],
)
def test_the_end_of_the_run_never_loses_a_request_in_flight(
    own_fault_server, locust_run, locustfile: str, extra: list[str]
) -> None:
    url, _ = own_fault_server
    run = locust_run(
        url, "-u", "2", "-r", "2", "-t", "4s", *extra,
        "--model", "ttft_ms=100,tokens=100,itl_ms=100", "--shared-prefix-tokens", "20", locustfile=locustfile,
    )  # fmt: skip
    total = run.report["metrics"]["all"]
    # Each answer takes ~10 s, the run 4 s (time for a slow machine to start the SDK's users): every
    # request is still streaming when it stops.
    assert total["requests"] == 0 and total["unfinished"] >= 2
    # Each counts in TTFT: exactly, or (sent in the last 100 ms, no first token yet) with the time it waited.
    assert total["ttft_ms"]["count"] == total["unfinished"] and total["unfinished_waiting"] < total["unfinished"]
    assert total["ttft_ms"]["p50"] >= 100
    assert "Unfinished (in flight when the run stopped; not failures)" in run.stdout


def test_a_starved_generator_is_inconclusive_not_a_server_failure(fault_server, locust_run, tmp_path: Path) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 40}\nmin_samples: 5\n")
    run = locust_run(
        fault_server, "-u", "3", "-r", "3", "-t", "3s",
        "--model", "ttft_ms=20,tokens=2", "--shared-prefix-tokens", "20", "--slo-file", str(slo),
        "--arrival-rate", "5", locustfile=ROOT / "tests" / "locustfile_starved.py",
    )  # fmt: skip
    report = run.report
    assert report["metrics"]["all"]["ttft_ms"]["p95"] > 40  # the hog made sends late against their schedule
    assert run.code == 3 and report["verdict"] == "inconclusive"
    assert any("load generator was saturated" in r and "--processes" in r for r in report["reasons"])
    assert report["self_check"]["saturated"] and report["self_check"]["loop_lag_ms"]["p99"] > 40


def test_stages_parse_into_cumulative_ends() -> None:
    from slogate.locustfiles.load.stages import parse_stages

    assert parse_stages("2s:1, 3s:4,1m:0") == [(2, 1), (5, 4), (65, 0)]
    for bad in ("", "2s", "x:1", "2s:-1"):
        with pytest.raises(ValueError, match="--stages"):
            parse_stages(bad)


def test_rate_stages_ramp_the_offered_load(own_fault_server, locust_run) -> None:
    url, _ = own_fault_server
    run = locust_run(
        url, "--stages", "2s:1,2s:4",
        "--arrival-rate", "10", "--arrival-process", "constant", "--model", "ttft_ms=10,tokens=2",
        "--shared-prefix-tokens", "20", "--no-prime-prefixes",
        locustfile=LOCUSTFILE_DIR / "chat_open_loop_stages.py",
    )  # fmt: skip
    sent = run.report["metrics"]["all"]["requests"]
    # 1 user x 10/s for 2 s, then 4 users x 10/s for 2 s: about 20 + 80 sends, and the run ends by itself.
    assert 67 <= sent <= 106, run.stderr[-1500:]
