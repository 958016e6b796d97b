"""No load nobody watches: the forked workers of a SIGKILLed master stop within 3 s (their parent
pid changes), a worker started on its own once its master's heartbeats have been silent for
`MASTER_SILENCE_S`, and a SIGKILLed `slogate run` takes its Locust master down with it (a
parent-death signal). The fault server's log of what it received (each request's arrival time) is
the ground truth."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from slogate.launch.fault_server import read_log
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port
from slogate.slo.plugin.watchers import MASTER_SILENCE_S

LOAD = ["--model", "ttft_ms=20,tokens=2", "--shared-prefix-tokens", "20", "--no-prime-prefixes"]
AFTER_KILL_S = 3.0  # nothing may reach the server later than this after the kill


def arrivals(log: Path) -> list[float]:
    return [row["arrived"] for row in read_log(log)]


def poll(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def gone(pid: int) -> bool:
    """No such process any more, or only its exit status left to read."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def settled(log: Path) -> list[float]:
    """The log once it stops growing (the server logs a request when its connection is done)."""
    seen = [-1]

    def still() -> bool:
        n = len(arrivals(log))
        same, seen[0] = n == seen[0], n
        return same

    poll(lambda: time.sleep(0.3) or still(), 10)
    return arrivals(log)


@contextlib.contextmanager
def session(argv: list[str], cwd: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`argv` in a session of its own, whatever is left of which is killed at the end."""
    with open(cwd / "out.log", "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def assert_nothing_late(log: Path, killed_at: float, cwd: Path, after_s: float = AFTER_KILL_S) -> None:
    times = settled(log)
    before = [t for t in times if killed_at - 1.5 < t <= killed_at]
    late = [round(t - killed_at, 2) for t in times if t > killed_at + after_s]
    assert before, "no load was going when the process was killed: the test shows nothing"
    assert late == [], (
        f"requests reached the server this long after the kill: {late}\n" + (cwd / "out.log").read_text()[-3000:]
    )


def test_the_workers_of_a_killed_master_stop_within_3_s(own_fault_server, tmp_path: Path) -> None:
    url, log = own_fault_server
    port = str(free_port())
    argv = locust_argv(url, report_dir=tmp_path / "report", extra=[
        *LOAD, "--processes", "2", "-u", "4", "-r", "4", "-t", "60s", "--master-bind-port", port,
        "--master-port", port, "--only-summary",
    ])  # fmt: skip
    with session(argv, tmp_path) as master:
        assert poll(lambda: len(arrivals(log)) >= 40, 60), (tmp_path / "out.log").read_text()[-3000:]
        workers = psutil.Process(master.pid).children()
        assert len(workers) == 2
        killed_at = time.time()
        master.send_signal(signal.SIGKILL)
        master.wait()
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert alive == [], "the orphaned workers still run 15 s after their master's death"
        assert_nothing_late(log, killed_at, tmp_path)
    assert "its master process is gone: this worker stops its load" in (tmp_path / "out.log").read_text()


def test_a_worker_of_its_own_stops_once_its_masters_heartbeats_are_silent(own_fault_server, tmp_path: Path) -> None:
    """A `--worker` started apart from its master (as on another machine) has no parent to watch:
    the heartbeats' silence tells it, after `MASTER_SILENCE_S` (plus a check and a stop)."""
    url, log = own_fault_server
    port = str(free_port())
    (tmp_path / "w").mkdir()
    master_argv = locust_argv(url, report_dir=tmp_path / "report", extra=[
        *LOAD, "--master", "--expect-workers", "1", "-u", "4", "-r", "4", "-t", "60s", "--master-bind-port", port,
        "--only-summary",
    ])  # fmt: skip
    worker_argv = locust_argv(url, report_dir=tmp_path / "w", headless=False, extra=[
        *LOAD, "--worker", "--master-port", port,
    ])  # fmt: skip
    with session(master_argv, tmp_path) as master, session(worker_argv, tmp_path / "w") as worker:
        assert poll(lambda: len(arrivals(log)) >= 40, 60), (tmp_path / "out.log").read_text()[-3000:]
        killed_at = time.time()
        master.send_signal(signal.SIGKILL)
        master.wait()
        assert worker.wait(timeout=MASTER_SILENCE_S + 15) == 3
        # 3 s for a check, the stop and the requests' way to the server, which a loaded machine slows: still far
        # below Locust's own 60 s, what this worker would otherwise wait.
        assert_nothing_late(log, killed_at, tmp_path / "w", after_s=MASTER_SILENCE_S + 3)
    assert "the master has not answered for" in (tmp_path / "w" / "out.log").read_text()


def test_a_killed_slogate_run_takes_its_locust_down_with_it(own_fault_server, tmp_path: Path) -> None:
    url, log = own_fault_server
    report_dir = tmp_path / "report"
    argv = [str(Path(sys.executable).parent / "slogate"), "run", "--host", url, "--report-dir", str(report_dir), "--",
            *LOAD, "-u", "2", "-r", "2", "-t", "60s"]  # fmt: skip
    with session(argv, tmp_path) as slogate:
        assert poll(lambda: len(arrivals(log)) >= 20, 60), (tmp_path / "out.log").read_text()[-3000:]
        (locust,) = psutil.Process(slogate.pid).children()
        killed_at = time.time()
        slogate.send_signal(signal.SIGKILL)
        slogate.wait()
        locust.wait(timeout=30)  # SIGTERM: it stops the load and writes its report (not a child here: no code)
        assert_nothing_late(log, killed_at, tmp_path)
    report = json.loads((report_dir / "slo-report.json").read_text())
    assert report["run"]["stopped"]["reason"] == "interrupted" and report["run"]["stopped"]["signal"] == "SIGTERM"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a parent-death signal is Linux's")
def test_a_child_started_to_die_with_its_parent_does_when_the_parent_is_killed() -> None:
    parent = (
        "import os, signal, subprocess, sys\n"
        "from slogate.launch.runner import dies_with_this_process\n"
        "child = subprocess.Popen(['sleep', '60'], preexec_fn=dies_with_this_process())\n"
        "print(child.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=30)
    child = int(run.stdout)
    assert poll(lambda: gone(child), 5)
