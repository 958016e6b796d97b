"""Soak, then kill: a long distributed open-loop run whose master is SIGKILLed, judged from the
journal it leaves (issue 24, item 5).

A fault server (its log of every request it answered is the ground truth), a headless Locust
master with `--processes N` workers at `--rate` req/s in all, for `--minutes`; every `--every-s`
seconds the script samples the RSS of the master and of each worker and the journal's size. At
`--kill-after-min` it SIGKILLs the master (as the OOM killer would), then the workers, runs
`slogate judge DIR` and compares what the journal holds with what the server answered before the
journal's last entry (a worker reports every 3 s: those answered within 3 s of it may be missing).

    .venv/bin/python benchmarks/soak_kill.py --minutes 240 --rate 40 --processes 4   # the issue's 4 hours
    .venv/bin/python benchmarks/soak_kill.py --minutes 20 --rate 40 --processes 4 --out /tmp/soak-kill

Targets: every process's RSS grows < 10 % after the first 5 minutes; no request answered before
the journal's last entry less one worker report (3 s) is missing from the judged run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slogate.launch import fault_server
from slogate.launch.locust_command import locust_argv
from slogate.slo.gate.journal import JOURNAL_NAME
from soak import MODEL, free_port, rss_mb  # benchmarks/, on the path as this script's folder

WORKER_REPORT_S = 3.0  # Locust's worker report interval: what a killed master can miss at most
SLO = "slos:\n  - {name: ttft-p95, metric: ttft, percentile: 95, max_ms: 200}\n  - {metric: error_rate, max: 0.01}\n"


def children(pid: int) -> list[int]:
    """The direct children of `pid` (the workers `--processes` forks), from /proc."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def journal_entries(path: Path) -> list[dict]:
    lines = path.read_text().splitlines() if path.exists() else []
    out = []
    for line in lines[1:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line cut off by the kill
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=240, help="the run's --run-time")
    ap.add_argument("--kill-after-min", type=float, help="SIGKILL the master then (default: 1 minute before the end)")
    ap.add_argument("--rate", type=float, default=40, help="open-loop requests per second, all workers together")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--every-s", type=float, default=30)
    ap.add_argument("--out", default=None, help="directory for the report and samples (default: a temp dir)")
    a = ap.parse_args()
    kill_after_s = 60 * (a.kill_after_min if a.kill_after_min is not None else max(a.minutes - 1, a.minutes / 2))

    out = Path(a.out or tempfile.mkdtemp(prefix="slogate-soak-kill-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "slo.yaml").write_text(SLO)
    log = out / "answered.jsonl"
    server, host = fault_server.spawn(log)
    report_dir = out / "report"
    port = str(free_port())
    argv = locust_argv(
        host, locustfile="open-loop", slo_file=out / "slo.yaml", report_dir=report_dir,
        extra=[
            "--processes", str(a.processes), "--master-bind-port", port, "--master-port", port,
            "-u", str(a.processes), "-r", str(a.processes), "-t", f"{int(a.minutes * 60)}s",
            "--arrival-rate", str(a.rate / a.processes), "--arrival-process", "poisson", "--max-in-flight", "1000",
            "--shared-prefix-tokens", "200", "--model", MODEL, "--loglevel", "WARNING", "--only-summary",
        ],
    )  # fmt: skip
    samples: list[dict] = []
    with (out / "locust.log").open("w") as locust_log:
        master = subprocess.Popen(argv, stdout=locust_log, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        try:
            while master.poll() is None and time.monotonic() - started < kill_after_s:
                time.sleep(min(a.every_s, max(0.1, kill_after_s - (time.monotonic() - started))))
                workers = children(master.pid)
                samples.append(
                    {
                        "minute": round((time.monotonic() - started) / 60, 2),
                        "master_mb": rss_mb(master.pid),
                        "workers_mb": [rss_mb(w) for w in workers],
                        "journal_mb": (report_dir / JOURNAL_NAME).stat().st_size / 1e6
                        if (report_dir / JOURNAL_NAME).exists()
                        else 0.0,
                    }
                )
            killed = master.poll() is None
            os.kill(master.pid, signal.SIGKILL)
            master.wait()
        finally:
            os.killpg(master.pid, signal.SIGKILL)  # the workers, orphaned
            server.terminate()
            server.wait(timeout=10)
    (out / "samples.json").write_text(json.dumps(samples))
    entries = journal_entries(report_dir / JOURNAL_NAME)
    judged_dir = out / "judged"
    judge = subprocess.run(
        [sys.executable, "-m", "slogate.cli", "judge", str(report_dir), "--slo-file", str(out / "slo.yaml"),
         "--slo-report-dir", str(judged_dir), "--slack-notify", ""],
        capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads((judged_dir / "slo-report.json").read_text())
    total = report["metrics"]["all"]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    last_at = entries[-1]["at"] if entries else 0.0
    due = sum(1 for r in rows if r["arrived"] < last_at - WORKER_REPORT_S - 1.0)  # answered well before it
    judged = total["requests"] + report.get("warmup_excluded_requests", 0)

    def growth(first: float, last: float) -> float:
        return (last / first - 1) * 100 if first else float("nan")

    after5 = [s for s in samples if s["minute"] >= 5] or samples
    first, last = after5[0], after5[-1]
    worker_growth = [growth(f, lst) for f, lst in zip(first["workers_mb"], last["workers_mb"], strict=False)]
    print(
        f"soak-kill: {a.minutes:g} min planned at {a.rate:g} req/s, --processes {a.processes}, against the fault server"
    )
    print(f"command: {' '.join(sys.argv)}  (out {out})")
    print(f"master SIGKILLed after {kill_after_s / 60:.1f} min (it was {'running' if killed else 'already gone'})\n")
    print("| figure | value | target |")
    print("|---|---|---|")
    print(
        f"| master RSS at {first['minute']:.0f} min / at the kill | {first['master_mb']:.1f} / "
        f"{last['master_mb']:.1f} MB ({growth(first['master_mb'], last['master_mb']):+.1f} %) | < 10 % |"
    )
    print(
        f"| worker RSS growth after {first['minute']:.0f} min | {', '.join(f'{g:+.1f} %' for g in worker_growth)} "
        "| < 10 % |"
    )
    print(f"| journal: entries, size at the kill | {len(entries)}, {last['journal_mb']:.1f} MB | |")
    stopped = report["run"]["stopped"]
    print(
        f"| `slogate judge DIR`: exit, verdict, run.stopped | {judge.returncode}, {report['verdict']}, "
        f"{stopped['reason']} after {stopped['after_s']:.0f} s | 3 or 1, killed |"
    )
    print(f"| requests: server answered in all / judged from the journal | {len(rows)} / {judged} | |")
    print(f"| answered > 4 s before the journal's last entry / of those missing | {due} / {max(0, due - judged)} | 0 |")
    print(f"| failures by kind | {total['errors_by_kind'] or 'none'} | |")
    ok = judge.returncode in (1, 3) and due <= judged and all(g < 10 for g in worker_growth)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
