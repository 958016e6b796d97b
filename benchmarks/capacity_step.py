"""How often one capacity step at a fixed rate is decided pass, fail or left undecided: the step's
error rate, where the search's coverage comes from. Each seed runs a `SimulatedStep` (the simulated
queue of benchmarks/capacity_repeat.py, the search's early stop) at the rate, run again whole while
undecided, up to `--runs` runs pooled, as a search's step on adaptive batches:

    .venv/bin/python benchmarks/capacity_step.py --rates 8,12,14,16 [--lognormal 0.5 --target-ms 600]
        [--seeds 200] [--runs 3] [--slots 8 --ttft-ms 200 --tokens 5 --itl-ms 50]

Above the knee a pass is wrong (at most 1 - confidence of them should be); below it, a pass is the
decision the search needs, and an undecided step costs it time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from capacity_repeat import SimulatedStep
from queue_model import Shape, add_shape_arguments, true_knee
from slogate.launch.knee_batch import AUTO, steps_stop_early
from slogate.launch.knee_interval import StepJudge
from slogate.slo.gate.spec import parse_spec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", required=True, help="comma-separated req/s")
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="runs pooled at most (a search's step: 3)")
    add_shape_arguments(ap)
    args = ap.parse_args()
    shape = Shape.of(args)
    spec = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": args.target_ms}]})
    judge, early = StepJudge(spec, batch_s=AUTO), (steps_stop_early(True, AUTO, knee=True), True)
    knee = true_knee(shape, args.target_ms)
    print(f"{shape.model()}: true knee at p95 TTFT <= {args.target_ms:g} ms {knee:.2f} req/s")
    for rate in (float(r) for r in args.rates.split(",")):
        first = {"pass": 0, "fail": 0, "undecided": 0}
        pooled = dict(first)
        for seed in range(args.seeds):
            step = SimulatedStep(shape, spec, 5.0, early, seed=50_000 + seed)
            runs = [step(rate, 30.0, Path("/nonexistent"))]
            decision = judge.decide(runs[0])
            first[decision] += 1
            while decision == "undecided" and len(runs) < args.runs:
                run = step(rate, 30.0, Path("/nonexistent"), early_stop=False)
                decision = judge.decide(run, runs)
                runs.append(run)
            pooled[decision] += 1
        print(f"{rate:g} req/s, {args.seeds} seeds: first run {first}; up to {args.runs} runs pooled {pooled}")


if __name__ == "__main__":
    main()
