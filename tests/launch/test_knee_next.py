"""The knee search's next rate (launch/knee_next.py): with no pass decided, an undecided pass of the
way up is judged again, its earlier run pooled with the runs its budget had left, before the way goes
below it; never below a pass that had too few requests (issue 31)."""

from pathlib import Path

from slogate.launch.knee import CapacityResult, SearchSettings, search
from slogate.launch.knee_batch import AUTO
from slogate.launch.knee_interval import StepJudge
from slogate.launch.knee_next import next_rate
from slogate.launch.knee_step import Step
from slogate.slo.gate.judge import judge
from slogate.slo.gate.report import Report, RunInfo

from tests.gate.test_correlation import SPEC, per_second


class Server:
    """The H100 of issue 31, on adaptive batches (the default) and 15 s steps: every request under
    the p95 target up to `clean` req/s (8: undecided on one run, decided on two pooled; 4: not even
    on three), 1 in 25 over (4 %: verdict pass, undecided even on three runs) below 16, 1 in
    `over_16` from 16, all over from 24 (decided fail on one run)."""

    def __init__(self, clean: float, over_16: int = 25) -> None:
        self.clean, self.over_16 = clean, over_16
        self.calls: list[float] = []

    def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        self.calls.append(rate)
        every = 0 if rate <= self.clean else 25 if rate < 16 else self.over_16 if rate < 24 else 1
        ttfts = [400.0 if every and i % every == every - 1 else 100.0 for i in range(int(rate * step_s))]
        return judge(SPEC, per_second(ttfts, per_s=int(rate)), RunInfo())


def run(server: Server, tmp_path: Path, max_steps: int, **settings: float) -> list[tuple[float, str, int]]:
    return [(s.rate_rps, s.decision, s.attempts) for s in searched(server, tmp_path, max_steps, **settings).steps]


def searched(server: Server, tmp_path: Path, max_steps: int, **settings: float) -> CapacityResult:
    given = SearchSettings(**{"rate_start": 8, "step_s": 15, "max_steps": max_steps, **settings})
    return search(server, given, tmp_path, judge=StepJudge(SPEC, batch_s=AUTO))


def test_a_decided_fail_over_undecided_passes_judges_again_the_one_more_runs_could_decide(tmp_path: Path) -> None:
    server = Server(clean=8)
    result = searched(server, tmp_path, max_steps=4)
    steps = [(s.rate_rps, s.decision, s.attempts) for s in result.steps]
    assert steps[:3] == [(8, "undecided", 1), (16, "undecided", 1), (32, "fail", 1)]  # the measured way up
    # 16 req/s, 4 % over, three runs would not decide (undecidable): not judged again. Nor is a lower rate
    # tried (4 then 2 req/s never decide): 8, clean, projected to decide, judged again, decided on one run
    # more, pooled with its first.
    assert result.steps[1].undecidable and not result.steps[0].undecidable
    assert steps[3] == (8, "pass", 1) and server.calls == [8, 16, 32, 8]


def test_only_when_no_undecided_pass_could_be_decided_does_the_way_go_below_them(tmp_path: Path) -> None:
    result = searched(Server(clean=4), tmp_path, max_steps=4)  # 8 req/s 4 % over too: undecidable
    assert [(s.rate_rps, s.attempts, s.undecidable) for s in result.steps] == [
        (8, 1, True), (16, 1, True), (32, 1, False), (4, 1, True)]  # fmt: skip


def test_the_way_up_meeting_an_undecided_fail_judges_the_pass_below_it_again(tmp_path: Path) -> None:
    server = Server(clean=8, over_16=15)  # 16 req/s 6.7 % over: verdict fail, undecided on one run
    steps = run(server, tmp_path, max_steps=3)
    assert steps == [(8, "undecided", 1), (16, "undecided", 1), (8, "pass", 1)]  # not 4 req/s


def test_after_the_probes_an_undecidable_first_step_down_is_not_judged_again(tmp_path: Path) -> None:
    result = searched(Server(clean=8), tmp_path, max_steps=3, probe_s=3)
    steps = [(s.rate_rps, s.probe, s.decision, s.attempts) for s in result.steps]
    assert steps[3:] == [(22.6, False, "undecided", 1), (19.0, False, "undecided", 1)]  # 4 % over: down


def test_a_first_step_that_fails_then_an_undecidable_pass_below_it_the_way_goes_on_down(tmp_path: Path) -> None:
    steps = run(Server(clean=8), tmp_path, max_steps=3, rate_start=32)
    assert steps == [(32, "fail", 1), (16, "undecided", 1), (8, "pass", 2)]


def test_at_the_rate_max_an_undecided_pass_is_judged_again_before_the_search_stops(tmp_path: Path) -> None:
    result = searched(Server(clean=8, over_16=15), tmp_path, max_steps=5, rate_max=16)
    assert [(s.rate_rps, s.decision, s.attempts) for s in result.steps] == [
        (8, "undecided", 1), (16, "undecided", 1), (8, "pass", 1)]  # fmt: skip
    assert result.interval_rps == (8, None) and "--rate-max 16" in result.stopped_because


def test_a_rate_judged_again_counts_by_its_later_step(tmp_path: Path) -> None:
    """8 req/s passes its one run by nearest rank (undecided, clean), then, judged again, 6.7 % of its
    requests are over: the later step's verdict (fail) is the rate's."""

    class Flips(Server):
        def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
            if rate != 8 or not self.calls.count(8):
                return super().__call__(rate, step_s, report_dir)
            self.calls.append(rate)
            ttfts = [400.0 if i % 15 == 14 else 100.0 for i in range(int(rate * step_s))]
            return judge(SPEC, per_second(ttfts, per_s=8), RunInfo())

    result = searched(Flips(clean=8, over_16=15), tmp_path, max_steps=4)
    assert [(s.rate_rps, s.verdict) for s in result.steps] == [(8, "pass"), (16, "fail"), (8, "fail"), (4, "pass")]
    assert {s.rate_rps: s.verdict for s in result.latest_steps}[8] == "fail"
    assert (result.capacity_rps, result.first_failing_rps) == (4, 8)


def judged(*steps: tuple[float, str, bool]) -> CapacityResult:
    """A search's result of (rate, decision, undecidable) steps, verdicts by their side of 12 req/s."""
    result = CapacityResult(SearchSettings(precision=0.2))
    for rate, decision, undecidable in steps:
        verdict = "pass" if rate < 12 else "fail"
        result.steps.append(Step(rate, verdict, 1, 30, 35, [], False, rate, int(rate * 30), 0, {}, None, None, {}, "",
                                 decision=decision, undecidable=undecidable))  # fmt: skip
    return result


def test_the_bisection_narrows_the_gaps_at_the_intervals_ends_never_one_between_two_undecidable_steps() -> None:
    result = judged((8, "pass", False), (16, "fail", False), (11, "undecided", True), (13, "undecided", True))
    assert result.widest_gap() == (8, 11) and next_rate(result) == 9.5  # not (11, 13): within noise there
    result.steps.append(judged((9.5, "undecided", True)).steps[0])
    assert result.widest_gap() == (13, 16) and next_rate(result) == 14.5
    result.steps.append(judged((14.5, "undecided", True)).steps[0])
    assert result.decided and next_rate(result) is None  # 8 -> 9.5 and 14.5 -> 16 within 20 %, 11 -> 13 not
    assert "the steps between them undecided" in result.stopped_because and result.interval_rps == (8, 16)
    # A step undecided on one run that more runs could decide is no wall: the gap goes past it.
    assert judged((8, "pass", False), (16, "fail", False), (12, "undecided", False)).widest_gap() == (8, 16)


def test_the_way_down_stops_at_a_pass_too_few_requests_could_decide_even_clean(tmp_path: Path) -> None:
    """8 req/s, 4 % over, is within noise (a clean run of its budget would pass): the way goes below it.
    4 req/s is clean, but its 3 runs of 15 s send 180 requests (90 samples on batches of 2), too few for a
    pass even with none over: no lower rate (2 and 1 req/s would send fewer) and no second run of it."""
    server = Server(clean=4)
    result = searched(server, tmp_path, max_steps=8)
    assert server.calls == [8, 16, 32, 4] and result.interval_rps == (None, 32)
    assert [s.too_few_requests for s in result.steps] == [False, False, False, True]
    assert "too few requests" in result.stopped_because and result.exit_code() == 3


def test_with_none_likely_a_pass_projected_to_decide_within_twice_its_runs_left_is_judged_again(
    tmp_path: Path,
) -> None:
    """8 req/s, 1 in 50 over (2 %): its one run of 15 s projects a decision past its 30 s of runs left
    (undecidable) but within twice them; a projection from 2 requests over is that uncertain, so with no
    pass decided and none likely it is judged again, its runs left pooled, before the way goes below it."""

    class TwoPercent(Server):
        def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
            self.calls.append(rate)
            every = {8: 50, 16: 25}.get(int(rate), 1)
            ttfts = [400.0 if i % every == every - 1 else 100.0 for i in range(int(rate * step_s))]
            return judge(SPEC, per_second(ttfts, per_s=int(rate)), RunInfo())

    server = TwoPercent(clean=0)
    result = searched(server, tmp_path, max_steps=4)
    first = result.steps[0]
    assert first.undecidable and first.decide_in_s is not None and 30 < first.decide_in_s <= 60
    assert server.calls == [8, 16, 32, 8]  # not 4 req/s: 8 again, its runs pooled (cut after one, still undecided)
    assert (result.steps[3].rate_rps, result.steps[3].attempts, result.steps[3].runs_left) == (8, 1, 1)
