"""The true knee that benchmarks/capacity_repeat.py measures the capacity search against: its queue
simulation (M/D/c and, with the fault server's `lognormal=S`, M/G/c) checked against queueing
theory, and its in-process search harness (`--simulate`)."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
from slogate.launch.knee import SearchSettings, search
from slogate.launch.knee_interval import StepJudge
from slogate.slo.gate.spec import parse_spec

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))  # as when run: the scripts import each other
spec = importlib.util.spec_from_file_location("capacity_repeat", ROOT / "benchmarks" / "capacity_repeat.py")
assert spec is not None and spec.loader is not None
repeat = importlib.util.module_from_spec(spec)
sys.modules["capacity_repeat"] = repeat  # its dataclasses look their module up
spec.loader.exec_module(repeat)
import queue_model  # noqa: E402  (benchmarks/, on the path above)


def pollaczek_khinchine_ms(rate: float, service_ms: float, sigma: float) -> float:
    """M/G/1 mean wait: rate E[S^2] / (2 (1 - rho)), S = F x service, F lognormal of mean 1."""
    lam = rate / 1000
    second_moment = service_ms**2 * math.exp(sigma**2)  # E[F^2] = exp(sigma^2) when E[F] = 1
    return lam * second_moment / (2 * (1 - lam * service_ms))


def test_one_slot_waits_match_pollaczek_khinchine_with_and_without_lognormal_service() -> None:
    for sigma in (0.0, 0.5):
        shape = queue_model.Shape(slots=1, ttft_ms=100, tokens=5, itl_ms=25, lognormal=sigma)  # 200 ms: 5 req/s
        waits, ttft = queue_model.ttft_samples(3.5, shape, arrivals=200_000, seed=3)
        expected = pollaczek_khinchine_ms(3.5, shape.service_ms, sigma)
        assert abs(waits.mean() - expected) / expected < 0.05, (sigma, waits.mean(), expected)
        assert abs((ttft - waits).mean() - shape.ttft_ms) < 2  # TTFT = wait + F x ttft_ms, E[F] = 1


def test_at_a_low_rate_the_p95_ttft_is_the_services_own() -> None:
    no_wait = queue_model.p95_ttft_ms(0.5, queue_model.Shape(), arrivals=20_000)  # M/D/8 at 0.5 req/s
    assert abs(no_wait - 200) < 1
    sigma = 0.5
    p95 = queue_model.p95_ttft_ms(0.5, queue_model.Shape(lognormal=sigma), arrivals=50_000)
    assert abs(p95 / (200 * math.exp(-(sigma**2) / 2 + 1.6449 * sigma)) - 1) < 0.03  # the factor's own p95


def test_a_simulated_search_runs_the_real_search_and_accounts_its_wall_time(tmp_path: Path) -> None:
    slo = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 320}]})
    shape = queue_model.Shape()
    step = repeat.SimulatedStep(shape, slo, warmup_s=5, early=(True, False), seed=1)
    probe = repeat.SimulatedStep(shape, slo, warmup_s=1, early=(True, False), seed=2)
    settings = SearchSettings(rate_start=4, step_s=30, probe_s=3)
    result = search(step, settings, tmp_path, judge=StepJudge(slo), probe_step=probe)
    low, high = result.interval_rps
    assert low is not None and high is not None and 8 <= low < high <= 20  # M/D/8 of 20 req/s, knee 12.94
    assert probe.wall_s >= sum(repeat.STARTUP_S + 1 + 3 for s in result.steps if s.probe) - 3  # fail probes end early
    assert step.wall_s > 0 and np.isfinite(step.wall_s)
