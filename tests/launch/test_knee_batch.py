"""Capacity steps decided on batches of consecutive requests (launch/knee_batch.py, `--batch-s`):
the bounds that stay valid when a queue's waits come in busy periods."""

from pathlib import Path

import pytest
from slogate.launch import runner
from slogate.launch.capacity_at import judge_at_rate
from slogate.launch.knee import RunStep, SearchSettings
from slogate.launch.knee_batch import batch_fractions, decide_fractions
from slogate.launch.knee_interval import StepJudge
from slogate.slo.gate import sequential
from slogate.slo.gate.judge import judge
from slogate.slo.gate.report import Report, RunInfo

from slogate.cli import main
from tests.gate.test_correlation import SPEC, clustered
from tests.gate.test_correlation import per_second as store_of


def test_batches_are_whole_groups_of_intervals_in_send_order_without_the_cut_last_one() -> None:
    o = SPEC.objectives[0]
    ttfts = [100.0] * 20 + [400.0] * 5 + [100.0] * 15 + [400.0] * 10 + [100.0] * 7  # 5.7 s of sends
    assert batch_fractions(o, store_of(ttfts), 2.0) == [0.0, 0.25]  # [0, 2) s, [2, 4) s; [4, 6) cut
    assert batch_fractions(o, store_of(ttfts), 1.0) == [0.0, 0.0, 0.5, 0.0, 1.0]


def test_a_clean_pass_needs_about_ninety_batches_at_p95_and_99_percent() -> None:
    assert decide_fractions([0.0] * 120, 0.05, 0.01, 0.01) == "undecided"
    assert decide_fractions([0.0] * 140, 0.05, 0.01, 0.01) == "pass"
    assert decide_fractions([0.5] * 8, 0.05, 0.01, 0.01) == "fail"
    assert decide_fractions([], 0.05, 0.01, 0.01) == "undecided"


def test_busy_periods_over_the_target_are_not_passed_as_the_per_request_bounds_pass_them() -> None:
    # 1 batch in 15 all over: 6.7 % of the requests, a p95 that fails. The per-request bounds,
    # which take the requests as independent, pass it on the first 14 clean batches (140 samples).
    ttfts = clustered(300, busy_every=15)
    assert sequential.upper_rank(140, 95, 0.01) is not None  # 140 clean samples: an upper bound under the target
    o = SPEC.objectives[0]
    assert decide_fractions(batch_fractions(o, store_of(ttfts), 1.0), 0.05, 0.01, 0.01) != "pass"
    assert decide_fractions(batch_fractions(o, store_of(ttfts[:140]), 1.0), 0.05, 0.01, 0.01) == "undecided"


def step_report(ttfts: list[float]) -> Report:
    store = store_of(ttfts)
    return judge(SPEC, store, RunInfo())


def test_a_judge_with_batches_decides_the_percentile_on_them_and_the_per_request_one_does_not() -> None:
    clean_then_busy = clustered(14, busy_every=100) + clustered(30, busy_every=15)
    assert StepJudge(SPEC).decide(step_report(clean_then_busy[:141])) == "pass"  # per request: 141 clean
    assert StepJudge(SPEC, batch_s=1.0).decide(step_report(clean_then_busy[:141])) == "undecided"
    assert StepJudge(SPEC, batch_s=1.0).decide(step_report([100.0] * 1600)) == "pass"  # 159 clean batches
    assert StepJudge(SPEC, batch_s=1.0).decide(step_report([400.0] * 100)) == "fail"


def test_a_step_on_batches_is_runs_of_step_s_pooled_until_decided(tmp_path: Path) -> None:
    runs: list[float] = []

    def server(over_ms: float) -> RunStep:
        def run(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
            runs.append(step_s)
            return step_report([over_ms] * int(10 * step_s))  # 10 req/s: 29 whole batches of 1 s a run

        return run

    judged = StepJudge(SPEC, batch_s=1.0)
    assert judged.attempts(30) == (30,) * 9  # up to twice the 132 batches of a clean pass
    result = judge_at_rate(
        server(100.0), 10, SearchSettings(step_s=30), tmp_path / "pass", judged, stops_when_decided=False
    )
    assert (result.steps[0].decision, result.steps[0].attempts, runs) == ("pass", 5, [30] * 5)  # 145 >= 132 > 116
    runs.clear()
    result = judge_at_rate(
        server(400.0), 10, SearchSettings(step_s=30), tmp_path / "fail", judged, stops_when_decided=False
    )
    assert (result.steps[0].decision, runs) == ("fail", [30])


def fake_capacity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[list[str]]]:
    """`slogate capacity`'s argv (p95 TTFT <= 200 ms) against steps that each measure 300 TTFTs of
    100 ms, and the Locust options of every step run, in order."""
    sent: list[list[str]] = []

    def run_locust(host: str, report_dir: Path, **kw: object) -> Report:
        sent.append(list(kw["extra"]))  # type: ignore[call-overload]
        return step_report([100.0] * 300)

    monkeypatch.setattr(runner, "run_locust", run_locust)
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 200}\n")
    return ["capacity", "--host", "http://x", "--slo-file", str(slo), "--out", str(tmp_path / "out")], sent


def test_on_batches_no_run_is_ended_by_the_per_request_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv, sent = fake_capacity(tmp_path, monkeypatch)
    main([*argv, "--min-capacity", "10", "--batch-s", "1"])
    assert sent and not any({"--slo-stop-when-decided", "--slo-abort-on-fail"} & set(extra) for extra in sent)
    sent.clear()
    main([*argv, "--min-capacity", "10"])
    assert "--slo-stop-when-decided" in sent[0]
