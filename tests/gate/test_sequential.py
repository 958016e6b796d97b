"""Anytime-valid verdicts (slo/gate/sequential.py): thresholds, the rank form, proportions and rates, and
error control under continuous monitoring by simulation, against a naive re-checked fixed-n bound.

The simulations draw each look's exceedance count as Binomial(look, q): exactly the distribution of the
count of `look` i.i.d. latencies above the target whatever their distribution, q = P(X > t)."""

from __future__ import annotations

import ast
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from slogate.slo.gate import sequential
from slogate.slo.gate.sequential import (
    FAIL,
    OFFSETS,
    PASS,
    UNDECIDED,
    WEIGHTS,
    decide_percentile,
    decide_proportion,
    decide_rate,
    exceedance_limit,
    fail_threshold,
    fail_thresholds,
    lower_rank,
    pass_threshold,
    pass_thresholds,
    upper_rank,
)

LOG_FACT = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, 20_001)))))
Q0 = 0.05  # p95
SIM_ALPHA = 0.05  # 2,000 runs resolve a 5 % error rate to +-0.5 %
SIM_RUNS = 2_000
LOOK, CAP = 20, 10_000
LOOKS = np.arange(LOOK, CAP + 1, LOOK)


def exceedance(sigma: float, ratio: float) -> float:
    """q = P(X > t) for a lognormal X with log-sd sigma whose p95 is ratio * t."""
    return 1 - statistics.NormalDist().cdf(statistics.NormalDist().inv_cdf(0.95) - math.log(ratio) / sigma)


def log_sum(weights: np.ndarray, logs: list[float]) -> float:
    top = max(logs)
    return top + math.log(math.fsum(w * math.exp(v - top) for w, v in zip(weights, logs, strict=True)))


def log_mixture(events: int, n: int, q_null: float, offsets: np.ndarray) -> float:
    """log M_pass (offsets < 0) or log M_fail (> 0), written out independently: alternatives whose odds are
    exp(d) times the null's."""
    logs = []
    for d in offsets:
        q = q_null * math.exp(d) / (1 - q_null + q_null * math.exp(d))
        logs.append(events * math.log(q / q_null) + (n - events) * math.log((1 - q) / (1 - q_null)))
    return log_sum(WEIGHTS, logs)


def exact_test(n: int, q0: float, alpha: float) -> tuple[int, int]:
    """The fixed-n exact one-sided binomial tests at level alpha: (S <= this passes, S >= this fails)."""
    s = np.arange(n + 1)
    pmf = np.exp(LOG_FACT[n] - LOG_FACT[s] - LOG_FACT[n - s] + s * math.log(q0) + (n - s) * math.log1p(-q0))
    below, above = np.flatnonzero(np.cumsum(pmf) <= alpha), np.flatnonzero(np.cumsum(pmf[::-1])[::-1] <= alpha)
    return (int(below[-1]) if len(below) else -1), (int(above[0]) if len(above) else n + 1)


def simulate(q: float, pass_at: np.ndarray, fail_at: np.ndarray, seed: int) -> tuple[float, float, float]:
    """(P(pass), P(fail), mean samples) over SIM_RUNS runs stopping at the first deciding look (the cap if none)."""
    counts = np.cumsum(np.random.default_rng(seed).binomial(LOOK, q, size=(SIM_RUNS, len(LOOKS))), axis=1)
    passes, fails = counts <= pass_at, counts >= fail_at
    decided = passes | fails
    first = decided.argmax(axis=1)
    any_ = decided.any(axis=1)
    passed = any_ & passes[np.arange(SIM_RUNS), first]
    samples = np.where(any_, LOOKS[first], CAP)
    return float(passed.mean()), float((any_ & ~passed).mean()), float(samples.mean())


def error_ceiling(alpha: float, runs: int) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def test_module_is_pure() -> None:
    tree = ast.parse(Path(sequential.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "math", "dataclasses", "functools", "numpy"}


@pytest.mark.parametrize("alpha", [0.01, 0.05])
@pytest.mark.parametrize("q0", [0.5, 0.05, 0.01, 0.001])
def test_thresholds_monotone_in_n(q0: float, alpha: float) -> None:
    n = np.arange(0, 20_001)
    passing, failing = pass_thresholds(n, q0, alpha), fail_thresholds(n, q0, alpha)
    assert np.all(np.diff(passing) >= 0) and np.all(np.diff(failing) >= 0)
    assert passing[0] == -1 and failing[0] == 1  # n = 0: neither
    assert np.all(passing < q0 * n) and np.all(failing > q0 * n)  # never both, never at the boundary itself
    assert failing[-1] <= n[-1]  # a fail is reachable in 20,000 samples for every q0 here
    if q0 >= 0.01:
        assert passing[-1] >= 0


CASES = [(1, 0.5, 0.01), (40, 0.05, 0.01), (777, 0.05, 0.05), (5000, 0.001, 0.01)]


@pytest.mark.parametrize(("n", "q0", "alpha"), CASES)
def test_thresholds_match_the_mixture(n: int, q0: float, alpha: float) -> None:
    bar = math.log(1 / alpha)
    passing = [s for s in range(n + 1) if log_mixture(s, n, q0, -OFFSETS) >= bar]
    failing = [s for s in range(n + 1) if log_mixture(s, n, q0, OFFSETS) >= bar]
    assert pass_threshold(n, q0, alpha) == (max(passing) if passing else None)
    assert fail_threshold(n, q0, alpha) == (min(failing) if failing else None)
    assert passing == list(range(len(passing)))  # a threshold: every smaller count passes too
    assert failing == list(range(n + 1 - len(failing), n + 1))


def test_thresholds_at_ten_million_samples() -> None:
    n = np.array([10**7, 10**7 + 1, 10**7 + 1000])
    passing, failing = pass_thresholds(n, Q0, 0.01), fail_thresholds(n, Q0, 0.01)
    assert np.all(np.diff(passing) >= 0) and np.all(np.diff(failing) >= 0)
    assert np.all(np.abs(passing / n - Q0) < 5e-4) and np.all(np.abs(failing / n - Q0) < 5e-4)  # still shrinking
    assert np.all(passing < Q0 * n) and np.all(failing > Q0 * n)
    bar = math.log(100)
    s = int(passing[0])
    assert log_mixture(s, 10**7, Q0, -OFFSETS) >= bar > log_mixture(s + 1, 10**7, Q0, -OFFSETS)


def test_rank_form_agrees_with_count_form() -> None:
    rng = np.random.default_rng(11)
    verdicts = set()
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        percentile = float(rng.choice([50, 90, 95, 99, 99.9, 100]))
        values = rng.lognormal(math.log(100), rng.uniform(0.1, 1.5), size=n).round(1)  # ties too
        target = float(np.quantile(values, rng.uniform(0.5, 1.0)))
        alpha = float(rng.choice([0.01, 0.05]))
        by_rank = decide_percentile(values, percentile, target, alpha)
        by_count = decide_proportion(int(np.sum(values > target)), n, exceedance_limit(percentile), alpha)
        assert by_rank.verdict == by_count.verdict
        ordered = np.sort(values)
        upper_k, lower_k = upper_rank(n, percentile, alpha), lower_rank(n, percentile, alpha)
        assert (by_rank.upper is None) == (upper_k is None) and (by_rank.lower is None) == (lower_k is None)
        if upper_k is not None and lower_k is not None:
            assert 1 <= lower_k < upper_k <= n  # the lower bound's rank sits below the upper bound's
            assert ordered[lower_k - 1] <= ordered[upper_k - 1]
        verdicts.add(by_rank.verdict)
    assert verdicts == {PASS, FAIL, UNDECIDED}


def test_percentile_bounds_bracket_the_sample_percentile() -> None:
    values = np.random.default_rng(5).lognormal(math.log(100), 0.5, size=5000)
    decision = decide_percentile(values, 95, 1e9, 0.01)
    assert decision.verdict == PASS and decision.samples == 5000
    sample_p95 = np.sort(values)[math.ceil(0.95 * 5000) - 1]
    assert decision.lower < sample_p95 < decision.upper


def test_proportion_clear_pass_and_fail() -> None:
    clean = decide_proportion(0, 10_000, 0.05, 0.01)
    assert clean.verdict == PASS and clean.lower == 0.0 and 0 < clean.upper < 0.001
    broken = decide_proportion(2000, 10_000, 0.05, 0.01)
    assert broken.verdict == FAIL and 0.05 < broken.lower < 0.2 < broken.upper < 0.25


@pytest.mark.parametrize(("n", "q0"), [(100, 0.05), (1000, 0.05), (2000, 0.5), (3000, 0.002)])
def test_bounds_and_verdict_agree_with_thresholds(n: int, q0: float) -> None:
    alpha = 0.01
    passing, failing = pass_threshold(n, q0, alpha), fail_threshold(n, q0, alpha)
    for events in range(0, n + 1, max(1, n // 200)):
        decision = decide_proportion(events, n, q0, alpha)
        expected = PASS if passing is not None and events <= passing else UNDECIDED
        if failing is not None and events >= failing:
            expected = FAIL
        assert decision.verdict == expected
        assert (decision.upper <= q0) == (decision.verdict == PASS)
        assert (decision.lower >= q0) == (decision.verdict == FAIL)
        assert 0 <= decision.lower <= events / n <= decision.upper <= 1


def test_zero_limit_never_passes() -> None:
    assert decide_proportion(0, 10**6, 0.0, 0.01).verdict == UNDECIDED
    assert decide_proportion(1, 10**6, 0.0, 0.01).verdict == FAIL
    assert decide_proportion(1, 1, 0.0, 0.01).verdict == FAIL  # the first event decides
    assert np.all(pass_thresholds(np.arange(0, 1000), 0.0, 0.01) == -1)
    assert upper_rank(1000, 100, 0.01) is None and lower_rank(1000, 100, 0.01) == 1000  # p100: the maximum
    values = np.arange(1.0, 1001.0)
    assert decide_percentile(values, 100, 1000.0, 0.01).verdict == UNDECIDED
    assert decide_percentile(values, 100, 999.5, 0.01).verdict == FAIL


def test_trivial_empty_and_invalid() -> None:
    assert decide_proportion(5, 10, 1.0, 0.01).verdict == PASS
    empty = decide_proportion(0, 0, 0.05, 0.01)
    assert (empty.verdict, empty.lower, empty.upper, empty.samples) == (UNDECIDED, 0.0, 1.0, 0)
    assert decide_percentile(np.array([]), 95, 200.0, 0.01) == sequential.Decision(UNDECIDED, None, None, 0)
    for alpha in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError):
            decide_proportion(0, 10, 0.05, alpha)
    for percentile in (0, 100.5, math.nan):
        with pytest.raises(ValueError):
            exceedance_limit(percentile)
    with pytest.raises(ValueError):
        decide_proportion(11, 10, 0.05, 0.01)


def test_rate_verdicts_and_bounds() -> None:
    assert decide_rate(1000, 100.0, 8.0, 0.01).verdict == PASS
    assert decide_rate(1000, 100.0, 12.0, 0.01).verdict == FAIL
    unsure = decide_rate(1000, 100.0, 10.0, 0.01)
    assert unsure.verdict == UNDECIDED and unsure.lower < 10 < unsure.upper and unsure.samples == 1000
    silent = decide_rate(0, 100.0, 1.0, 0.01)
    assert silent.verdict == FAIL and silent.lower == 0.0 and silent.upper < 1.0
    for events in (0, 5):  # no time measured yet
        start = decide_rate(events, 0.0, 1.0, 0.01)
        assert (start.verdict, start.lower, start.upper) == (UNDECIDED, 0.0, math.inf)


@pytest.mark.parametrize(("events", "seconds", "min_rate"), [(3, 1.0, 1.0), (95, 10.0, 5.0), (950, 100.0, 10.0)])
def test_rate_verdict_is_the_poisson_mixture(events: int, seconds: float, min_rate: float) -> None:
    bar = math.log(100)
    for rate in np.linspace(0.3 * min_rate, 3 * min_rate, 41):
        count = round(events * rate / min_rate)
        log_e = {
            side: log_sum(WEIGHTS, [count * d - min_rate * math.expm1(d) * seconds for d in side * OFFSETS])
            for side in (1, -1)
        }
        decision = decide_rate(count, seconds, min_rate, 0.01)
        expected = PASS if log_e[1] >= bar else FAIL if log_e[-1] >= bar else UNDECIDED
        assert decision.verdict == expected
        assert (decision.lower >= min_rate) == (decision.verdict == PASS)
        assert (decision.upper <= min_rate) == (decision.verdict == FAIL)


@pytest.mark.parametrize("ratio", [0.9, 0.95, 1.0, 1.05, 1.1])
def test_error_rates_within_alpha_under_continuous_monitoring(ratio: float) -> None:
    """True p95 at ratio x the target, looked at every 20 samples up to 10,000, stopping at the first decision.
    At ratio 1 (q = q0) the objective holds, and both one-sided tests are at their null's edge."""
    q = exceedance(1.0, ratio)
    passed, failed, _ = simulate(q, pass_thresholds(LOOKS, Q0, SIM_ALPHA), fail_thresholds(LOOKS, Q0, SIM_ALPHA), 21)
    ceiling = error_ceiling(SIM_ALPHA, SIM_RUNS)
    if ratio >= 1:
        assert passed <= ceiling
    if ratio <= 1:
        assert failed <= ceiling
    if ratio != 1:
        assert passed + failed > 0.3  # and it decides


@pytest.mark.parametrize("ratio", [0.95, 1.0, 1.05])
def test_naive_rechecked_fixed_bound_exceeds_alpha(ratio: float) -> None:
    """The same setup with the fixed-n exact binomial test re-checked at every look: the error rate the
    test above would catch if the thresholds were not anytime-valid."""
    naive = np.array([exact_test(int(n), Q0, SIM_ALPHA) for n in LOOKS])
    passed, failed, _ = simulate(exceedance(1.0, ratio), naive[:, 0], naive[:, 1], 21)
    wrong = passed if ratio > 1 else failed  # at ratio 1 the objective holds: a FAIL is wrong
    assert wrong > error_ceiling(SIM_ALPHA, SIM_RUNS)


def fixed_run_samples(q: float, alpha: float) -> int:
    """The smallest n at which the fixed-n exact test at level alpha passes a truth q < q0 with probability
    >= 1 - alpha: a fixed-length run with the same error rates."""
    for n in range(1, len(LOG_FACT)):
        s = np.arange(n + 1)
        pmf = np.exp(LOG_FACT[n] - LOG_FACT[s] - LOG_FACT[n - s] + s * math.log(q) + (n - s) * math.log1p(-q))
        if pmf[: exact_test(n, Q0, alpha)[0] + 1].sum() >= 1 - alpha:
            return n
    raise AssertionError("no fixed run of up to 20,000 samples")


@pytest.mark.parametrize("sigma", [0.3, 1.0])
def test_fewer_samples_than_a_fixed_run_at_0_8(sigma: float) -> None:
    alpha = 0.01
    q = exceedance(sigma, 0.8)
    passed, _, mean_samples = simulate(q, pass_thresholds(LOOKS, Q0, alpha), fail_thresholds(LOOKS, Q0, alpha), 31)
    assert passed >= 1 - alpha
    assert mean_samples < 0.75 * fixed_run_samples(q, alpha)
