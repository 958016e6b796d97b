"""`slogate worker`: the other side of a run spread over machines, a Locust worker for each run of
a master (each step of `slogate capacity --expect-workers`), started again after each, until a
signal or until no master has listened for the idle timeout (docs/capacity-workers.md)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from slogate.launch.locust_command import worker_argv
from slogate.launch.runner import Forwarder, dies_with_this_process, signal_group
from slogate.slo.gate import exitcodes

POLL_S = 0.2  # how often a worker looks for its master
MASTER_GONE_S = 60.0  # a master writes its report after its workers quit: at most this long
STOP_GRACE_S = 10.0  # a Locust worker's processes quit within this of a signal, or are killed
# A Locust worker that fails (exit != 0) sooner than this was given a bad option or locustfile;
# later, without a master, it gave up waiting for one (Locust 2.47: ~61 tries 5 s apart, exit 255).
FAILED_START_S = 5.0


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
    """A Locust worker for each run of the master at `master_host`:`master_port`, until SIGTERM or
    SIGINT (passed on to the worker's process group, `--processes` included), or until no master
    has listened there for `idle_s`. Locust's workers exit when their master's run ends, so one is
    started again after each run, once that master is gone (a worker that met the master on its
    way out would never be counted by the next one), and again when it gave up waiting for a master.
    A line per run ended (`say`). Exit code: 0 after at least one run, or on a signal; SETUP_FAILED
    when no master came, or the Locust worker failed on its own (a bad option, a locustfile that
    does not load: its output says why)."""
    argv = worker_argv(master_host, master_port, locustfile=locustfile, extra=extra)
    where, runs, seen = f"{master_host}:{master_port}", 0, time.monotonic()
    say(f"slogate worker: for the master at {where} (stops after {idle_s:g} s without one)")
    with Forwarder() as forwarder:
        while not forwarder.signals:
            child = forwarder.child = subprocess.Popen(
                argv, start_new_session=True, preexec_fn=dies_with_this_process()
            )
            started, met = time.monotonic(), False
            while child.poll() is None:
                if forwarder.signals:  # one that came before this child was started reaches it too
                    end_group(child, forwarder.signals[-1])
                    return exitcodes.PASS
                if listening(master_host, master_port):
                    seen, met = time.monotonic(), True
                elif time.monotonic() - seen > idle_s:
                    say(f"slogate worker: no master at {where} for {idle_s:g} s: done after {runs} run(s)")
                    end_group(child, signal.SIGTERM)
                    return exitcodes.PASS if runs else exitcodes.SETUP_FAILED
                time.sleep(POLL_S)
            code, took = child.returncode, time.monotonic() - started
            end_group(child, signal.SIGTERM)  # what the worker forked, should any be left
            forwarder.child = None
            if forwarder.signals:
                return exitcodes.PASS
            if took < FAILED_START_S and (code != 0 or not met):
                say(f"slogate worker: the Locust worker failed after {took:.1f} s (exit {code}): see its output above")
                return exitcodes.SETUP_FAILED
            if not met:  # it gave up waiting: another waits on, until the idle timeout
                continue
            gone = _wait_until(lambda: not listening(master_host, master_port), MASTER_GONE_S)
            if not gone:
                say(f"slogate worker: the Locust worker ended (exit {code}) while the master goes on: see above")
                return exitcodes.SETUP_FAILED
            runs, seen = runs + 1, time.monotonic()
            say(f"slogate worker: run {runs} ended after {took:.1f} s (Locust exit {code}); waiting for the next")
    return exitcodes.PASS


def end_group(child: subprocess.Popen[bytes], signum: int) -> None:
    """Send `signum` to `child`'s process group and wait for all of it, `STOP_GRACE_S` at most, then
    kill what is left: no forked Locust process outlives `slogate worker`."""
    signal_group(child, signum)
    if not _wait_until(lambda: not _group_alive(child), STOP_GRACE_S):
        signal_group(child, signal.SIGKILL)
    child.wait()


def _group_alive(child: subprocess.Popen[bytes]) -> bool:
    if child.poll() is None:
        return True
    try:
        os.killpg(child.pid, 0)  # no signal: whether any process of the group is left
    except ProcessLookupError:
        return False
    return True


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True
