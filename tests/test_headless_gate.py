"""The gate end to end through `locust --headless`: exit codes and reports as CI sees them."""

from pathlib import Path

import pytest
from slogate.launch.server import free_port

FAST = "ttft_ms=100,tokens=3,itl_ms=2"  # far from the 5 ms fail target: client delay cannot explain it


def slo_file(tmp_path: Path, max_ms: float, min_samples: int = 10) -> str:
    f = tmp_path / "slo.yaml"
    f.write_text(
        f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {max_ms}}}\n"
        f"  - {{name: errors, metric: error_rate, max: 0.01}}\nmin_samples: {min_samples}\nwarmup_s: 0\n"
    )
    return str(f)


def run_args(slo: str, model: str = FAST) -> list[str]:
    return ["-u", "2", "-r", "2", "-t", "3s", "--slo-file", slo, "--model", model, "--shared-prefix-tokens", "50"]


@pytest.mark.parametrize(("max_ms", "code", "verdict"), [(500, 0, "pass"), (5, 1, "fail")])
def test_pass_and_fail(fault_server: str, locust_run, tmp_path: Path, max_ms: float, code: int, verdict: str) -> None:
    run = locust_run(fault_server, *run_args(slo_file(tmp_path, max_ms)))
    assert run.code == code, run.stderr[-2000:]
    report = run.report
    assert report["verdict"] == verdict and report["exit_code"] == code
    ttft = report["metrics"]["all"]["ttft_ms"]
    assert ttft["count"] >= 10 and 100 <= ttft["p95"] < 400
    assert {"all", "shared", "unique"} <= set(report["metrics"])
    assert (run.report_dir / "slo-junit.xml").exists() and (run.report_dir / "slo-summary.md").exists()
    assert f"slogate: {verdict.upper()}" in run.stdout


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


def test_an_unreachable_target_is_inconclusive(locust_run, tmp_path: Path) -> None:
    run = locust_run(f"http://127.0.0.1:{free_port()}", *run_args(slo_file(tmp_path, 500)))
    assert run.code == 3, run.stderr[-2000:]
    assert run.report["verdict"] == "inconclusive"
    assert any("target unreachable" in r for r in run.report["reasons"])


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
