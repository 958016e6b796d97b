"""The gate end to end through `locust --headless`: exit codes and reports as CI sees them."""

import subprocess
from pathlib import Path

import pytest
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port

FAST = "ttft_ms=100,tokens=3,itl_ms=2"
# Far from the 5 ms fail target: the self-check counts up to twice the worst event-loop stall as
# client delay (a 50 ms stall at start-up is common on a busy 2-core machine), and 400 ms is more.
SLOW = "ttft_ms=400,tokens=3,itl_ms=2"


def slo_file(tmp_path: Path, max_ms: float, min_samples: int = 10) -> str:
    f = tmp_path / "slo.yaml"
    f.write_text(
        f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {max_ms}}}\n"
        f"  - {{name: errors, metric: error_rate, max: 0.01}}\nmin_samples: {min_samples}\nwarmup_s: 0\n"
    )
    return str(f)


def run_args(slo: str, model: str = FAST) -> list[str]:
    return ["-u", "2", "-r", "2", "-t", "3s", "--slo-file", slo, "--model", model, "--shared-prefix-tokens", "50"]


@pytest.mark.parametrize(("max_ms", "model", "code", "verdict"), [(500, FAST, 0, "pass"), (5, SLOW, 1, "fail")])
def test_pass_and_fail(
    fault_server: str, locust_run, tmp_path: Path, max_ms: float, model: str, code: int, verdict: str
) -> None:
    run = locust_run(fault_server, *run_args(slo_file(tmp_path, max_ms, min_samples=5), model))
    assert run.code == code, run.stderr[-2000:]
    report = run.report
    assert report["verdict"] == verdict and report["exit_code"] == code
    ttft = report["metrics"]["all"]["ttft_ms"]
    assert ttft["count"] >= 5 and 100 <= ttft["p95"] < 5_000  # a few samples: p95 is near their slowest
    assert {"all", "shared", "unique"} <= set(report["metrics"])
    assert (run.report_dir / "slo-junit.xml").exists() and (run.report_dir / "slo-summary.md").exists()
    assert f"slogate: {verdict.upper()}" in run.stdout


def test_a_ci_log_ends_with_the_verdict_after_locusts_tables(fault_server: str, tmp_path: Path) -> None:
    """Locust prints its tables after slogate's summary; the last lines are slogate's all the same."""
    argv = locust_argv(fault_server, report_dir=tmp_path / "report", extra=run_args(slo_file(tmp_path, 500, 5)))
    run = subprocess.run(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    lines = [x for x in run.stdout.splitlines() if x.strip()]
    assert any("Aggregated" in x for x in lines)  # Locust's table, printed ...
    assert lines[-2:] == ["slogate: PASS (exit 0)", f"slogate: reports in {tmp_path / 'report'}/"]  # ... before these


def test_too_few_samples_is_inconclusive(fault_server: str, locust_run, tmp_path: Path) -> None:
    run = locust_run(fault_server, *run_args(slo_file(tmp_path, 500, min_samples=100_000)))
    assert run.code == 3
    assert run.report["verdict"] == "inconclusive"
    assert any("too few samples" in r for r in run.report["reasons"])


def test_failing_requests_fail_the_error_rate_slo(fault_server: str, locust_run, tmp_path: Path) -> None:
    run = locust_run(fault_server, *run_args(slo_file(tmp_path, 500), model="status=500"))
    assert run.code == 1
    errors = next(s for s in run.report["slos"] if s["name"] == "errors")
    assert errors["result"] == "fail" and errors["observed"] == 1.0
    assert run.report["metrics"]["all"]["errors_by_kind"] == {"http_5xx": run.report["metrics"]["all"]["requests"]}


def test_a_malformed_slo_file_exits_2_before_any_load(fault_server: str, locust_run, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("slos:\n  - {metric: ttft, percentile: high, max_ms: 200}\n")
    run = locust_run(fault_server, *run_args(str(bad)))
    assert run.code == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("slogate: error:")]
    assert errors == [f"slogate: error: {bad}: slos[0]: field 'percentile': must be a number, got 'high'"]
    assert run.report["verdict"] == "error" and "percentile" in run.report["reasons"][0]


@pytest.mark.parametrize("model_given", [False, True])
def test_an_unreachable_target_stops_the_run_inconclusive(locust_run, tmp_path: Path, model_given: bool) -> None:
    """It stops instead of waiting out --run-time: at model discovery (the runner used to be
    killed half-way through its own quit, from the user's greenlet that asked for it), or, with
    --model given, once every request has been refused for --slo-unreachable-s."""
    args = [*run_args(slo_file(tmp_path, 500)), "-t", "10m", "--slo-unreachable-s", "3"]
    if not model_given:
        args = [a for a in args if a not in ("--model", FAST)]
    run = locust_run(f"http://127.0.0.1:{free_port()}", *args, timeout=90)
    assert run.code == 3, run.stderr[-2000:]
    assert run.report["verdict"] == "inconclusive" and run.report["run"]["duration_s"] < 60
    expected = "no request succeeded in 3 s" if model_given else "/v1/models did not answer: Connection refused"
    assert any("target unreachable" in r and expected in r for r in run.report["reasons"]), run.report["reasons"]
    if not model_given:  # the URL named once, the failure said once
        line = next(r for r in run.report["reasons"] if "target unreachable" in r)
        assert line.count("http://") == 1 and "reach" not in line.replace("unreachable", ""), line
    assert "slogate: INCONCLUSIVE (exit 3)" in run.stdout
    if model_given:  # 2 users, each pausing 0.1 s after a refused connection: not thousands a second
        refused = run.report["metrics"]["all"]["errors_by_kind"]["connect"]
        assert 0 < refused <= 2 * run.report["run"]["duration_s"] / 0.1 + 10, refused


def test_a_target_that_refuses_every_request_is_given_up_after_the_limit() -> None:
    from slogate.slo.gate.metrics import ClassMetrics
    from slogate.slo.gate.record import ErrorKind, RequestRecord
    from slogate.slo.plugin.watchers import unreachable_reason

    total = ClassMetrics()
    for kind in (ErrorKind.CONNECT, ErrorKind.TIMEOUT, ErrorKind.HTTP_5XX):
        total.add(RequestRecord("shared", 1.0, e2e_us=10, error_kind=kind))
    assert unreachable_reason(total, 14.0, 15.0) is None  # not yet
    reason = unreachable_reason(total, 15.2, 15.0)
    assert reason is not None and "no request succeeded in 15 s, 2 refused or timed out" in reason
    assert unreachable_reason(total, 99.0, 0) is None  # 0: never
    total.add(RequestRecord("shared", 2.0, e2e_us=10, ttft_us=5))
    assert unreachable_reason(total, 99.0, 15.0) is None  # one answer: measured, not stopped
    only_5xx = ClassMetrics()
    only_5xx.add(RequestRecord("shared", 1.0, e2e_us=10, error_kind=ErrorKind.HTTP_5XX))
    assert unreachable_reason(only_5xx, 99.0, 15.0) is None  # it answers (badly): the gate judges it


def test_a_target_without_metrics_degrades_to_a_warning(fault_server: str, locust_run, tmp_path: Path) -> None:
    slo = tmp_path / "server-slo.yaml"
    slo.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 500}\n  - {metric: prefix_cache_hit_rate, min: 0.5}\n"
        "min_samples: 5\n"
    )
    run = locust_run(fault_server, *run_args(str(slo)), "--server-metrics-interval", "0.5")
    assert run.code == 3, run.stderr[-2000:]  # the server objective cannot be judged: inconclusive, no crash
    report = run.report
    assert report["server"]["available"] is False and "/metrics unavailable" in report["server"]["error"]
    assert report["slos"][0]["result"] == "pass" and report["slos"][1]["result"] == "insufficient_data"
    assert any("no server figures" in r for r in report["reasons"])
