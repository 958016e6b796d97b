"""The highest rate the open-loop client reads exactly, with 1 and with 2 local Locust processes
(issue 31 item 4: "measured on a 2-core machine: the highest exactly-read rate with 2 processes vs 1").

    python benchmarks/process_rate.py [--rates 50,100,200,...] [--seconds 8] [--processes 1,2]
                                      [--client-cpus 0,1] [--server-cpus 2-5] [--tolerance-ms 2]

Against a fast fault server (1 ms to the first token, 3 tokens back to back, no slots: it never
queues), open-loop steps at rising rates (constant arrivals unless --arrival-process poisson), each
one `slogate capacity` step's Locust run: N processes, one open-loop user each at rate / N
(launch/locust_command.py's `Workers`). Per step: the achieved rate, the send lag p99 and the
saturation flag of the gate's self-check (the flag also counts event-loop lag, which a busy shared
machine causes), and the TTFT read by the client against the server's own (its log is the ground
truth: first content written minus the request's arrival, over the same window): client p50 / p99
minus server p50 / p99. A step is read exactly when the achieved rate is within 2 % of the asked
one, the send lag p99 is within the self-check's limit (10 ms) and the client's TTFT p99 exceeds
the server's by at most --tolerance-ms. A series stops at its first step that is not read
exactly after one that was not either (the client saturated). Prints a Markdown table, then the
highest rate read exactly below that per process count, and the ratio.

`--client-cpus` pins the client (Locust and its forked workers) with sched_setaffinity, as
taskset would; `--server-cpus` runs one fault server per CPU there, each pinned to it, sharing
one port (SO_REUSEPORT, benchmarks/scale.py's servers). Without it, one unpinned fault server.
Runs from the checkout or an installed copy (PYTHONPATH); writes process-rate.json to $OUT when
set. Subprocesses run in a temporary folder: a checkout's `slogate/` in the working directory would
hide the installed package's subpackages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from scale import free_port, nearest_rank, start_servers  # noqa: E402
from slogate.launch import fault_server  # noqa: E402
from slogate.launch.locust_command import Workers, locust_argv  # noqa: E402
from slogate.slo.gate.self_check import MAX_LOOP_LAG_P99_MS  # noqa: E402  (its send-lag limit too)

MODEL = "role_first=1,ttft_ms=1,tokens=3,itl_ms=0"
WARMUP_S = 1.0  # not judged (the processes' start): the server's rows of its first second left out too
RATE_TOLERANCE = 0.02  # achieved within 2 % of the asked rate
DEFAULT_RATES = "100,200,300,400,600,800,1000,1200,1600,2000"


def cpu_list(text: str) -> list[int]:
    """`0,1` or `2-5` or `0,2-3` (taskset's list form)."""
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return cpus


def server_rows(logs: list[Path], since: float, until: float) -> list[dict[str, Any]]:
    """The streams that arrived between `since` and `until` and sent content, less the first
    `WARMUP_S` after the first of them (the client's warm-up starts with its first send)."""
    rows = [row for log in logs for row in fault_server.read_log(log)]
    rows = [r for r in rows if since <= r["arrived"] <= until and r["first_content_at"]]
    start = min((r["arrived"] for r in rows), default=since)
    return [r for r in rows if r["arrived"] >= start + WARMUP_S]


def step(url: str, logs: list[Path], processes: int, rate: float, a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One open-loop step at `rate` over `processes` processes: what the client read, and the truth."""
    extra = [*Workers(processes=processes).step_args(rate), "--run-time", f"{a.seconds}s", "--model", MODEL,
             "--shared-prefix-tokens", "20", "--no-prime-prefixes", "--only-summary", "--loglevel", "WARNING",
             "--server-metrics-interval", "0", "--slo-warmup-s", f"{WARMUP_S:g}", "--slo-interval-s", "0",
             "--max-in-flight", "4096", "--arrival-process", a.arrival_process]  # fmt: skip
    if processes > 1:  # not Locust's fixed 5557
        port = str(free_port())
        extra += ["--master-bind-port", port, "--master-port", port]
    client = cpu_list(a.client_cpus) if a.client_cpus else None
    argv = locust_argv(url, locustfile="open-loop", report_dir=out, extra=extra)
    since = time.time()
    pin = (lambda: os.sched_setaffinity(0, client)) if client else None  # as taskset: forked workers inherit it
    subprocess.run(argv, capture_output=True, check=False, preexec_fn=pin)
    time.sleep(0.3)  # the servers' last log lines
    rows = server_rows(logs, since, time.time())
    report = json.loads((out / "slo-report.json").read_text())
    total = report["metrics"]["all"]
    ttft, check = total.get("ttft_ms") or {}, report.get("self_check") or {}
    truth = [(r["first_content_at"] - r["arrived"]) * 1000 for r in rows]
    p50, p99 = nearest_rank(truth, 50), nearest_rank(truth, 99)
    point = {
        "processes": processes,
        "rate": rate,
        "achieved": total.get("requests_per_s"),
        "requests": total.get("requests"),
        "served": len(rows),
        "send_lag_p99_ms": (check.get("send_lag_ms") or {}).get("p99"),
        "saturated": bool(check.get("saturated")),
        "client_cpu": check.get("client_cpu_per_process"),
        "ttft_client_ms": [ttft.get("p50"), ttft.get("p99")],
        "ttft_server_ms": [p50, p99],
    }
    gap = [None if c is None or s is None else c - s for c, s in zip(point["ttft_client_ms"], [p50, p99], strict=True)]
    point["client_minus_server_ms"] = gap
    on_rate = point["achieved"] is not None and abs(point["achieved"] / rate - 1) <= RATE_TOLERANCE
    lag = point["send_lag_p99_ms"]
    on_time = lag is not None and lag <= MAX_LOOP_LAG_P99_MS
    point["exact"] = on_rate and on_time and gap[1] is not None and gap[1] <= a.tolerance_ms
    return point


def highest_exact(points: list[dict[str, Any]]) -> float | None:
    """The highest rate read exactly below the first two rising steps in a row that were not (one
    such step alone, a tail sample of a busy machine, does not end the series)."""
    best, misses = None, 0
    for pt in sorted(points, key=lambda p: p["rate"]):
        misses = 0 if pt["exact"] else misses + 1
        if misses == 2:
            break
        best = pt["rate"] if pt["exact"] else best
    return best


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default=DEFAULT_RATES, help="requests/s per step, rising")
    ap.add_argument("--seconds", type=int, default=8, help="seconds per step (default 8)")
    ap.add_argument("--processes", default="1,2", help="the process counts to compare (default 1,2)")
    ap.add_argument("--client-cpus", help="pin the client here, e.g. 0,1 (the issue's 2-core machine)")
    ap.add_argument("--server-cpus", help="one fault server per CPU here, pinned, e.g. 2-5")
    ap.add_argument("--tolerance-ms", type=float, default=2.0, help="client TTFT p99 - server p99 at most (2)")
    ap.add_argument(
        "--arrival-process",
        default="constant",
        help="constant (default: a rate within 2 %% means the client kept its schedule), or poisson (then the rate "
        "check needs long steps: n requests vary by 1/sqrt(n))",
    )
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="process-rate-"))
    os.chdir(tmp)
    if a.server_cpus:
        port = free_port()
        servers, logs = start_servers(port, cpu_list(a.server_cpus), tmp)
        url = f"http://127.0.0.1:{port}"
    else:
        log = tmp / "server.jsonl"
        server, url = fault_server.spawn(log)
        servers, logs = [server], [log]
    points: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for n in (int(p) for p in a.processes.split(",")):
            misses = 0
            for rate in (float(r) for r in a.rates.split(",")):
                pt = step(url, logs, n, rate, a, tmp / f"p{n}-r{rate:g}")
                points.append(pt)
                print(json.dumps(pt), flush=True)
                misses = 0 if pt["exact"] else misses + 1
                if misses == 2:
                    break
    finally:
        for s in servers:
            s.terminate()
    pinned = f"client on CPUs {a.client_cpus}" if a.client_cpus else "client not pinned"
    where = f"{len(logs)} fault server(s) on CPUs {a.server_cpus}" if a.server_cpus else "one fault server, not pinned"
    print(f"\n{pinned}, {where}; {a.seconds} s a step; {MODEL}; {time.monotonic() - started:.0f} s in all\n")
    print("| processes | asked req/s | achieved | send lag p99 ms | saturated | client CPU/process "
          "| TTFT p50 / p99 client ms | server ms | client - server p99 ms | read exactly |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for pt in points:
        c, s, gap = pt["ttft_client_ms"], pt["ttft_server_ms"], pt["client_minus_server_ms"]
        print(f"| {pt['processes']} | {pt['rate']:g} | {fmt(pt['achieved'], 2)} | {fmt(pt['send_lag_p99_ms'], 2)} "
              f"| {'yes' if pt['saturated'] else 'no'} | {fmt(pt['client_cpu'], 2)} | {fmt(c[0], 2)} / {fmt(c[1], 2)} "
              f"| {fmt(s[0], 2)} / {fmt(s[1], 2)} | {fmt(gap[1], 2)} | {'yes' if pt['exact'] else 'no'} |")  # fmt: skip
    best = {
        n: highest_exact([p for p in points if p["processes"] == n]) for n in sorted({p["processes"] for p in points})
    }
    print()
    for n, rate in best.items():
        print(f"highest rate read exactly, {n} process(es): {fmt(rate, 0)} req/s")
    if best.get(1) and best.get(2):
        print(f"2 processes / 1: {best[2] / best[1]:.2f}x")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "process-rate.json").write_text(json.dumps({"points": points, "highest": best}))


if __name__ == "__main__":
    main()
