"""How long a SIGKILLed master's workers keep loading the server (issue 28): a `--processes 2`
master and a `--worker` started on its own, each killed mid-run; the fault server's log of
arrivals is the ground truth. Prints, per run, the requests that arrived after the kill and the
last one's delay.

    .venv/bin/python benchmarks/orphans.py --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from slogate.launch import fault_server as fault
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port

LOAD = ["--model", "ttft_ms=20,tokens=2", "--shared-prefix-tokens", "20", "--no-prime-prefixes", "-t", "60s"]


def arrivals(log: Path) -> list[float]:
    return [row["arrived"] for row in fault.read_log(log)]


def wait_for(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)


@contextlib.contextmanager
def started(argv: list[str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def one_run(kind: str) -> tuple[int, float]:
    tmp = Path(tempfile.mkdtemp())
    server, url = fault.spawn(tmp / "answered.jsonl")
    port = str(free_port())
    load = [*LOAD, "-u", "4", "-r", "4", "--master-bind-port", port, "--only-summary"]
    try:
        if kind == "processes":
            master_argv = locust_argv(
                url, report_dir=tmp / "r", extra=[*load, "--processes", "2", "--master-port", port]
            )
            workers: list[list[str]] = []
        else:
            master_argv = locust_argv(url, report_dir=tmp / "r", extra=[*load, "--master", "--expect-workers", "1"])
            workers = [
                locust_argv(url, report_dir=tmp / "w", headless=False, extra=[*LOAD, "--worker", "--master-port", port])
            ]
        with contextlib.ExitStack() as stack:
            master = stack.enter_context(started(master_argv, tmp))
            for argv in workers:
                stack.enter_context(started(argv, tmp))
            wait_for(lambda: len(arrivals(tmp / "answered.jsonl")) >= 40, 60)
            killed = time.time()
            master.send_signal(signal.SIGKILL)
            time.sleep(15)  # long after any worker should have stopped
        after = [t - killed for t in arrivals(tmp / "answered.jsonl") if t > killed]
        return len(after), max(after, default=0.0)
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for kind in ("processes", "worker"):
        for i in range(args.runs):
            n, last = one_run(kind)
            print(f"{kind} run {i}: {n} requests arrived after the kill, the last {last:.2f} s after", flush=True)


if __name__ == "__main__":
    main()
