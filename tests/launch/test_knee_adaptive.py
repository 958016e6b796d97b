"""Capacity steps decided on batches as long as their own measured correlation (slo/gate/correlation.py,
`--batch-s auto`, the default)."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from slogate.launch.knee_batch import AUTO, batch_length
from slogate.launch.knee_interval import StepJudge
from slogate.slo.gate.correlation import batch_requests, integrated_autocorrelation_time
from slogate.slo.gate.facts import DECIDED, ObjectiveLook, RunStop

from slogate.cli import main
from tests.launch.test_knee_batch import SPEC, clustered, fake_capacity, step_report


def ar1(rho: float, n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=n)
    x = np.empty(n)
    x[0] = e[0]
    for i in range(1, n):
        x[i] = rho * x[i - 1] + e[i]
    return x


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_the_estimator_finds_an_ar1_series_integrated_autocorrelation_time(rho: float) -> None:
    expected = 1 + 2 * rho / (1 - rho)  # 3 and 9
    assert integrated_autocorrelation_time(ar1(rho, 20_000)) == pytest.approx(expected, rel=0.2)


def test_an_independent_series_has_a_time_of_about_one_and_a_constant_one_exactly_one() -> None:
    assert integrated_autocorrelation_time(np.random.default_rng(2).normal(size=20_000)) == pytest.approx(1, abs=0.2)
    assert integrated_autocorrelation_time([3.0] * 100) == 1.0
    assert integrated_autocorrelation_time([1.0, 2.0]) == 1.0  # too short to say


def test_busy_periods_of_ten_requests_are_counted_in_batches_of_about_twice_ten() -> None:
    o = SPEC.objectives[0]
    k, over, n = batch_requests([step_report(clustered(300, busy_every=30)).measurements], o)
    assert (over, n) == (100, 3000) and 15 <= k <= 22
    independent = np.where(np.random.default_rng(3).random(3000) < 0.03, 400.0, 100.0).tolist()
    k, _, _ = batch_requests([step_report(independent).measurements], o)
    assert 1.6 <= k <= 2.6  # about one request, times the safety factor
    assert batch_requests([step_report([100.0] * 300).measurements], o)[0] == 2  # nothing over: tau taken as 1


def test_what_the_per_request_bounds_pass_on_busy_periods_adaptive_batches_leave_undecided() -> None:
    report = step_report(clustered(300, busy_every=30))  # 3.3 % over, in busy periods of 10 requests
    assert StepJudge(SPEC, batch_s=None).decide(report) == "pass"
    assert StepJudge(SPEC, batch_s=AUTO).decide(report) == "undecided"
    assert StepJudge(SPEC, batch_s=AUTO).decide(step_report([100.0] * 300)) == "pass"  # far below: per request
    assert StepJudge(SPEC, batch_s=AUTO).decide(step_report([400.0] * 100)) == "fail"
    assert StepJudge(SPEC, batch_s=AUTO).attempts(30) == (30, 30, 30)


def test_batch_s_is_auto_0_or_seconds() -> None:
    assert (batch_length("auto"), batch_length("0"), batch_length("2.5")) == (AUTO, None, 2.5)
    for bad in ("-1", "x", "inf"):
        with pytest.raises(ValueError, match="--batch-s: must be auto"):
            batch_length(bad)


def test_the_default_search_runs_steps_whole_the_test_at_r_stops_on_correlated_requests_0_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, sent = fake_capacity(tmp_path, monkeypatch)
    early, correlated = "--slo-stop-when-decided", "--slo-correlated-requests"
    main([*argv, "--max-steps", "2", "--probe-s", "0"])
    assert sent and not any(early in extra or correlated in extra for extra in sent)
    sent.clear()
    main([*argv, "--min-capacity", "3"])
    assert sent and all(early in extra and correlated in extra for extra in sent)
    sent.clear()
    main([*argv, "--max-steps", "2", "--probe-s", "0", "--batch-s", "0"])
    assert early in sent[0] and correlated not in sent[0]
    assert json.loads((tmp_path / "out" / "capacity.json").read_text())["batch_s"] == 0  # per request
    sent.clear()
    main([*argv, "--min-capacity", "3", "--batch-s", "2"])
    assert sent and not any(early in extra or correlated in extra for extra in sent)
    assert main([*argv, "--batch-s", "soon"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("slogate: error: --batch-s: must be auto")


def test_a_run_stopped_on_correlated_requests_keeps_its_decision_and_one_run_to_its_end_is_judged_again() -> None:
    stopped_pass = step_report(clustered(300, busy_every=30))  # undecided on batches, but its stop said pass
    run = replace(stopped_pass.run, stopped=RunStop(DECIDED, 12.0, 30.0, "pass", 0.99, (ObjectiveLook(
        SPEC.objectives[0].name, "", "pass", 3000, None, 150.0, "ms"),)))  # fmt: skip
    assert StepJudge(SPEC, batch_s=AUTO).decide(replace(stopped_pass, run=run)) == "pass"
    assert StepJudge(SPEC, batch_s=AUTO).decide(stopped_pass) == "undecided"
