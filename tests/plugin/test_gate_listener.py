"""The gate and the listener in a Locust process (slo/plugin/gate.py, slo/plugin/listener.py): command-line
overrides against a saved baseline, Locust's own table and per-second counts, the users the report counts."""

from pathlib import Path

import pytest
from slogate.slo.gate import exitcodes
from slogate.slo.gate.facts import WorkloadFacts
from slogate.slo.gate.judge import judge
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo

from tests.gate.test_gate import store_with


def gate_with(tmp_path: Path, baseline_ttft_ms: float, **options: object) -> Report:
    """The live gate's own path (options -> spec -> judge), in-process: a run of 40 requests at
    300 ms TTFT against a saved baseline, with the given command-line options."""
    from argparse import Namespace
    from types import SimpleNamespace

    from slogate.slo.gate.baseline import save_baseline
    from slogate.slo.outputs.render import write_reports
    from slogate.slo.plugin.gate import Gate

    base_dir = tmp_path / f"base-{baseline_ttft_ms}"
    run = RunInfo(model="m", workload={"seed": 0})
    write_reports(judge(None, store_with(baseline_ttft_ms, 400), run), base_dir)
    baseline = save_baseline(base_dir / "slo-report.json", tmp_path / "baseline.json")
    spec = tmp_path / "gate.yaml"
    spec.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 1000}\nmin_samples: 20\nwarmup_s: 0\n"
        "regressions:\n  - {metric: ttft, percentile: 95, max_increase_pct: 10}\n"
    )
    defaults = {"slo_file": str(spec), "slo_baseline": str(baseline), "slo_min_samples": 0, "slo_warmup_s": -1.0}
    env = SimpleNamespace(parsed_options=Namespace(**{**defaults, **options}), runner=None, host="http://h:1")
    gate = Gate(env)
    gate.configure(with_baseline=True)
    run = gate.start_run()
    run.model, run.workload = "m", WorkloadFacts.coerce({"seed": 0})
    run.listener.run_started_at = 0.0
    for i in range(40):
        gate.on_request(context={"slogate_record": RequestRecord("shared", 100.0 + i, 301_000, 300_000)})
    return gate.snapshot(final=True)


@pytest.mark.parametrize(
    "options", [{}, {"slo_min_samples": 10}, {"slo_warmup_s": 0.0}, {"slo_min_samples": 10, "slo_warmup_s": 1.0}]
)
def test_command_line_overrides_keep_the_regression_rules(tmp_path: Path, options: dict) -> None:
    """TTFT tripled against the baseline: exit 1 with or without --slo-min-samples / --slo-warmup-s
    (the override once rebuilt the spec without its regression rules, and the run passed)."""
    report = gate_with(tmp_path, 100, **options)
    assert report.regression is not None and report.regression.status == "regression"
    assert (report.verdict, report.exit_code) == ("fail", exitcodes.FAIL)
    same = gate_with(tmp_path, 300, **options)
    assert same.regression.status == "ok" and same.exit_code == exitcodes.PASS


def test_min_samples_override_is_applied(tmp_path: Path) -> None:
    assert gate_with(tmp_path, 300, slo_min_samples=100).verdict == "inconclusive"


def test_locusts_table_counts_unfinished_and_dropped_requests_apart_not_as_failures() -> None:
    from types import SimpleNamespace

    from slogate.slo.gate.record import ErrorKind
    from slogate.slo.plugin.listener import report_record

    fired: list[dict] = []
    env = SimpleNamespace(events=SimpleNamespace(request=SimpleNamespace(fire=lambda **kw: fired.append(kw))))
    report_record(env, RequestRecord("unique", 1.0, e2e_us=9_000, ttft_us=5_000, error_kind=ErrorKind.UNFINISHED))
    report_record(env, RequestRecord("shared", 1.0, e2e_us=0, error_kind=ErrorKind.DROPPED))
    report_record(env, RequestRecord("shared", 1.0, e2e_us=10, error_kind=ErrorKind.HTTP_5XX, error_message="x"))
    assert [(e["request_type"], e["exception"] is None) for e in fired] == [
        ("UNFINISHED", True),
        ("DROPPED", True),
        ("E2E", False),
    ]
    assert all(e["context"]["slogate_record"] for e in fired)  # the gate still gets every record


def test_locusts_per_second_counts_keep_the_last_minute_and_the_table_its_totals() -> None:
    """A soak's memory: Locust keeps a count per second of the run for every row; slogate trims
    them to the last minute (Locust reads the last 12 s), its totals and current RPS unchanged."""
    from locust.stats import RequestStats
    from slogate.slo.plugin.listener import trim_rate_counts

    stats = RequestStats()
    stats.log_request("E2E", "shared", 100, 0)
    entry = stats.entries[("shared", "E2E")]
    now = int(stats.last_request_timestamp)
    stats.total.start_time = now - 3600
    an_hour = {t: 20 for t in range(now - 3600, now + 1)}  # as after an hour at 20 req/s
    for per_second in (entry.num_reqs_per_sec, entry.num_fail_per_sec, stats.total.num_reqs_per_sec):
        per_second.update(an_hour)
    rps, fails = entry.current_rps, entry.current_fail_per_sec
    trim_rate_counts(stats, now - 60)
    for per_second in (entry.num_reqs_per_sec, entry.num_fail_per_sec, stats.total.num_reqs_per_sec):
        assert sorted(per_second) == list(range(now - 60, now + 1))
    assert (entry.current_rps, entry.current_fail_per_sec) == (rps, fails) == (20, 20)
    assert entry.num_requests == 1  # the table's totals are Locust's own counters


@pytest.mark.parametrize("mode", ["local", "master"])
def test_the_report_counts_the_runs_users_after_they_have_stopped(mode: str) -> None:
    """Locust's user count is 0 once the users have stopped, when the report is written: the report
    takes the most users the run asked for (the spawn target, which outlives the stop) or had, and
    each spawn's end (a load shape's stages: 2, then 6, then 3 users)."""
    from types import SimpleNamespace

    from locust.event import Events
    from locust.runners import LocalRunner, MasterRunner
    from slogate.slo.plugin.gate import Gate

    cls = MasterRunner if mode == "master" else LocalRunner
    runner = SimpleNamespace(user_count=4, target_user_count=4, __class__=cls)
    env = SimpleNamespace(parsed_options=None, runner=runner, host="http://h:1", events=Events())
    gate = Gate(env)
    assert gate.run_info().users == 4
    runner.user_count = 0  # stopped
    assert gate.run_info(final=True).users == 4
    gate.start_listening()  # the next run
    for users in (2, 6, 3):
        runner.user_count = runner.target_user_count = users
        env.events.spawning_complete.fire(user_count=users)
    runner.user_count = runner.target_user_count = 0
    assert gate.run_info(final=True).users == 6
