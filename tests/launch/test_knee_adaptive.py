"""Capacity steps decided on batches as long as their own measured correlation (`--batch-s auto`, the
default; the statistics: tests/gate/test_correlation.py)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from slogate.launch.knee_batch import AUTO, batch_length
from slogate.launch.knee_interval import StepJudge
from slogate.slo.gate.facts import DECIDED, ObjectiveLook, RunStop
from slogate.slo.gate.report import Report

from slogate.cli import main
from tests.launch.test_knee_batch import SPEC, clustered, fake_capacity, step_report


def test_what_the_per_request_bounds_pass_on_busy_periods_adaptive_batches_leave_undecided() -> None:
    report = step_report(clustered(300, busy_every=30))  # 3.3 % over, in busy periods of 10 requests
    assert StepJudge(SPEC, batch_s=None).decide(report) == "pass"
    assert StepJudge(SPEC, batch_s=AUTO).decide(report) == "undecided"
    assert StepJudge(SPEC, batch_s=AUTO).decide(step_report([100.0] * 300)) == "pass"  # far below: per request
    assert StepJudge(SPEC, batch_s=AUTO).decide(step_report([400.0] * 100)) == "fail"
    assert StepJudge(SPEC, batch_s=AUTO).attempts(30) == (30, 30, 30)


def test_a_step_gets_more_runs_only_while_they_could_decide_it() -> None:
    """Projected at the share over the target, the rate and the correlation measured so far: 3.3 % over
    in busy periods stays undecided with 60 s more of the same; 100 clean requests in 10 s (50 samples
    on batches of 2) pass with 20 s more; a run stopped after 3 s is projected by its seconds, not as a
    whole run. Only a projection: the runs themselves decide."""
    judged = StepJudge(SPEC, batch_s=AUTO)
    noisy, clean = step_report(clustered(300, busy_every=30)), step_report([100.0] * 100)
    assert judged.decide(noisy) == judged.decide(clean) == "undecided"
    assert not judged.may_decide([noisy], 60) and judged.may_decide([clean], 20)
    assert not judged.may_decide([clean], 0)  # nothing more: still too few
    short = step_report([100.0] * 30)  # 3 s: 30 requests, then two whole runs of 30 s to come
    assert judged.may_decide([short], 60) and not judged.may_decide([short], 6)
    assert StepJudge(SPEC, batch_s=None).may_decide([noisy], 30)  # per request: no projection


def test_a_test_at_r_takes_its_whole_budget_a_searchs_step_stops_once_more_runs_could_not_decide_it(
    tmp_path: Path,
) -> None:
    from slogate.launch.capacity_at import judge_at_rate
    from slogate.launch.knee import CapacityResult, SearchSettings, judge_step

    noisy = step_report(clustered(300, busy_every=30))  # within noise on any number of runs
    runs: list[float] = []

    def run(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        runs.append(step_s)
        return noisy

    judged = StepJudge(SPEC, batch_s=AUTO)
    # Runs that cannot end early on a pass (--no-early-stop): 3 of 30 s, pooled; with the early stop, one of 90 s.
    at = judge_at_rate(run, 12, SearchSettings(step_s=30), tmp_path / "at", judged, stops_when_decided=False).steps[0]
    assert (at.decision, at.attempts, at.undecidable, runs) == ("undecided", 3, True, [30, 30, 30])
    runs.clear()
    at = judge_at_rate(run, 12, SearchSettings(step_s=30), tmp_path / "one", judged, stops_when_decided=True).steps[0]
    assert (at.decision, at.attempts, at.undecidable, runs) == ("undecided", 1, True, [90])
    runs.clear()
    step = judge_step(run, 12, 30, tmp_path / "search", CapacityResult(SearchSettings()), judged)
    assert (step.decision, step.attempts, step.undecidable, runs) == ("undecided", 1, True, [30])


def test_a_rate_judged_again_pools_its_earlier_runs_and_an_inconclusive_last_run_is_run_again(tmp_path: Path) -> None:
    """Two runs at 12 req/s earlier (within noise), one left of its 3: that run is inconclusive (no
    samples), so it is run again although the budget is spent, and the step pools all four runs. Only
    an undecided pass with runs left keeps its runs for a re-judge; a decided step's are let go."""
    from slogate.launch.knee import CapacityResult, SearchSettings, judge_step

    noisy = step_report(clustered(300, busy_every=30))
    replies = [step_report([]), step_report([100.0] * 300)]

    def run(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        assert not early_stop  # pooled: every later run goes whole
        return replies.pop(0)

    result = CapacityResult(SearchSettings())
    result.runs[12] = [noisy, noisy]
    step = judge_step(run, 12, 30, tmp_path, result, StepJudge(SPEC, batch_s=AUTO))
    assert (step.attempts, step.pooled_runs, step.verdict, replies) == (2, 2, "pass", [])
    assert step.decision == "undecided" and step.undecidable and step.runs_left == 0 and 12 not in result.runs


def test_batch_s_is_auto_0_or_seconds() -> None:
    assert (batch_length("auto"), batch_length("0"), batch_length("2.5")) == (AUTO, None, 2.5)
    for bad in ("-1", "x", "inf"):
        with pytest.raises(ValueError, match="--batch-s: must be auto"):
            batch_length(bad)


def test_the_default_searchs_steps_stop_on_a_decided_fail_the_test_at_r_when_decided_0_per_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, sent = fake_capacity(tmp_path, monkeypatch)
    early, failed, correlated = "--slo-stop-when-decided", "--slo-stop-when-failed", "--slo-correlated-requests"
    main([*argv, "--max-steps", "2", "--probe-s", "0"])
    assert sent and all(failed in extra and correlated in extra and early not in extra for extra in sent)
    sent.clear()
    main([*argv, "--max-steps", "2", "--probe-s", "0", "--no-early-stop"])
    assert sent and not any(early in extra or failed in extra or correlated in extra for extra in sent)
    sent.clear()
    main([*argv, "--min-capacity", "3"])
    assert sent and all(early in extra and correlated in extra and failed not in extra for extra in sent)
    sent.clear()
    main([*argv, "--max-steps", "2", "--probe-s", "0", "--batch-s", "0"])
    assert early in sent[0] and correlated not in sent[0]
    assert json.loads((tmp_path / "out" / "capacity.json").read_text())["batch_s"] == 0  # per request
    sent.clear()
    main([*argv, "--min-capacity", "3", "--batch-s", "2"])
    assert sent and not any(early in extra or correlated in extra for extra in sent)
    assert main([*argv, "--batch-s", "soon"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("slogate: error: --batch-s: must be auto")


def test_a_first_run_stopped_on_correlated_requests_keeps_its_decision_any_other_is_judged_on_batches() -> None:
    report = step_report(clustered(300, busy_every=30))  # undecided on batches

    def stopped(correlated: bool) -> Report:
        look = ObjectiveLook(SPEC.objectives[0].name, "", "pass", 3000, None, 150.0, "ms")
        stop = RunStop(DECIDED, 12.0, 30.0, "pass", 0.99, (look,), correlated=correlated)
        return replace(report, run=replace(report.run, stopped=stop))

    judge = StepJudge(SPEC, batch_s=AUTO)
    assert judge.decide(stopped(correlated=True)) == "pass"  # its early stop decided on batches
    assert judge.decide(stopped(correlated=False)) == "undecided"  # a per-request stop (a user's own option)
    assert judge.decide(stopped(correlated=True), [report]) == "undecided"  # a later run: pooled, on batches
    assert judge.decide(report) == "undecided"  # run to its end
