"""What the test suite saves per Locust run by forking it (tests/locust_fork.py) instead of starting
`python -m locust` fresh: the same short headless run against the fault server, both ways in turn.

    .venv/bin/python benchmarks/forked_runs.py [--runs 15] [--run-time 1]

Each run is `-u 1 -t <run-time>s` of the chat locustfile against one fault server (one request at a
time, a few ms each). CPU is the run's whole: the fresh process's, or the fork client's plus the
forked child's (which the fork server reaps, so it is read as that server's children's time). Prints
the median wall and CPU seconds per run each way, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slogate.launch import fault_server  # noqa: E402
from slogate.launch.locust_command import locust_argv  # noqa: E402

from tests import locust_fork  # noqa: E402


def children_cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.children_user + times.children_system


def one_run(argv: list[str], server: psutil.Process | None) -> tuple[float, float]:
    """Wall and CPU seconds of one run (`server`: the fork server whose child runs it)."""
    mine, theirs = os.times(), children_cpu(server) if server else 0.0
    began = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    after = os.times()
    cpu = (after.children_user - mine.children_user) + (after.children_system - mine.children_system)
    return wall, cpu + (children_cpu(server) - theirs if server else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--run-time", type=float, default=1.0)
    args = ap.parse_args()
    os.environ.pop("SLOGATE_TEST_FORK", None)
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = fault_server.spawn(Path(tmp) / "requests.jsonl")
        try:
            extra = ["-u", "1", "-t", f"{args.run_time:g}s", "--only-summary", "--model", "ttft_ms=5,tokens=2"]
            fresh = locust_argv(url, report_dir=Path(tmp) / "report", extra=extra)
            forked = locust_fork.forked(fresh)
            server = psutil.Process(locust_fork.server_pid())
            measured: dict[str, list[tuple[float, float]]] = {"fresh": [], "forked": []}
            one_run(forked, server)  # the fork server's first child: its page tables copied once
            for _ in range(args.runs):
                measured["fresh"].append(one_run(fresh, None))
                measured["forked"].append(one_run(forked, server))
        finally:
            proc.terminate()
            proc.wait()
    medians = {way: [statistics.median(x[i] for x in runs) for i in (0, 1)] for way, runs in measured.items()}
    print(f"{args.runs} runs each way, -t {args.run_time:g}s")
    print(f"{'start':<8} {'wall s (median)':>16} {'CPU s (median)':>15}")
    for way, (wall, cpu) in medians.items():
        print(f"{way:<8} {wall:>16.3f} {cpu:>15.3f}")
    (fresh_wall, fresh_cpu), (forked_wall, forked_cpu) = medians["fresh"], medians["forked"]
    print(f"forked / fresh: wall {forked_wall / fresh_wall:.3f}, CPU {forked_cpu / fresh_cpu:.3f}")


if __name__ == "__main__":
    main()
