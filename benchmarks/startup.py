"""What every Locust process of a run pays before its first request: importing Locust and slogate's
locustfile, in a fresh interpreter (a run, each worker, each capacity step starts one).

    .venv/bin/python benchmarks/startup.py [--runs 15] [CHECKOUT ...]

Each CHECKOUT (default: this one) is a slogate checkout whose `locustfiles/chat.py` is imported by
this venv's Python with the checkout first on the path (its `slo/`, `launch/`, `locustfiles/` as
the `slogate` package, as `pip install -e` lays them out); the checkouts are timed in turn, run
after run, so that a noisy machine shifts them alike. Prints the median CPU (user + system) and
wall seconds per checkout, and their ratio to the first.
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

ROOT = Path(__file__).resolve().parent.parent
IMPORT = "import locust, runpy, sys; runpy.run_path(sys.argv[1])"


def package_of(checkout: Path, into: Path) -> Path:
    """A folder holding `slogate/` laid out as installed, from `checkout`'s sources."""
    pkg = into / "slogate"
    pkg.mkdir(parents=True)
    for entry in (checkout / "slogate").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for name in ("slo", "launch", "locustfiles"):
        (pkg / name).symlink_to(checkout / name)
    return into


def one_start(path: Path, checkout: Path) -> tuple[float, float]:
    """CPU and wall seconds of one fresh interpreter importing the checkout's chat locustfile."""
    env = {**os.environ, "PYTHONPATH": str(path)}
    before = os.times()
    began = time.perf_counter()
    # From `path`: a checkout as the cwd would put its own slogate/ (the CLI alone) first on the path.
    argv = [sys.executable, "-c", IMPORT, str(checkout / "locustfiles" / "chat.py")]
    subprocess.run(argv, env=env, cwd=path, check=True)
    wall = time.perf_counter() - began
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkouts", nargs="*", type=Path, default=[ROOT])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = [package_of(c.resolve(), Path(tmp) / str(i)) for i, c in enumerate(args.checkouts)]
        times: list[list[tuple[float, float]]] = [[] for _ in paths]
        for _ in range(args.runs):
            for i, (path, checkout) in enumerate(zip(paths, args.checkouts, strict=True)):
                times[i].append(one_start(path, checkout.resolve()))
    first_cpu = statistics.median(c for c, _ in times[0])
    print(f"{'checkout':<40} {'CPU s (median)':>15} {'wall s (median)':>16} {'CPU / first':>12}")
    for checkout, measured in zip(args.checkouts, times, strict=True):
        cpu, wall = statistics.median(c for c, _ in measured), statistics.median(w for _, w in measured)
        print(f"{checkout!s:<40} {cpu:>15.3f} {wall:>16.3f} {cpu / first_cpu:>12.3f}")


if __name__ == "__main__":
    main()
