"""Anytime-valid verdicts (slo/gate/sequential.py) under continuous monitoring, by simulation.

Objective: TTFT p95 <= --target-ms. TTFT is lognormal with log-sd sigma (--sigmas, default 0.3 and
1.0), its median scaled so the true p95 is ratio * target (--ratios, default 0.8, 0.9, 0.95, 1.05,
1.1, 1.25; the objective holds for ratio <= 1). Every run draws
real lognormal samples (in blocks, to bound memory), counts exceedances of the target, and is
looked at every --look samples (10 req/s looked at every 2 s) up to --max-samples; it stops at the
first look where the sequential test decides, using the per-n thresholds of `pass_thresholds` and
`fail_thresholds`. A run undecided at the cap has "reached run time"; the nearest-rank judge of a
fixed-length run then judges it (the p95 of its samples against the target).

Per case: P(false pass) and P(false fail) among all runs with their 95 % Wilson intervals, the
fraction undecided at the cap, mean and median samples to a decision (an undecided run counts as
the cap, the samples it used), and two references: n_fixed, the smallest n at which the exact
one-sided binomial test of q = P(X > t) against q0 = 0.05 at level alpha has power >= 1 - alpha
at this truth (a fixed-length run with the same error rates, sized knowing the truth; found by
bisection on n), and Wald's lower bound on the mean samples of any sequential test whose error
rates are alpha at q0 and alpha at this truth, (1 - 2 alpha) log((1 - alpha) / alpha) / KL(q, q0).

The naive method on the same sample paths: the exact fixed-n binomial test (the order-statistic
bound of a fixed-length run at the same confidence) re-checked at every look, stopping at the
first look where it passes or fails; its error rates show why the anytime-valid test is needed.

    .venv/bin/python benchmarks/sequential.py [--runs 10000] [--look 20] [--max-samples 20000]
        [--confidence 0.99] [--seed 1] [--sigmas 0.3 1.0] [--ratios 0.8 ... 1.25] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from slogate.slo.gate.sequential import exceedance_limit, fail_thresholds, pass_thresholds

PERCENTILE = 95.0
SIGMAS = (0.3, 1.0)
RATIOS = (0.8, 0.9, 0.95, 1.05, 1.1, 1.25)
RUN_CHUNK = 2_000  # runs simulated together
LOOKS_PER_BLOCK = 50  # looks drawn at once for the runs still going
FIXED_LIMIT = 1 << 22  # the longest fixed run searched for n_fixed (4.2 million samples)


@dataclass(frozen=True, slots=True)
class Looks:
    """Per-look decision thresholds on the exceedance count S at n = look, 2 look, ..., max_samples."""

    n: np.ndarray
    sequential_pass: np.ndarray  # S <= this passes
    sequential_fail: np.ndarray  # S >= this fails
    naive_pass: np.ndarray
    naive_fail: np.ndarray
    nearest_rank_pass: int  # at the cap: S <= this and the sample p95 is <= the target


@dataclass(frozen=True, slots=True)
class CaseResult:
    sigma: float
    ratio: float
    exceedance: float  # q = P(X > target)
    truth: str
    runs: int
    false_pass: int
    false_fail: int
    undecided: int
    undecided_fixed_pass: int  # undecided runs that the nearest-rank judge at the cap passes
    mean_samples: float
    median_samples: float
    n_fixed: int | None  # None: none up to FIXED_LIMIT samples (a truth at or next to the target)
    wald_bound: float | None  # None at the target itself
    naive_false_pass: int
    naive_false_fail: int
    naive_mean_samples: float


def log_factorials(n: int) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))


def binomial_pmf(n: int, p: float, log_fact: np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) = s) for s = 0..n."""
    s = np.arange(n + 1)
    return np.exp(log_fact[n] - log_fact[s] - log_fact[n - s] + s * math.log(p) + (n - s) * math.log1p(-p))


def exact_test_thresholds(n: int, q0: float, alpha: float, log_fact: np.ndarray) -> tuple[int, int]:
    """The exact one-sided binomial tests of q at n samples, level alpha: (largest S with P_q0(S' <= S) <= alpha,
    -1 if none; smallest S with P_q0(S' >= S) <= alpha, n + 1 if none)."""
    pmf = binomial_pmf(n, q0, log_fact)
    below = np.flatnonzero(np.cumsum(pmf) <= alpha)
    above = np.flatnonzero(np.cumsum(pmf[::-1])[::-1] <= alpha)
    return (int(below[-1]) if len(below) else -1), (int(above[0]) if len(above) else n + 1)


def fixed_power(n: int, q: float, q0: float, alpha: float, truth: str, log_fact: np.ndarray) -> float:
    """P_q(the exact level-alpha test at n samples reaches the true verdict)."""
    pass_at, fail_at = exact_test_thresholds(n, q0, alpha, log_fact)
    pmf = binomial_pmf(n, q, log_fact)
    return float(pmf[: pass_at + 1].sum()) if truth == "pass" else float(pmf[fail_at:].sum())


def fixed_samples(q: float, q0: float, alpha: float, truth: str) -> int | None:
    """The smallest n at which the exact level-alpha test has power >= 1 - alpha at q; None if not even
    FIXED_LIMIT samples reach it. The power of an exact test is a sawtooth in n: a bisection finds where it
    crosses for good, and a scan of the 10 % below that finds earlier teeth that already reach it."""
    high = 64
    while fixed_power(high, q, q0, alpha, truth, log_factorials(high)) < 1 - alpha:
        high *= 2
        if high > FIXED_LIMIT:
            return None
    log_fact = log_factorials(high)
    low = high // 2 if high > 64 else 0
    while high - low > 1:
        middle = (low + high) // 2
        if fixed_power(middle, q, q0, alpha, truth, log_fact) >= 1 - alpha:
            high = middle
        else:
            low = middle
    return min(
        (n for n in range(int(0.9 * high), high) if fixed_power(n, q, q0, alpha, truth, log_fact) >= 1 - alpha),
        default=high,
    )


def wald_bound(q: float, q0: float, alpha: float) -> float | None:
    """Wald's lower bound on E_q[samples] of any sequential test with error rates alpha at q0 and at q
    (None at q = q0, where no test reaches them)."""
    kl = q * math.log(q / q0) + (1 - q) * math.log((1 - q) / (1 - q0))
    return (1 - 2 * alpha) * math.log((1 - alpha) / alpha) / kl if kl > 0 else None


def thresholds(look: int, max_samples: int, q0: float, alpha: float) -> Looks:
    n = np.arange(look, max_samples + 1, look, dtype=np.int64)
    log_fact = log_factorials(int(n[-1]))
    naive = np.array([exact_test_thresholds(int(k), q0, alpha, log_fact) for k in n])
    cap = int(n[-1])
    rank = max(1, math.ceil(PERCENTILE * cap / 100))
    return Looks(n, pass_thresholds(n, q0, alpha), fail_thresholds(n, q0, alpha), naive[:, 0], naive[:, 1], cap - rank)


def first_look(counts: np.ndarray, pass_at: np.ndarray, fail_at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run (rows of cumulative exceedance counts at consecutive looks): the index of the first look that
    decides (-1 if none) and whether it passes."""
    passes, fails = counts <= pass_at, counts >= fail_at
    decided = passes | fails
    index = np.where(decided.any(axis=1), decided.argmax(axis=1), -1)
    return index, passes[np.arange(len(counts)), np.maximum(index, 0)]


def simulate(
    runs: int, mu: float, sigma: float, target: float, look: int, looks: Looks, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per run: sequential verdict code (1 pass, -1 fail, 0 undecided), its samples, the naive verdict code
    and samples, and the nearest-rank judge at the cap (True: passes)."""
    n_looks = len(looks.n)
    seq_code, naive_code = np.zeros(runs, dtype=np.int8), np.zeros(runs, dtype=np.int8)
    seq_n, naive_n = np.full(runs, looks.n[-1]), np.full(runs, looks.n[-1])
    cap_pass = np.zeros(runs, dtype=bool)
    for chunk in range(0, runs, RUN_CHUNK):
        ids = np.arange(chunk, min(chunk + RUN_CHUNK, runs))
        counts = np.zeros(len(ids), dtype=np.int64)
        seq_open, naive_open = np.ones(len(ids), dtype=bool), np.ones(len(ids), dtype=bool)
        for start in range(0, n_looks, LOOKS_PER_BLOCK):
            live = seq_open | naive_open
            if not live.any():
                break
            stop = min(start + LOOKS_PER_BLOCK, n_looks)
            samples = rng.lognormal(mu, sigma, size=(int(live.sum()), (stop - start) * look))
            per_look = (samples > target).reshape(len(samples), stop - start, look).sum(axis=2)
            cumulative = counts[live, None] + np.cumsum(per_look, axis=1)
            counts[live] = cumulative[:, -1]
            for is_open, code, used, pass_at, fail_at in (
                (seq_open, seq_code, seq_n, looks.sequential_pass, looks.sequential_fail),
                (naive_open, naive_code, naive_n, looks.naive_pass, looks.naive_fail),
            ):
                watch = is_open[live]
                index, passed = first_look(cumulative[watch], pass_at[start:stop], fail_at[start:stop])
                hit = index >= 0
                run_ids = ids[live][watch][hit]
                code[run_ids] = np.where(passed[hit], 1, -1)
                used[run_ids] = looks.n[start + index[hit]]
                is_open[np.flatnonzero(live)[watch][hit]] = False
        cap_pass[ids] = counts <= looks.nearest_rank_pass  # meaningful for runs still open at the cap
    return seq_code, seq_n, naive_code, naive_n, cap_pass


def run_case(
    sigma: float, ratio: float, args: argparse.Namespace, looks: Looks, rng: np.random.Generator
) -> CaseResult:
    alpha = 1 - args.confidence
    q0 = exceedance_limit(PERCENTILE)
    normal = statistics.NormalDist()
    mu = math.log(ratio * args.target_ms) - normal.inv_cdf(PERCENTILE / 100) * sigma
    q = 1 - normal.cdf((math.log(args.target_ms) - mu) / sigma)
    truth = "pass" if ratio <= 1 else "fail"
    seq_code, seq_n, naive_code, naive_n, cap_pass = simulate(
        args.runs, mu, sigma, args.target_ms, args.look, looks, rng
    )
    wrong_code = 1 if truth == "fail" else -1  # the verdict code that would be wrong
    undecided = seq_code == 0
    return CaseResult(
        sigma=sigma,
        ratio=ratio,
        exceedance=q,
        truth=truth,
        runs=args.runs,
        false_pass=int(np.sum(seq_code == 1)) if wrong_code == 1 else 0,
        false_fail=int(np.sum(seq_code == -1)) if wrong_code == -1 else 0,
        undecided=int(undecided.sum()),
        undecided_fixed_pass=int(np.sum(undecided & cap_pass)),
        mean_samples=float(seq_n.mean()),
        median_samples=float(np.median(seq_n)),
        n_fixed=fixed_samples(q, q0, alpha, truth),
        wald_bound=wald_bound(q, q0, alpha),
        naive_false_pass=int(np.sum(naive_code == 1)) if wrong_code == 1 else 0,
        naive_false_fail=int(np.sum(naive_code == -1)) if wrong_code == -1 else 0,
        naive_mean_samples=float(naive_n.mean()),
    )


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95 % Wilson score interval of a binomial proportion k / n."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k: int, n: int) -> str:
    low, high = wilson(k, n)
    return f"{100 * k / n:.2f} % [{100 * low:.2f}, {100 * high:.2f}]"


def markdown(results: list[CaseResult], args: argparse.Namespace) -> str:
    lines = [
        f"Anytime-valid p95 verdicts, confidence {args.confidence}, target {args.target_ms:g} ms, "
        f"{args.runs} runs a case, a look every {args.look} samples, cap {args.max_samples} samples, seed {args.seed}.",
        "",
        "| sigma | true p95 / target | q = P(X > t) | truth | false pass [95 % CI] | false fail [95 % CI] "
        "| undecided at cap (fixed judge: pass/fail) | mean samples | median | n_fixed | mean / n_fixed "
        "| Wald bound / n_fixed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        undecided = (
            f"{100 * r.undecided / r.runs:.2f} % ({r.undecided_fixed_pass}/{r.undecided - r.undecided_fixed_pass})"
        )
        fixed = (
            f"{r.n_fixed} | {r.mean_samples / r.n_fixed:.2f} | {r.wald_bound / r.n_fixed:.2f}"
            if r.n_fixed and r.wald_bound
            else f"> {FIXED_LIMIT} | - | -"
        )
        lines.append(
            f"| {r.sigma:g} | {r.ratio:g} | {r.exceedance:.4f} | {r.truth} | {rate(r.false_pass, r.runs)} "
            f"| {rate(r.false_fail, r.runs)} | {undecided} | {r.mean_samples:.0f} | {r.median_samples:.0f} | {fixed} |"
        )
    lines += [
        "",
        "Naive: the fixed-n exact binomial test at the same confidence, re-checked at every look (same sample paths).",
        "",
        "| sigma | true p95 / target | truth | false pass [95 % CI] | false fail [95 % CI] | mean samples |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.sigma:g} | {r.ratio:g} | {r.truth} | {rate(r.naive_false_pass, r.runs)} "
            f"| {rate(r.naive_false_fail, r.runs)} | {r.naive_mean_samples:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000, help="simulated runs per case")
    parser.add_argument("--look", type=int, default=20, help="samples between looks")
    parser.add_argument("--max-samples", type=int, default=20_000, help="the cap: a run's length (multiple of --look)")
    parser.add_argument("--confidence", type=float, default=0.99)
    parser.add_argument("--target-ms", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sigmas", type=float, nargs="+", default=list(SIGMAS), help="log-sds of the TTFT")
    parser.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="true p95 / target")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.max_samples < args.look or args.max_samples % args.look:
        parser.error("--max-samples must be a positive multiple of --look")
    started = time.perf_counter()
    looks = thresholds(args.look, args.max_samples, exceedance_limit(PERCENTILE), 1 - args.confidence)
    rng = np.random.default_rng(args.seed)
    results = [run_case(sigma, ratio, args, looks, rng) for sigma in args.sigmas for ratio in args.ratios]
    print(markdown(results, args))
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "cases": [asdict(r) for r in results]}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
