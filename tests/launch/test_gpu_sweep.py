"""The GPU sweep (benchmarks/gpu/sweep.py), without a server: its capacity search is `slogate
capacity`'s (launch/capacity.py), started where the sweep left off, and its tables."""

import argparse
import importlib.util
import time
from pathlib import Path

from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_sweep", ROOT / "benchmarks" / "gpu" / "sweep.py")
assert spec is not None and spec.loader is not None
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)
import sweep_report  # noqa: E402  (on sys.path once sweep.py is loaded: it puts benchmarks/gpu/ there)

SLO = parse_spec({"slos": [{"metric": "ttft", "percentile": 95, "max_ms": 200}], "min_samples": 10})


def summary(p95: float, failures: int = 0, dropped: int = 0) -> dict:
    total = {
        "requests": 100,
        "failures": failures,
        "dropped": dropped,
        "ttft_ms": {"p50": p95 / 2, "p95": p95, "p99": p95 * 1.2},
        "tpot_p50_ms": 10.0,
        "output_tokens_per_s": 1000.0,
        "requests_per_s": 8.0,
    }
    return {"verdict": "pass" if p95 <= 200 else "fail", "all": total, "saturated": False}


def server_at(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
    """A server whose p95 TTFT crosses the 200 ms target at 13.5 req/s, judged as a Locust step would be."""
    store = MetricsStore()
    ttft_us = int(200_000 * rate / 13.5)
    for i in range(150):  # enough for the anytime-valid bounds to decide a p95 pass at 99 % (~110)
        store.add(RequestRecord("shared", 100.0 + i / 10, e2e_us=ttft_us + 5000, ttft_us=ttft_us))
    return judge(SLO, store, RunInfo())


def profile_sweep(tmp_path: Path, swept: dict[float, float], search_steps: int = 8) -> "sweep.ProfileSweep":
    args = argparse.Namespace(search_steps=search_steps, precision=0.1, run_time=1, out=tmp_path)
    ps = sweep.ProfileSweep(args, "fake", "http://x", time.monotonic() + 3600)
    ps.runs = [{"kind": "sweep", "rate": r, "users": None, "summary": summary(p95)} for r, p95 in swept.items()]
    return ps


def test_the_search_starts_at_the_highest_swept_rate_that_passed_else_the_lowest(tmp_path: Path) -> None:
    assert profile_sweep(tmp_path, {4.0: 60, 8.0: 120, 16.0: 250}).search_start() == 8.0
    assert profile_sweep(tmp_path, {20.0: 300, 40.0: 600}).search_start() == 20.0
    assert profile_sweep(tmp_path, {}).search_start() == 1.0


def test_the_capacity_is_slogate_capacitys_search_from_there(tmp_path: Path) -> None:
    ps = profile_sweep(tmp_path, {4.0: 60, 8.0: 120, 16.0: 250})
    found = ps.search_capacity(server_at)
    assert found is not None and found["decided"]
    assert found["capacity_rps"] <= 13.5 < found["first_failing_rps"] <= found["capacity_rps"] * 1.1
    assert found["steps"][0]["rate_rps"] == 8.0  # it started where the sweep left off
    assert (tmp_path / "fake" / "capacity" / "capacity.md").exists()


def test_a_step_that_cannot_be_judged_is_recorded_not_raised(tmp_path: Path) -> None:
    def ungated(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        return judge(None, MetricsStore(), RunInfo())

    found = profile_sweep(tmp_path, {4.0: 60}).search_capacity(ungated)
    assert found is not None and "needs an SLO file" in found["error"] and found["capacity_rps"] is None
    assert profile_sweep(tmp_path, {4.0: 60}, search_steps=0).search_capacity(ungated) is None


def test_the_tables_show_each_profile_its_runs_and_its_capacity() -> None:
    run = {"kind": "sweep", "rate": 8.0, "users": None, "summary": {**summary(150), "prefix_cache_hit_rate": 0.4}}
    closed = {"kind": "closed", "rate": None, "users": 16, "summary": summary(900)}
    found = {"capacity_rps": 13.0, "first_failing_rps": 14.0, "steps_run": 5, "decided": True}
    sweeps = {"h200-tuned": {"runs": [run, closed], "capacity": found, "vllm_version": "0.20", "healthy_after_s": 91}}
    text = sweep_report.render(sweeps)
    assert "| h200-tuned | 8 | 100 |" in text and "| 0.40 | pass |" in text
    assert "| h200-tuned | 16 | 100 |" in text  # the closed-loop row
    assert "| h200-tuned | **13 req/s** | 14 req/s | 5 | True | vLLM 0.20 | 91 s |" in text


def test_the_charts_target_is_the_slo_files(tmp_path: Path) -> None:
    assert sweep.ttft_target_ms(ROOT / "benchmarks" / "gpu" / "slo.yaml") == 200.0
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: e2e, percentile: 95, max_ms: 900}\n")
    assert sweep.ttft_target_ms(slo) is None


def test_the_chart_is_drawn_with_or_without_a_ttft_target(tmp_path: Path) -> None:
    run = {"kind": "sweep", "rate": 8.0, "users": None, "summary": {**summary(150), "shared": summary(120)["all"]}}
    sweeps = {"h200-tuned": {"runs": [run]}}
    for target in (200.0, None):
        png = sweep_report.plot(sweeps, target, tmp_path / f"chart-{target}.png")
        assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
