"""The GPU sweep's knee search and tables (benchmarks/gpu/sweep.py), without a server."""

import argparse
import importlib.util
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_sweep", ROOT / "benchmarks" / "gpu" / "sweep.py")
assert spec is not None and spec.loader is not None
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)


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


class FakeServer(sweep.ProfileSweep):
    """p95 TTFT grows with the rate and crosses 200 ms at 13 req/s."""

    def __init__(self, knee_steps: int, resolution: float = 1.0) -> None:
        args = argparse.Namespace(
            knee_steps=knee_steps,
            knee_resolution=resolution,
            knee_max_rate=128.0,
            target_ms=200.0,
            run_time=1,
            out=Path("unused"),
        )
        super().__init__(args, "fake", "http://x", time.monotonic() + 3600)
        self.tried: list[float] = []

    def open_loop(self, rate: float, kind: str) -> dict:
        self.tried.append(rate)
        return summary(p95=200 * rate / 13)


def test_the_knee_is_bisected_between_the_last_sustained_rate_and_the_first_unsustained_one() -> None:
    server = FakeServer(knee_steps=4)
    knee = server.knee({4.0: True, 8.0: True, 16.0: False, 24.0: False})
    assert server.tried == [12.0, 14.0, 13.0]  # stops when the bracket is 1 req/s wide
    assert knee == {"rate": 13.0, "unsustained_from": 14.0, "target_ms": 200.0}


def test_when_every_rate_is_sustained_the_search_doubles_the_rate() -> None:
    server = FakeServer(knee_steps=2)
    knee = server.knee({2.0: True, 4.0: True})
    assert server.tried == [8.0, 16.0]
    assert knee["rate"] == 8.0 and knee["unsustained_from"] == 16.0


def test_when_no_rate_is_sustained_the_knee_is_searched_below_the_lowest() -> None:
    server = FakeServer(knee_steps=1)
    knee = server.knee({20.0: False, 40.0: False})
    assert server.tried == [10.0] and knee["rate"] == 10.0 and knee["unsustained_from"] == 20.0


@pytest.mark.parametrize(("failures", "dropped"), [(1, 0), (0, 1)])
def test_a_rate_with_lost_requests_is_not_sustained_even_with_a_good_p95(failures: int, dropped: int) -> None:
    assert sweep.meets_target(summary(50), 200)
    assert not sweep.meets_target(summary(50, failures, dropped), 200)
    assert not sweep.meets_target(None, 200)


def test_the_tables_show_each_profile_its_runs_and_its_knee() -> None:
    run = {"kind": "sweep", "rate": 8.0, "users": None, "summary": {**summary(150), "prefix_cache_hit_rate": 0.4}}
    closed = {"kind": "closed", "rate": None, "users": 16, "summary": summary(900)}
    sweeps = {
        "h200-tuned": {"runs": [run, closed], "knee": {"rate": 13.0, "unsustained_from": 14.0}, "vllm_version": "0.20"}
    }
    text = sweep.render(sweeps, 200)
    assert "| h200-tuned | 8 | 100 |" in text and "| 0.40 | pass |" in text
    assert "| h200-tuned | 16 | 100 |" in text  # the closed-loop row
    assert "| h200-tuned | **13 req/s** | 14 req/s | vLLM 0.20 |" in text
