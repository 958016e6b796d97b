"""Trace replay timing fidelity: how late does slogate send a trace's requests, on one core?

Generates sample traces (locustfiles/load/trace.py's generator: shared prefixes, multi-turn chains,
Poisson arrivals) at each rate, replays each with the trace locustfile pinned to CPU 0 against the
fault server pinned to CPU 1 (answers at once, 5 tokens), and prints the send lag (actual send
minus the trace's scheduled time) p50/p99 from the report's self-check.

    .venv/bin/python benchmarks/trace_timing.py [--rates 50,200] [--seconds 10] [--block-tokens 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from slogate.launch import fault_server
from slogate.launch.locust_command import locust_argv
from slogate.locustfiles.load import trace


def replay(host: str, path: Path, block_tokens: int, report_dir: Path) -> dict:
    """One replay of the trace at `path`, pinned to CPU 0; the report's self_check section."""
    extra = ["-u", "1", "--trace", str(path), "--trace-block-tokens", str(block_tokens), "--max-in-flight", "256"]
    argv = locust_argv(host, locustfile="trace", report_dir=report_dir, extra=["--only-summary", *extra])
    subprocess.run(["taskset", "-c", "0", *argv], check=True, capture_output=True, timeout=600)
    report = json.loads((report_dir / "slo-report.json").read_text())
    return {"requests": report["metrics"]["all"]["requests"], **report["self_check"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,200", help="requests per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="trace length")
    parser.add_argument("--block-tokens", type=int, default=16, help="block size (the fault server counts words)")
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 CPUs: the client on one, the server on the other")
    proc, host = fault_server.spawn(prefix=["taskset", "-c", "1"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rate in (float(r) for r in args.rates.split(",")):
                path = Path(tmp) / f"trace-{rate:g}.jsonl"
                lines = trace.sample_trace_lines(round(rate * args.seconds), rate, block_tokens=args.block_tokens)
                path.write_text("\n".join(lines) + "\n")
                result = replay(host, path, args.block_tokens, Path(tmp) / f"report-{rate:g}")
                lag = result["send_lag_ms"]
                print(
                    f"{rate:g} req/s: {result['requests']} requests, send lag p50 {lag['p50']:.3f} ms,"
                    f" p99 {lag['p99']:.3f} ms, max {lag['max']:.3f} ms; client CPU {result['client_cpu_per_process']}"
                    f" (saturated: {result['saturated']})"
                )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
