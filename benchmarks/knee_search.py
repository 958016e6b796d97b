"""Search cost: `slogate capacity`'s knee search against a server of known capacity, versus a
plain sweep.

The fault server's `slots=N` serves at most N streams at once, each holding its slot for
ttft_ms + (tokens - 1) x itl_ms, so its capacity is N / that time (`--slots 4 --ttft-ms 100
--tokens 5 --itl-ms 25`: 20 req/s). Arrivals are constant (no queue below the capacity), the SLO
is p95 TTFT <= `--target-ms`, a little above the unqueued TTFT, so the knee at the SLO is the
server's capacity. Ways to find it, each step `--warmup-s` + at most `--step-s`:

  search        slogate's search (doubling, then bisection to `--precision`), each step ended as
                soon as its verdict is certain (--slo-stop-when-decided), failing ones also by
                --slo-abort-on-fail: `slogate capacity` as it runs by default;
  no early stop the same search with every step run to its end but for the abort
                (`slogate capacity --no-early-stop`): what the early stop saves;
and with `--all` also
  same rates    the rates the first search visited, each run to its end (no abort, no early stop);
  grid          a plain sweep from `--rate-start` up in steps of `--precision` (x 1.1) until a
                rate fails, each run to its end: the same resolution without a search.

    .venv/bin/python benchmarks/knee_search.py [--slots 4 --ttft-ms 100 --tokens 5 --itl-ms 25] \
        [--rate-start 6] [--warmup-s 1] [--step-s 4] [--precision 0.1] [--all] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from slogate.launch import fault_server
from slogate.launch.capacity import locust_step
from slogate.launch.capacity_report import stop_note
from slogate.launch.knee import RunStep, SearchSettings, search
from slogate.launch.knee_batch import STOP_WHEN_DECIDED


def sweep(
    run_step: RunStep, rates: list[float], step_s: float, out: Path, stop_at_fail: bool
) -> list[tuple[float, str]]:
    verdicts = []
    for i, rate in enumerate(rates, 1):
        verdict = str(run_step(rate, step_s, out / f"step-{i:02d}-{rate:g}rps").verdict)
        verdicts.append((rate, verdict))
        print(f"  {rate:g} req/s: {verdict}", flush=True)
        if stop_at_fail and verdict == "fail":
            break
    return verdicts


def knee_of(verdicts: list[tuple[float, str]]) -> float | None:
    """The highest passing rate below the lowest failing one."""
    failing = min((r for r, v in verdicts if v == "fail"), default=float("inf"))
    return max((r for r, v in verdicts if v == "pass" and r < failing), default=None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--ttft-ms", type=float, default=100)
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--itl-ms", type=float, default=25)
    ap.add_argument("--target-ms", type=float, default=0, help="p95 TTFT target (default 1.6 x ttft-ms)")
    ap.add_argument("--rate-start", type=float, default=6)
    ap.add_argument("--precision", type=float, default=0.1)
    ap.add_argument("--warmup-s", type=float, default=1)
    ap.add_argument("--step-s", type=float, default=4)
    ap.add_argument("--all", action="store_true", help="also the same rates run to their end, and the grid")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="knee-search-"))
    out.mkdir(parents=True, exist_ok=True)
    true_rps = args.slots * 1000 / (args.ttft_ms + (args.tokens - 1) * args.itl_ms)
    target = args.target_ms or 1.6 * args.ttft_ms
    slo = out / "slo.yaml"
    slo.write_text(f"slos:\n  - {{metric: ttft, percentile: 95, max_ms: {target:g}}}\nmin_samples: 10\n")
    model = f"slots={args.slots},ttft_ms={args.ttft_ms:g},tokens={args.tokens},itl_ms={args.itl_ms:g}"
    workload = ["--model", model, "--shared-prefix-tokens", "20", "--arrival-process", "constant"]
    proc, url = fault_server.spawn()
    rows: list[str] = []

    def err(knee: float | None) -> str:
        return "-" if knee is None else f"{(knee - true_rps) / true_rps:+.1%}"

    try:

        def runner(abort: bool, early: bool) -> RunStep:
            return locust_step(
                url,
                slo_file=slo,
                warmup_s=args.warmup_s,
                locust_args=workload,
                abort_on_fail=abort,
                stop_option=STOP_WHEN_DECIDED if early else None,
            )

        settings = SearchSettings(args.rate_start, args.precision, args.step_s, max_steps=20)
        print(f"true capacity {true_rps:g} req/s", flush=True)
        searches = {}
        for name, early in (("search (early stop, abort)", True), ("search, no early stop (abort only)", False)):
            print(f"{name}:", flush=True)
            t0 = time.monotonic()
            result = search(runner(True, early), settings, out / ("search" if early else "search-no-early-stop"))
            wall = time.monotonic() - t0
            searches[early] = (result, wall)
            for s in result.steps:
                print(f"  {s.rate_rps:g} req/s: {s.verdict}{stop_note(s)} {s.wall_s:.1f} s", flush=True)
            cap = result.capacity_rps
            rows.append(
                f"| {name} | {cap} (first failing {result.first_failing_rps}) | {err(cap)} | {len(result.steps)} | "
                f"{wall:.1f} |"
            )
        if args.all:
            first = searches[True][0]
            print("same rates, run to the end:", flush=True)
            t0 = time.monotonic()
            same = sweep(runner(False, False), [s.rate_rps for s in first.steps], args.step_s, out / "same", False)
            rows.append(
                f"| same rates, run to the end | {knee_of(same)} | {err(knee_of(same))} | {len(same)} | "
                f"{time.monotonic() - t0:.1f} |"
            )
            print("grid:", flush=True)
            grid_rates, rate = [], args.rate_start
            while rate <= 4 * true_rps:
                grid_rates.append(round(rate, 3))
                rate *= 1 + args.precision
            t0 = time.monotonic()
            grid = sweep(runner(False, False), grid_rates, args.step_s, out / "grid", True)
            rows.append(
                f"| grid x{1 + args.precision:g} until a fail | {knee_of(grid)} | {err(knee_of(grid))} | {len(grid)} | "
                f"{time.monotonic() - t0:.1f} |"
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    print(f"\nfault server `{model}`: true capacity {true_rps:g} req/s; SLO p95 TTFT <= {target:g} ms; "
          f"steps of {args.warmup_s:g} + {args.step_s:g} s; reports in {out}\n")  # fmt: skip
    print("| method | knee found (req/s) | error vs true | steps | wall time (s) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    (early, early_s), (_, plain_s) = searches[True], searches[False]
    print(f"\nwall time with early stops / without: {early_s / plain_s:.2f}")


if __name__ == "__main__":
    main()
