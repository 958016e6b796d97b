"""Regression-judge speed: the bucket bootstrap (slo/gate/bootstrap.py) against the old per-value bootstrap.

Target (issue): a TTFT and an ITL rule over 1,000,000 samples each judged in under 2 s on one core.

Two pairs of histograms, baseline and current (a 3% slower run, other seed): TTFT-like (lognormal,
median 120 ms, sigma 0.4) judged at p95, ITL-like (lognormal, median 8 ms, sigma 0.3) at p99.
Samples come from numpy and go into the histograms as counts per bucket (`record_value(v, count)`),
checked bucket for bucket against recording one by one on a slice; recording is timed apart and
not counted in the judge's time. The judge's time is, per repetition, both rules: the two
percentiles of each rule and `change_interval_pct` (400 rounds); the median of --repeat.

The old method (`per_value_interval`, copied from slo/gate/regression.py before the change) draws n
values per round in Python. It runs in the same process at 10,000, 100,000 and 1,000,000 samples
per histogram, over fewer rounds than 400 (its cost per round is constant), and its time is
scaled to 400 rounds, which the table says. One core: BLAS/OpenMP threads are set to 1 before
numpy loads, and the process pins itself to --core (sched_setaffinity, what `taskset -c` does).

    .venv/bin/python benchmarks/judge_speed.py [--repeat 5] [--core 0]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from slogate.slo.gate.bootstrap import change_interval_pct  # noqa: E402
from slogate.slo.gate.histogram import HIGHEST_US, LOWEST_US, LatencyHistogram  # noqa: E402

ROUNDS = 400
RULES = (("ttft", 120.0, 0.4, 95.0), ("itl", 8.0, 0.3, 99.0))  # metric, median ms, sigma, percentile
SLOWDOWN = 1.03


def per_value_interval(
    base: LatencyHistogram, cur: LatencyHistogram, p: float, rounds: int = ROUNDS, seed: int = 0
) -> tuple[float, float]:
    """The old judge's bootstrap (slo/gate/regression.py, bootstrap_change_pct), verbatim but for names."""
    rng = random.Random(seed)
    samples = []
    prepared = []
    for h in (base, cur):
        pairs = h.values_and_counts_ms()
        values = [v for v, _ in pairs]
        cumulative, total = [], 0
        for _, c in pairs:
            total += c
            cumulative.append(total)
        prepared.append((values, cumulative, total))
    (bv, bw, bn), (cv, cw, cn) = prepared

    def resample(values: list[float], weights: list[int], n: int) -> float:
        draw = sorted(rng.choices(values, cum_weights=weights, k=n))
        rank = max(1, -(-n * p // 100))
        return draw[int(rank) - 1]

    for _ in range(rounds):
        b = resample(bv, bw, bn)
        c = resample(cv, cw, cn)
        samples.append((c - b) / b * 100 if b else 0.0)
    samples.sort()
    tail = (1 - 0.95) / 2
    return samples[int(tail * (rounds - 1))], samples[int((1 - tail) * (rounds - 1))]


def record_many_us(h: LatencyHistogram, values_us: np.ndarray) -> None:
    """Record integer microsecond values as one count per bucket: each value goes to its bucket's lowest
    equivalent value (the same counts index as recording it alone), then `record_value(v, count)`."""
    hdr = h._h
    v = np.clip(values_us.astype(np.int64), LOWEST_US, HIGHEST_US)
    bit_length = np.frexp((v | hdr.sub_bucket_mask).astype(np.float64))[1]  # exact below 2**53
    shift = bit_length - (hdr.sub_bucket_half_count_magnitude + 1)  # bucket index + unit magnitude
    lowest, counts = np.unique((v >> shift) << shift, return_counts=True)
    for value, count in zip(lowest.tolist(), counts.tolist(), strict=True):
        hdr.record_value(value, count)


def check_recording() -> None:
    values = np.random.default_rng(42).lognormal(np.log(120_000), 1.5, 20_000).astype(np.int64)
    fast, slow = LatencyHistogram(), LatencyHistogram()
    record_many_us(fast, values)
    for v in values.tolist():
        slow.record_us(v)
    assert list(fast._h.counts) == list(slow._h.counts), "bulk recording differs from one-by-one"
    assert fast.summary_ms() == slow.summary_ms()


def histograms(n: int, seed: int) -> dict[str, tuple[LatencyHistogram, LatencyHistogram]]:
    rng = np.random.default_rng(seed)
    out = {}
    for metric, median_ms, sigma, _ in RULES:
        pair = []
        for scale in (1.0, SLOWDOWN):
            h = LatencyHistogram()
            record_many_us(h, np.rint(rng.lognormal(np.log(median_ms * 1000 * scale), sigma, n)))
            pair.append(h)
        out[metric] = (pair[0], pair[1])
    return out


def judge_buckets(hists: dict[str, tuple[LatencyHistogram, LatencyHistogram]]) -> dict[str, tuple[float, float]]:
    out = {}
    for metric, _, _, p in RULES:
        base, cur = hists[metric]
        base.percentile_ms(p), cur.percentile_ms(p)
        out[metric] = change_interval_pct(base, cur, p, rounds=ROUNDS)
    return out


def judge_per_value(hists: dict[str, tuple[LatencyHistogram, LatencyHistogram]], rounds: int) -> None:
    for metric, _, _, p in RULES:
        base, cur = hists[metric]
        base.percentile_ms(p), cur.percentile_ms(p)
        per_value_interval(base, cur, p, rounds=rounds)


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of the bucket bootstrap (median)")
    ap.add_argument("--core", type=int, default=0, help="the one CPU core to run on")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    pinned = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "n/a"

    check_recording()
    # n per histogram -> rounds the per-value method runs (scaled to 400)
    sizes = {10_000: 40, 100_000: 8, 1_000_000: 2}
    rows = []
    intervals: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {}
    for n, pv_rounds in sizes.items():
        t0 = time.perf_counter()
        hists = histograms(n, seed=n)
        record_s = time.perf_counter() - t0
        buckets = {m: len(h[0].distinct_values_ms()[0]) + len(h[1].distinct_values_ms()[0]) for m, h in hists.items()}
        judge_buckets(hists)  # warm-up
        bucket_s = statistics.median(timed(judge_buckets, hists) for _ in range(args.repeat))
        pv_s = timed(judge_per_value, hists, pv_rounds) * ROUNDS / pv_rounds
        if n == 10_000:  # both methods' intervals, full rounds, to show they agree
            intervals = {
                m: (iv, per_value_interval(*hists[m], p))
                for (m, *_, p), iv in zip(RULES, judge_buckets(hists).values(), strict=True)
            }
        rows.append((n, buckets, record_s, bucket_s, pv_s, pv_rounds))
        print(f"n={n:,}: bucket {bucket_s:.3f} s, per-value {pv_s:.1f} s (from {pv_rounds} rounds)", file=sys.stderr)

    print(f"Python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, pinned to cores {pinned}")
    print(
        f"rules: ttft p95 (lognormal median 120 ms, sigma 0.4), itl p99 (median 8 ms, sigma 0.3); "
        f"current = baseline x {SLOWDOWN}; {ROUNDS} rounds; bucket time median of {args.repeat}\n"
    )
    print(
        "| samples per histogram | distinct buckets (ttft / itl, base+cur) | bucket bootstrap, both rules "
        "| per-value bootstrap, both rules | speed-up | recording (excluded) |"
    )
    print("|---|---|---|---|---|---|")
    for n, buckets, record_s, bucket_s, pv_s, pv_rounds in rows:
        print(
            f"| {n:,} | {buckets['ttft']:,} / {buckets['itl']:,} | {bucket_s:.3f} s | "
            f"{pv_s:,.1f} s ({pv_rounds} rounds measured, x{ROUNDS // pv_rounds}) | **{pv_s / bucket_s:,.0f}x** "
            f"| {record_s:.2f} s |"
        )
    final = rows[-1]
    verdict = "met" if final[3] < 2 else "NOT met"
    print(f"\nTarget (both rules over 1,000,000 samples each in < 2 s on one core): **{verdict}** ({final[3]:.3f} s).")
    print("\nIntervals at 10,000 samples (change %, 400 rounds each; both methods should agree within noise):\n")
    print("| rule | bucket bootstrap | per-value bootstrap |")
    print("|---|---|---|")
    for metric, *_, p in RULES:
        b, v = intervals[metric]
        print(f"| {metric} p{p:g} | [{b[0]:+.2f}, {b[1]:+.2f}] | [{v[0]:+.2f}, {v[1]:+.2f}] |")


if __name__ == "__main__":
    main()
