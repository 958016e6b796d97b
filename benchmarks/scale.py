"""Scaling of the load generator with `--processes N`: aggregate streamed chunks/s, client-added
TTFT p99 and nothing lost (the report's merged request count = what the servers answered), per N.

    python benchmarks/scale.py [--processes 1,2,4,8,12] [--seconds 25] [--users-per-process 64]
                               [--tokens 200] [--ttft-ms 20] [--server-cores K]

Servers: several fault-server processes (`slogate.launch.fault_server.Server`, unchanged) share one
port through SO_REUSEPORT, each pinned to one core of its own and logging every answered request to
a file of its own; the served count is the sum of their logs. Clients: `python -m locust
--processes N` (the closed-loop "chat" user, zero wait, U users per worker process), pinned with
taskset to N+1 cores (N workers + the master) that the servers do not use, or to N cores (the
master, nearly idle, sharing them) where fewer than N would be left for the servers: a fault
server spends about as much CPU per chunk as a client. Each server's CPU use over the run is read
from /proc, so a server that became the bottleneck shows.

Per N: chunks/s (the report's output tokens / its duration, the window from the first send to the
last end, merged over the workers: one content chunk per token here),
requests/s, the ratio to N=1 (target >= 0.8 x N at N=8), TTFT p99 of the client and of the
servers (first content write minus arrival, from their logs), client-added p99 (client p99 minus
the scripted TTFT, and minus the servers' p99), completed requests vs the servers' completed
ones (unfinished apart), and the self-check's saturation flag. Prints a Markdown table last;
writes `scale.json` (`--json`) to $OUT if set.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slogate.launch.locust_command import locust_argv


def serve(port: int, log: str, core: int) -> None:
    """One server process (run as `scale.py --serve PORT LOG CORE`)."""
    from slogate.launch.fault_server import Server

    os.sched_setaffinity(0, {core})

    async def main() -> None:
        server = Server(log)
        srv = await asyncio.start_server(server.handle, "127.0.0.1", port, reuse_port=True, backlog=4096)
        print("READY", flush=True)
        async with srv:
            await srv.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def nearest_rank(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def start_servers(port: int, cores: list[int], tmp: Path) -> tuple[list[subprocess.Popen[str]], list[Path]]:
    procs, logs = [], []
    for c in cores:
        log = tmp / f"server-{c}.jsonl"
        log.touch()
        p = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(log), str(c)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert p.stdout is not None
        if p.stdout.readline().strip() != "READY":
            raise RuntimeError(f"server on core {c} did not start")
        procs.append(p)
        logs.append(log)
    return procs, logs


def one_run(n: int, a: argparse.Namespace, cores: list[int], tmp: Path) -> dict:
    total = len(cores)
    # N workers + the master on N+1 cores while at least N cores stay for the servers (a server
    # spends about as much CPU per chunk as a client); else the master shares the workers' N cores
    client_n = n + 1 if total - (n + 1) >= max(n, a.min_server_cores) else n
    client_cores = cores[: min(client_n, total)]
    server_cores = cores[client_n:][: a.server_cores] if a.server_cores else cores[client_n:]
    if not server_cores:  # a small machine (a dry run): the servers share the last core
        client_cores, server_cores = cores, cores[-1:]
    port = free_port()
    run_dir = tmp / f"n{n}"
    run_dir.mkdir()
    servers, logs = start_servers(port, server_cores, run_dir)
    model = f"role_first=1,ttft_ms={a.ttft_ms:g},tokens={a.tokens},itl_ms={a.itl_ms:g}"
    users = a.users_per_process * n
    extra = ["-u", str(users), "-r", str(users), "-t", f"{a.seconds}s", "--stop-timeout", "30",
             "--processes", str(n), "--model", model, "--shared-prefix-tokens", "20", "--no-prime-prefixes",
             "--only-summary", "--server-metrics-interval", "0", "--slo-warmup-s", "0",
             "--slo-interval-s", "0"]  # fmt: skip
    argv = locust_argv(f"http://127.0.0.1:{port}", locustfile="chat", report_dir=run_dir / "report", extra=extra)
    cpu0 = [cpu_seconds(p.pid) for p in servers]
    t0 = time.monotonic()
    # pinned as `taskset` would (the forked workers inherit it)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=run_dir,
                          preexec_fn=lambda: os.sched_setaffinity(0, client_cores))  # fmt: skip
    # (cwd: not the repo root, whose `slogate/` folder would hide the installed package's subpackages)
    wall = time.monotonic() - t0
    time.sleep(0.5)  # the last log lines
    server_cpu_s = [cpu_seconds(p.pid) - c for p, c in zip(servers, cpu0, strict=True)]
    for p in servers:
        p.terminate()
        p.wait()
    (run_dir / "locust.log").write_text(proc.stdout + proc.stderr)
    rows = [json.loads(line) for log in logs for line in log.read_text().splitlines() if line]
    # Completed on both sides: the server logs every streamed request, `completed` false for one the
    # client closed (an unfinished request at the stop); the client's `requests - failures` completed.
    served = sum(1 for r in rows if r.get("completed", True))
    server_ttft = [(r["first_content_at"] - r["arrived"]) * 1000 for r in rows if r["first_content_at"]]
    report_file = run_dir / "report" / "slo-report.json"
    if not report_file.exists():
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"N={n}: no report (exit {proc.returncode})")
    report = json.loads(report_file.read_text())
    m = report["metrics"]["all"]
    run = report.get("run", {})
    duration = m.get("duration_s") or run.get("duration_s") or a.seconds  # the load's window (first send to last end)
    requests = m.get("requests", 0)
    unfinished = m.get("unfinished", 0)
    ttft_p99 = (m.get("ttft_ms") or {}).get("p99")
    self_check = report.get("self_check") or {}
    server_p99 = nearest_rank(server_ttft, 99)
    return {
        "processes": n,
        "client_cores": client_cores,
        "server_cores": server_cores,
        "users": users,
        "exit_code": proc.returncode,
        "duration_s": duration,
        "output_tokens": m.get("output_tokens"),
        "chunks_per_s": (m.get("output_tokens") or 0) / duration,
        "requests_per_s": requests / duration,
        "requests": requests,
        "failures": m.get("failures"),
        "dropped": m.get("dropped"),
        "workers_complete": f"{run.get('workers_complete')}/{run.get('workers')}",
        "unfinished": unfinished,
        "completed": requests - (m.get("failures") or 0),
        "served": served,
        "ttft_p50_ms": (m.get("ttft_ms") or {}).get("p50"),
        "ttft_p99_ms": ttft_p99,
        "server_ttft_p99_ms": server_p99,
        "client_added_p99_vs_script_ms": None if ttft_p99 is None else ttft_p99 - a.ttft_ms,
        "client_added_p99_vs_server_ms": None if ttft_p99 is None or server_p99 is None else ttft_p99 - server_p99,
        "saturated": bool(report.get("saturated") or self_check.get("saturated")),
        "client_cpu_per_process": self_check.get("client_cpu_per_process"),
        "loop_lag_p99_ms": (self_check.get("loop_lag_ms") or {}).get("p99"),
        "self_check": self_check,
        "wall_s": round(wall, 1),
        # each server's CPU seconds over the run divided by the load's duration: its busy share
        # while the load ran (start-up and stop of Locust add a little idle time to the seconds)
        "server_cpu_per_core": [round(c / duration, 3) for c in server_cpu_s],
        "server_cpu_us_per_chunk": 1e6 * sum(server_cpu_s) / max(1, m.get("output_tokens") or 0),
    }


def fmt(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def table(results: list[dict]) -> str:
    base = results[0]["chunks_per_s"] if results and results[0]["processes"] == 1 else None
    out = ["| N | client / server cores | users | chunks/s | req/s | x N=1 (target 0.8 x N) | TTFT p99 client / server "
           "| client-added p99 (vs script / vs server) | completed = served | unfinished | failures | saturated "
           "| client CPU / process | server CPU max |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        ratio = None if not base else r["chunks_per_s"] / base
        ratio_s = "-" if ratio is None else f"{ratio:.2f}x ({ratio / r['processes']:.2f} x N)"
        same = "=" if r["completed"] == r["served"] else "**differs from**"
        out.append(
            f"| {r['processes']} | {len(r['client_cores'])} / {len(r['server_cores'])} | {r['users']} "
            f"| {fmt(r['chunks_per_s'])} | {fmt(r['requests_per_s'], ',.1f')} | {ratio_s} "
            f"| {fmt(r['ttft_p99_ms'], ',.1f')} / {fmt(r['server_ttft_p99_ms'], ',.1f')} ms "
            f"| {fmt(r['client_added_p99_vs_script_ms'], ',.1f')} "
            f"/ {fmt(r['client_added_p99_vs_server_ms'], ',.1f')} ms "
            f"| {r['completed']:,} {same} {r['served']:,} | {r['unfinished']} | {r['failures']} "
            f"| {'yes' if r['saturated'] else 'no'} | {fmt(r['client_cpu_per_process'], '.0%')} "
            f"| {max(r['server_cpu_per_core']):.0%} |"
        )
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", default="1,2,4,8,12")
    ap.add_argument("--seconds", type=int, default=25)
    ap.add_argument("--users-per-process", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--ttft-ms", type=float, default=20)
    ap.add_argument("--itl-ms", type=float, default=0)
    ap.add_argument("--server-cores", type=int, default=0, help="server processes at most (0: one per core left)")
    ap.add_argument("--min-server-cores", type=int, default=3)
    ap.add_argument("--json", default="scale.json", help="file name under $OUT")
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    tmp = Path(tempfile.mkdtemp(prefix="slogate-scale-"))
    results: list[dict] = []
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cores": len(cores),
            "python": sys.version.split()[0], "args": vars(a), "work_dir": str(tmp)}  # fmt: skip
    for n in (int(x) for x in a.processes.split(",")):
        r = one_run(n, a, cores, tmp)
        results.append(r)
        print(json.dumps(r), flush=True)
        if os.environ.get("OUT"):  # after every N: a run cut short keeps what it measured
            out = Path(os.environ["OUT"])
            out.mkdir(parents=True, exist_ok=True)
            (out / a.json).write_text(json.dumps({**meta, "results": results}, indent=1))
    print(json.dumps(meta))
    print(table(results))


if __name__ == "__main__":
    main()
