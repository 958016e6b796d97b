"""The knee search's next rate (launch/knee_next.py): with no pass decided, an undecided pass of the
way up is judged again, with its whole budget, before the way goes below it (issue 31)."""

from pathlib import Path

from slogate.launch.knee import CapacityResult, SearchSettings, search
from slogate.launch.knee_batch import AUTO
from slogate.launch.knee_interval import StepJudge
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


def test_a_decided_fail_over_undecided_passes_judges_them_again_highest_first_not_a_lower_rate(tmp_path: Path) -> None:
    server = Server(clean=8)
    steps = run(server, tmp_path, max_steps=5)
    assert steps[:3] == [(8, "undecided", 1), (16, "undecided", 1), (32, "fail", 1)]  # the measured way up
    # Not 4 then 2 req/s (3 runs each, never decided): 16 again, its 3 runs pooled, then 8, decided on 2.
    assert steps[3:] == [(16, "undecided", 3), (8, "pass", 2)]
    assert server.calls == [8, 16, 32, 16, 16, 16, 8, 8]


def test_only_when_every_undecided_pass_was_judged_again_does_the_way_go_below_them(tmp_path: Path) -> None:
    server = Server(clean=4)  # 8 req/s 4 % over too: undecided on three runs
    steps = run(server, tmp_path, max_steps=6)
    assert [rate for rate, _, _ in steps] == [8, 16, 32, 16, 8, 4]
    assert [attempts for _, _, attempts in steps[3:]] == [3, 3, 3]


def test_the_way_up_meeting_an_undecided_fail_judges_the_pass_below_it_again(tmp_path: Path) -> None:
    server = Server(clean=8, over_16=15)  # 16 req/s 6.7 % over: verdict fail, undecided on one run
    steps = run(server, tmp_path, max_steps=3)
    assert steps == [(8, "undecided", 1), (16, "undecided", 1), (8, "pass", 2)]  # not 4 req/s


def test_after_the_probes_a_first_step_down_left_an_undecided_pass_is_judged_again(tmp_path: Path) -> None:
    result = searched(Server(clean=8), tmp_path, max_steps=4, probe_s=3)
    steps = [(s.rate_rps, s.probe, s.decision, s.attempts) for s in result.steps]
    assert steps[3:] == [(22.6, False, "undecided", 1), (22.6, False, "undecided", 3), (19.0, False, "undecided", 3)]


def test_a_first_step_that_fails_then_an_undecided_pass_below_it_judged_again(tmp_path: Path) -> None:
    steps = run(Server(clean=8), tmp_path, max_steps=4, rate_start=32)
    assert steps == [(32, "fail", 1), (16, "undecided", 1), (16, "undecided", 3), (8, "pass", 2)]


def test_at_the_rate_max_an_undecided_pass_is_judged_again_before_the_search_stops(tmp_path: Path) -> None:
    result = searched(Server(clean=8, over_16=15), tmp_path, max_steps=5, rate_max=16)
    assert [(s.rate_rps, s.decision, s.attempts) for s in result.steps] == [
        (8, "undecided", 1), (16, "undecided", 1), (8, "pass", 2)]  # fmt: skip
    assert result.interval_rps == (8, None) and "--rate-max 16" in result.stopped_because


def test_a_rate_judged_again_counts_by_its_later_step(tmp_path: Path) -> None:
    """16 req/s passes its one run by nearest rank (undecided), then fails its three pooled runs: the
    capacity is 8 (the later step), not 16 with 16 also the first failing rate."""

    class Flips(Server):
        def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
            self.over_16 = 15 if self.calls.count(16) else 25  # 6.7 % over from the second run at 16
            return super().__call__(rate, step_s, report_dir)

    result = searched(Flips(clean=8), tmp_path, max_steps=5)
    assert [(s.rate_rps, s.verdict) for s in result.steps][3] == (16, "fail")
    assert (result.capacity_rps, result.first_failing_rps) == (8, 16)
