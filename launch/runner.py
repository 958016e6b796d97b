"""Run a gated Locust load and read its typed report, against a URL (`run_locust`) or against a
profile launched for it and stopped after (`run_profile`). `slogate compare`, `slogate capacity`
and the GPU sweep all go through here, so "start, load, stop, read the report" is written once.
`work_for_master` is the other side of a run spread over machines (`slogate worker`).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from slogate.launch import launcher
from slogate.launch.knee import NoReport
from slogate.launch.locust_command import locust_argv, worker_argv
from slogate.launch.profile import Profile
from slogate.slo.gate import exitcodes
from slogate.slo.gate.report import Report, ReportError

LOG_NAME = "locust.log"
LOCAL_HOST = "127.0.0.1"  # where launched profiles listen
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def dies_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent SIGTERM when this process dies, however it dies
    (SIGKILL included): a Locust run nobody waits for any longer must not go on loading the server.
    SIGTERM, not SIGKILL: the run stops its load and writes its report (inconclusive). None where
    the kernel has no such thing (not Linux): there the child outlives a killed parent."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:  # runs in the child, between fork and exec
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler (`slogate demo`'s), until exec
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the line above: no signal will come
            os._exit(1)  # nothing started yet, no load sent

    return arm


def read_report(report_dir: Path) -> Report:
    """The report a run wrote in `report_dir`; `NoReport` when there is none to read."""
    path = report_dir / "slo-report.json"
    try:
        return Report.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, ReportError):
        log = report_dir / LOG_NAME
        if not log.exists():
            raise NoReport(f"the Locust run wrote no report in {report_dir} (its output is above)") from None
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        said = f": {lines[-1].strip()}" if lines else ""
        raise NoReport(f"the Locust run wrote no report{said} (see {log})") from None


def run_in_foreground(argv: Sequence[str]) -> int:
    """Run Locust (`slogate run`, `slogate demo`) as the user's foreground job: SIGINT (Ctrl-C) and
    SIGTERM reach it once each, forwarded from here, and this process waits for it to judge and
    write its report, whatever it takes (a first signal stops the load and judges it inconclusive;
    a second ends it at once). The child has a session of its own, so a terminal's Ctrl-C is not
    delivered to it twice (once by the terminal, once forwarded); it is sent SIGTERM should this
    process die without forwarding anything (`dies_with_this_process`). Its exit code, or 128 + the
    signal that killed it, as shells report it."""
    child = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=dies_with_this_process())

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def run_locust(
    host: str,
    report_dir: Path,
    *,
    locustfile: str | Path = "chat",
    config: str | Path | None = None,
    slo_file: str | Path | None = None,
    extra: Sequence[str] = (),
    to_log: bool = True,
) -> Report:
    """One headless Locust run against `host` (`locust_argv` builds it), its report read back.
    Its output goes to `locust.log` in `report_dir` (or, `to_log` false, to this process's)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    argv = locust_argv(
        host, locustfile=locustfile, config=config, slo_file=slo_file, report_dir=report_dir, extra=extra
    )
    if to_log:
        with open(report_dir / LOG_NAME, "wb") as log:
            subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=dies_with_this_process())
    else:
        subprocess.call(argv, preexec_fn=dies_with_this_process())
    return read_report(report_dir)


@contextlib.contextmanager
def launched(
    profile: Profile | str,
    port: int,
    *,
    install: bool = True,
    validate: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> Iterator[launcher.Launched]:
    """A profile's server, healthy on 127.0.0.1:`port` for the block and stopped after it (errors
    as `launcher.start_profile` raises them; `validate` false: the caller checked the profile)."""
    started = launcher.start_profile(
        profile, LOCAL_HOST, port, install=install, validate=validate, on_progress=on_progress
    )
    try:
        yield started
    finally:
        started.server.stop()


def run_profile(
    profile: Profile,
    port: int,
    report_dir: Path,
    *,
    config: str | Path | None = None,
    slo_file: str | Path | None = None,
    extra: Sequence[str] = (),
    on_progress: Callable[[str], None] | None = None,
) -> Report:
    """Launch `profile`, run the gated load against it, stop it: the run's typed report."""
    with launched(profile, port, on_progress=on_progress) as started:
        return run_locust(started.server.url, report_dir, config=config, slo_file=slo_file, extra=extra, to_log=False)


POLL_S = 0.2  # how often a worker looks for its master
MASTER_GONE_S = 60.0  # a master writes its report after its workers quit: at most this long


def listening(host: str, port: int) -> bool:
    """Whether something accepts connections at `host`:`port` (a Locust master, for a worker)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def work_for_master(
    master_host: str,
    master_port: int,
    *,
    locustfile: str | Path = "open-loop",
    extra: Sequence[str] = (),
    idle_s: float = 300.0,
    say: Callable[[str], None] = print,
) -> int:
    """`slogate worker`: a Locust worker for each run of the master at `master_host`:`master_port`
    (each step of `slogate capacity --expect-workers`), until SIGTERM or SIGINT, or until no master
    has listened there for `idle_s`. Locust's workers exit when their master's run ends, so one is
    started again after each run, once that master is gone (a worker that met the master on its
    way out would never be counted by the next one). A line per run ended (`say`). Exit code: 0
    after at least one run; SETUP_FAILED when no master came, or the Locust worker ended on its own
    (a bad option, a locustfile that does not load: its output says why)."""
    argv = worker_argv(master_host, master_port, locustfile=locustfile, extra=extra)
    stop: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: object) -> None:
        stop.append(signum)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    where, runs, seen = f"{master_host}:{master_port}", 0, time.monotonic()
    say(f"slogate worker: for the master at {where} (stops after {idle_s:g} s without one)")
    try:
        while not stop:
            child = subprocess.Popen(argv, start_new_session=True, preexec_fn=dies_with_this_process())
            started, met = time.monotonic(), False
            while child.poll() is None:
                if listening(master_host, master_port):
                    seen, met = time.monotonic(), True
                elif time.monotonic() - seen > idle_s and not stop:
                    say(f"slogate worker: no master at {where} for {idle_s:g} s: done after {runs} run(s)")
                    child.terminate()
                    child.wait()
                    return exitcodes.PASS if runs else exitcodes.SETUP_FAILED
                time.sleep(POLL_S)
            code, took = child.returncode, time.monotonic() - started
            if stop:
                return exitcodes.PASS
            gone = _wait_until(lambda: not listening(master_host, master_port), MASTER_GONE_S)
            if not met or not gone:
                say(f"slogate worker: the Locust worker ended on its own (exit {code}) while the master "
                    f"{'goes on' if met else 'never answered'}: see its output above")  # fmt: skip
                return exitcodes.SETUP_FAILED
            runs, seen = runs + 1, time.monotonic()
            say(f"slogate worker: run {runs} ended after {took:.1f} s (Locust exit {code}); waiting for the next")
        return exitcodes.PASS
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True
