"""The knee search's way up by short probes (launch/knee_probe.py, `--probe-s`): they bracket the
knee fast, and decide and bound nothing."""

from pathlib import Path

from slogate.launch.capacity_report import render_markdown, step_line
from slogate.launch.knee import SearchSettings, search
from slogate.slo.gate import exitcodes
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec

SPEC = parse_spec(
    {"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 200}], "min_samples": 10}
)


def report_at(ttft_ms: float, samples: int) -> Report:
    store = MetricsStore()
    us = int(ttft_ms * 1000)
    for i in range(samples):
        store.add(RequestRecord("shared", 100.0 + i / 10, e2e_us=us + 5000, ttft_us=us))
    return judge(SPEC, store, RunInfo())


class Server:
    """Meets the SLO up to `knee` req/s; a step sends rate x step_s requests (at least 150 for a
    decided step); a probe up to `fooled` req/s looks fine whatever (an empty queue at its start)."""

    def __init__(self, knee: float, fooled: float = 0.0) -> None:
        self.knee, self.fooled = knee, fooled
        self.calls: list[tuple[float, float]] = []

    def __call__(self, rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        self.calls.append((rate, step_s))
        fine = rate <= self.knee or (step_s < 10 and rate <= self.fooled)
        return report_at(100 if fine else 400, max(int(rate * step_s), 150 if step_s >= 10 else 0))


def test_probes_double_the_rate_to_the_first_one_over_and_the_decided_steps_go_down_from_there(
    tmp_path: Path,
) -> None:
    server = Server(knee=20.0)
    probes = Server(knee=20.0)
    settings = SearchSettings(rate_start=1, step_s=30, max_steps=20, probe_s=3)
    result = search(server, settings, tmp_path, probe_step=probes)
    assert probes.calls == [(1, 3), (2, 3), (4, 3), (8, 3), (16, 3), (32, 3)]  # 1 and 2 req/s: inconclusive, up
    assert [s.rate_rps for s in result.steps if s.probe] == [1, 2, 4, 8, 16, 32]
    # 32 req/s: 96 samples all over, decided fail by the bounds: no step there again; down to the
    # geometric middle of it and the highest probe that looked fine (16), not to half of it
    assert [s.decision for s in result.steps if s.probe][-1] == "fail"
    assert server.calls[0] == (22.6, 30) and all(step_s == 30 for _, step_s in server.calls)
    assert len(server.calls) <= 4  # 22.6, 19, then bisecting [19, 22.6] to 10 %
    assert result.decided and result.exit_code() == exitcodes.PASS
    low, high = result.interval_rps
    assert low is not None and high is not None and low <= 20 < high <= low * 1.1
    assert (result.capacity_rps, result.first_failing_rps) == (low, high)
    assert all(s.decision == "undecided" for s in result.steps[:5])
    assert result.steps[0].report_dir == str(tmp_path / "step-01-1rps-probe")


def test_a_probe_that_looked_fine_above_the_knee_bounds_nothing(tmp_path: Path) -> None:
    server = Server(knee=20.0, fooled=40.0)  # probes pass up to 40 req/s: the decided steps start at 64
    result = search(server, SearchSettings(rate_start=5, step_s=30, max_steps=20, probe_s=3), tmp_path)
    assert [s.rate_rps for s in result.steps if s.probe] == [5, 10, 20, 40, 80]
    assert any(s.probe and s.verdict == "pass" and s.rate_rps == 40 for s in result.steps)
    assert result.capacity_rps is not None and result.capacity_rps <= 20  # the 40 req/s probe is not the capacity
    low, high = result.interval_rps
    assert low is not None and high is not None and low <= 20 < high
    md = render_markdown(result)
    assert "pass (probe)" in md and "(probe)" in step_line(result.steps[3])


def test_probes_stop_at_the_rate_max_and_a_decided_step_there_says_at_least_that(tmp_path: Path) -> None:
    server = Server(knee=1000.0)
    result = search(server, SearchSettings(rate_start=10, step_s=30, rate_max=50, probe_s=3), tmp_path)
    assert [s.rate_rps for s in result.steps if s.probe] == [10, 20, 40, 50]
    assert [s.rate_rps for s in result.judged] == [50] and result.capacity_rps == 50
    assert "--rate-max 50" in result.stopped_because


def test_without_probes_the_way_up_is_decided_steps_as_before(tmp_path: Path) -> None:
    server = Server(knee=20.0)
    result = search(server, SearchSettings(rate_start=5, step_s=30, max_steps=20), tmp_path)
    assert not any(s.probe for s in result.steps) and [r for r, _ in server.calls][:3] == [5, 10, 20]
