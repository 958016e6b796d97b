"""Soak: a long open-loop run with the web UI up, watching the load generator's memory, the web
UI's responsiveness and the final accounting (issue "Hardening", item 10).

Against the fault server (default) or any URL (`--host`, e.g. the vLLM CPU server), one Locust
process runs the open-loop user at `--rate` req/s for `--minutes`, with its web UI and
`--autostart`. Every `--every-s` seconds the script samples the Locust process's RSS and times a
GET of `/slo/status`. At the end it checks that the report's request count equals what the
server answered (fault server only: its log is the ground truth) and prints one Markdown table.

    .venv/bin/python benchmarks/soak.py --minutes 60 --rate 20
    .venv/bin/python benchmarks/soak.py --minutes 10 --rate 1 --host http://127.0.0.1:8011 \
        --locust-args "--shared-prefix-tokens 1000 --max-tokens 16"

Targets: RSS grows < 10 % after the first 5 minutes; every /slo/status answer within 1 s;
report count == server count.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from slogate.launch import fault_server
from slogate.launch.locust_command import locust_argv

MODEL = "ttft_ms=50,tokens=20,itl_ms=10"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed_get(url: str, timeout: float = 10.0) -> float | None:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
    except OSError:
        return None
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--rate", type=float, default=20, help="open-loop requests per second")
    ap.add_argument("--every-s", type=float, default=10)
    ap.add_argument("--host", help="target URL (default: a fault server started here)")
    ap.add_argument("--locust-args", default="", help="more Locust/workload options, one string")
    ap.add_argument("--locustfile", default=None, help="a locustfile path instead of the open-loop one (diagnostics)")
    ap.add_argument("--out", default=None, help="directory for the report and samples (default: a temp dir)")
    a = ap.parse_args()

    out = Path(a.out or tempfile.mkdtemp(prefix="slogate-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    server = None
    log = out / "answered.jsonl"
    host = a.host
    if host is None:
        server, host = fault_server.spawn(log)
    extra = ["--model", MODEL] if a.host is None else []
    web_port = free_port()
    run_s = int(a.minutes * 60)
    argv = locust_argv(
        host,
        locustfile=Path(a.locustfile) if a.locustfile else "open-loop",
        report_dir=out / "report",
        headless=False,
        extra=[
            "--autostart", "--autoquit", "0", "--web-host", "127.0.0.1", "--web-port", str(web_port),
            "-u", "1", "-r", "1",
            "-t", f"{run_s}s", "--arrival-rate", str(a.rate), "--arrival-process", "poisson",
            "--max-in-flight", "1000", "--shared-prefix-tokens", "200", "--loglevel", "WARNING", *extra,
            *shlex.split(a.locust_args),
        ],
    )  # fmt: skip
    samples: list[tuple[float, float, float | None]] = []  # (minute, RSS MB, /slo/status seconds)
    with (out / "locust.log").open("w") as locust_log:
        locust = subprocess.Popen(argv, stdout=locust_log, stderr=subprocess.STDOUT)
        started = time.monotonic()
        try:
            while locust.poll() is None:
                time.sleep(a.every_s)
                if locust.poll() is not None:
                    break
                took = timed_get(f"http://127.0.0.1:{web_port}/slo/status")
                samples.append(((time.monotonic() - started) / 60, rss_mb(locust.pid), took))
            code = locust.wait()
        finally:
            if locust.poll() is None:
                locust.terminate()
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
    (out / "samples.json").write_text(json.dumps(samples))
    report = json.loads((out / "report" / "slo-report.json").read_text())
    total = report["metrics"]["all"]
    # Requests that completed (the report's, warm-up excluded ones included) against the streams the
    # server finished; those still in flight at the stop are the report's `unfinished`.
    counted = total["requests"] + report.get("warmup_excluded_requests", 0)
    rows = [json.loads(line) for line in log.read_text().splitlines()] if a.host is None and log.exists() else None
    answered = None if rows is None else sum(r["outcome"] == "ok" for r in rows)

    after5 = [rss for minute, rss, _ in samples if minute >= 5]
    latencies_ms = [t * 1000 for _, _, t in samples if t is not None]
    nan = float("nan")
    growth = (after5[-1] / after5[0] - 1) * 100 if len(after5) >= 2 else nan
    rss_first, rss_last = (after5[0], after5[-1]) if after5 else (nan, nan)
    median_ms = statistics.median(latencies_ms) if latencies_ms else nan
    max_ms = max(latencies_ms) if latencies_ms else nan
    failed = len(samples) - len(latencies_ms)
    target = "the fault server" if answered is not None else host
    print(f"soak: {a.minutes:g} min at {a.rate:g} req/s against {target}")
    print(f"command: {' '.join(sys.argv)}  (locust exit {code}; out {out})\n")
    print("| figure | value | target |")
    print("|---|---|---|")
    print(f"| RSS at 5 min / at end | {rss_first:.1f} / {rss_last:.1f} MB | growth < 10 % |")
    print(f"| RSS growth after 5 min | {growth:+.1f} % | < 10 % |")
    print(
        f"| /slo/status: samples, median, max, failed | {len(samples)}, {median_ms:.0f} ms, {max_ms:.0f} ms, {failed} "
        "| max < 1 s |"
    )
    print(f"| requests completed: report / server | {counted} / {answered} | equal |")
    print(f"| unfinished at the stop (not failures) | {total['unfinished']} | |")
    print(f"| failures by kind | {total['errors_by_kind'] or 'none'} | |")
    ok = growth < 10 and max_ms < 1000 and not failed and (answered is None or counted == answered)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
