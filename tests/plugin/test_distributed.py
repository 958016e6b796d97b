"""Locust's distributed mode: workers' histograms merged on the master, and no sample lost."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port

from tests.conftest import server_log

MODEL = "ttft_ms=20,tokens=3,itl_ms=2"


def answered(log: Path, at_least: int = 0) -> int:
    """The requests the server answered in full, once that is `at_least` or 10 s on: it logs a request
    after the answer's last bytes, which may be after the client has them."""
    return len(server_log(log, at_least, outcome="ok"))


def run_distributed(
    host: str, tmp: Path, *args: str, kill_one_at: tuple[Path, int] | None = None
) -> tuple[int, dict, str]:
    """Master and two workers; `kill_one_at=(log, n)` kills a worker once the server answered n requests."""
    port, report_dir = free_port(), tmp / "report"
    common = ["--model", MODEL, "--shared-prefix-tokens", "50", "--no-prime-prefixes"]
    master_argv = locust_argv(host, report_dir=report_dir, extra=[
        *common, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--expect-workers", "2", "--only-summary", *args,
    ])  # fmt: skip
    master = subprocess.Popen(master_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker_argv = locust_argv(
        host, report_dir=report_dir, headless=False, extra=[*common, "--worker", "--master-port", str(port)]
    )
    workers = [subprocess.Popen(worker_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    if kill_one_at is not None:
        log, n = kill_one_at
        deadline = time.monotonic() + 120
        while answered(log) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(workers[0].pid, signal.SIGKILL)
    _, err = master.communicate(timeout=240)
    for w in workers:  # the master's verdict is what counts; workers need not linger
        w.terminate()
        w.wait(timeout=30)
    return master.returncode, json.loads((report_dir / "slo-report.json").read_text()), err


def slo_file(tmp: Path) -> str:
    slo = tmp / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 500}\nmin_samples: 10\n")
    return str(slo)


def test_master_merges_two_workers_and_loses_nothing_with_stop_timeout(own_fault_server, tmp_path: Path) -> None:
    url, log = own_fault_server
    # 5 s: the run time counts from the master's start, and on a loaded machine the workers' users may start
    # seconds later (in a 2 s run, 18 requests in their first 0.15 s in one CI run, none in another).
    args = ("-u", "4", "-r", "4", "-t", "5s", "--stop-timeout", "5", "--slo-file", slo_file(tmp_path))
    code, report, err = run_distributed(url, tmp_path, *args)
    assert code == 0, err[-2000:]
    total = report["metrics"]["all"]
    # Every request the server answered is in the merged histograms: none lost at the end.
    assert total["requests"] == answered(log, total["requests"]) >= 10  # min_samples: fewer is inconclusive
    assert total["ttft_ms"]["count"] == total["requests"]
    assert total["ttft_ms"]["p95"] >= 20  # the server holds every first token for 20 ms
    assert report["run"]["mode"] == "master" and report["run"]["workers"] == 2 == report["run"]["workers_complete"]


def test_plain_run_time_keeps_the_workers_last_samples(own_fault_server, tmp_path: Path) -> None:
    url, log = own_fault_server
    _, report, err = run_distributed(url, tmp_path, "-u", "4", "-r", "4", "-t", "2s")
    total = report["metrics"]["all"]["requests"]
    # Without --stop-timeout Locust kills users mid-request at the end: the server may have answered
    # up to one in-flight request per user that no client finished. Nothing else may be missing.
    ok = answered(log, total)
    assert ok - 4 <= total <= ok, err[-2000:]
    assert report["run"]["workers_complete"] == 2


def test_a_killed_worker_is_flagged(own_fault_server, tmp_path: Path) -> None:
    url, log = own_fault_server
    args = ("-u", "4", "-r", "4", "-t", "8s", "--slo-file", slo_file(tmp_path))
    code, report, err = run_distributed(url, tmp_path, *args, kill_one_at=(log, 40))
    assert code == 3, err[-2000:]
    assert report["verdict"] == "inconclusive"
    assert any("1 of 2 workers stopped reporting before the end" in r for r in report["reasons"])
    assert report["run"]["workers"] == 2 and report["run"]["workers_complete"] == 1
    assert report["metrics"]["all"]["requests"] > 20  # what both sent before the kill is kept


def test_processes_on_one_machine_merge_the_same_way(own_fault_server, locust_run, tmp_path: Path) -> None:
    url, log = own_fault_server
    run = locust_run(
        url, "--processes", "2", "-u", "4", "-r", "4", "-t", "4s", "--stop-timeout", "5",
        "--model", MODEL, "--shared-prefix-tokens", "50", "--no-prime-prefixes", "--slo-file", slo_file(tmp_path),
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    total = run.report["metrics"]["all"]
    # As in test_master_merges_two_workers_and_loses_nothing_with_stop_timeout: the run time counts from the
    # master's start, and on a loaded machine the workers' users may send for a fraction of it.
    assert total["requests"] == answered(log, total["requests"]) >= 10  # min_samples: fewer is inconclusive
    assert run.report["run"]["mode"] == "master" and run.report["run"]["workers_complete"] == 2
