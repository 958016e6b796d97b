"""Proof by repetition: N default `slogate capacity` searches against the fault server, whose knee at
the SLO is known, and how often the interval covers it, how wide it is and how long a search takes.

The fault server's `slots=c,ttft_ms=T,tokens=k,itl_ms=I` serves at most c streams at once, each
holding its slot for S = T + (k - 1) x I ms (deterministic), and answers its first token T ms after
a slot is free: with Poisson arrivals it is an M/D/c queue whose TTFT is the queue wait plus T. The
true knee at "p95 TTFT <= target" is the rate whose steady-state p95 wait is target - T, computed
here independently of slogate by simulating that queue (`p95_wait_ms`, bisection in `true_knee`).
The fault server has no lognormal service times (no M/G/c shape): only this one is measured.

Each search is the CLI as a user runs it, no tuning flag (`--rate-start`, `--step-s`, ... at their
defaults), with the workload after `--`:

    .venv/bin/python benchmarks/capacity_repeat.py [--searches 20] [--slots 8 --ttft-ms 200 --tokens 5
        --itl-ms 50] [--target-ms 320] [--out DIR] [-- extra slogate capacity options]
"""

from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from slogate.launch import fault_server


def p95_wait_ms(rate: float, slots: int, service_ms: float, arrivals: int = 400_000, seed: int = 1) -> float:
    """The p95 queue wait (ms) of an M/D/c FCFS queue at `rate` req/s, over `arrivals` Poisson
    arrivals after a tenth as many to reach the steady state."""
    rng = np.random.default_rng(seed)
    warm = arrivals // 10
    times = np.cumsum(rng.exponential(1000 / rate, arrivals + warm))
    free = [0.0] * slots  # when each slot is next free (ms), a heap
    waits = np.empty(arrivals + warm)
    for i, t in enumerate(times):
        start = max(t, free[0])
        waits[i] = start - t
        heapq.heapreplace(free, start + service_ms)
    return float(np.percentile(waits[warm:], 95))


def true_knee(slots: int, service_ms: float, wait_target_ms: float) -> float:
    """The rate (req/s) at which the p95 wait reaches `wait_target_ms`, by bisection below capacity."""
    low, high = 0.01 * slots * 1000 / service_ms, slots * 1000 / service_ms
    for _ in range(20):
        mid = (low + high) / 2
        low, high = (mid, high) if p95_wait_ms(mid, slots, service_ms) <= wait_target_ms else (low, mid)
    return (low + high) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--searches", type=int, default=20)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--ttft-ms", type=float, default=200)
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--target-ms", type=float, default=320, help="p95 TTFT target")
    ap.add_argument("--out", type=Path, default=None)
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]

    out = args.out or Path(tempfile.mkdtemp(prefix="capacity-repeat-"))
    out.mkdir(parents=True, exist_ok=True)
    service_ms = args.ttft_ms + (args.tokens - 1) * args.itl_ms
    knee = true_knee(args.slots, service_ms, args.target_ms - args.ttft_ms)
    capacity = args.slots * 1000 / service_ms
    print(f"M/D/{args.slots}, service {service_ms:g} ms: capacity {capacity:g} req/s, true knee at p95 TTFT <= "
          f"{args.target_ms:g} ms: {knee:.2f} req/s", flush=True)  # fmt: skip
    slo = out / "slo.yaml"
    slo.write_text(f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {args.target_ms:g}}}\n")
    model = f"slots={args.slots},ttft_ms={args.ttft_ms:g},tokens={args.tokens},itl_ms={args.itl_ms:g}"
    proc, url = fault_server.spawn()
    rows = []
    try:
        for i in range(1, args.searches + 1):
            where = out / f"search-{i:02d}"
            started = time.monotonic()
            subprocess.run(
                [
                    sys.executable, "-m", "slogate.cli", "capacity", "--host", url, "--slo-file", str(slo),
                    "--out", str(where), *extra,
                    "--", "--model", model, "--shared-prefix-tokens", "20", "--arrival-process", "poisson",
                ],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            wall = time.monotonic() - started
            data = json.loads((where / "capacity.json").read_text())
            low, high = data.get("interval_rps") or [None, None]
            covered = low is not None and high is not None and low <= knee <= high
            width = (high - low) / knee if low is not None and high is not None else None
            rows.append((low, high, covered, width, wall, data.get("steps_run"), data.get("exit_code")))
            print(f"search {i}: interval [{low}, {high}] covers {covered} width "
                  f"{'-' if width is None else f'{width:.1%}'} {wall:.0f} s {data.get('steps_run')} steps "
                  f"exit {data.get('exit_code')}", flush=True)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    covered = sum(r[2] for r in rows)
    widths = [r[3] for r in rows if r[3] is not None]
    walls = [r[4] for r in rows]
    print(f"\n{len(rows)} searches against `{model}` (true knee {knee:.2f} req/s, p95 TTFT <= {args.target_ms:g} ms): "
          f"covered {covered}/{len(rows)}; width median {np.median(widths):.1%} max {max(widths):.1%} "
          f"({len(widths)} with both ends); wall median {np.median(walls):.0f} s max {max(walls):.0f} s; "
          f"reports in {out}")  # fmt: skip


if __name__ == "__main__":
    main()
