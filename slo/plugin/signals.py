"""How a run ends on a signal: SIGTERM (a cancelled CI job, `timeout`, an evicted pod) or Ctrl-C.
The master or single process records it (`watch_signals`) and stops the load before it is judged
(`finish_load_on_signal`); a worker ships its last samples before it quits
(`ship_last_samples_before_quitting`); a second SIGTERM or Ctrl-C to the master, or Ctrl-C to a worker,
exits at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import greenlet
from locust.runners import STATE_CLEANUP, STATE_INIT, STATE_STOPPED, STATE_STOPPING
from slogate.slo.gate.journal import JOURNAL_NAME
from slogate.slo.gate.report import JSON_NAME
from slogate.slo.plugin.control import stop_workers
from slogate.slo.plugin.gate import Gate
from slogate.slo.plugin.journal import flush_journal

log = logging.getLogger("slogate")
INTERRUPT_EXITS = {"SIGTERM": 128 + signal.SIGTERM, "SIGINT": 128 + signal.SIGINT}  # 143, 130: as shells say


def watch_signals(gate: Gate) -> None:
    """SIGTERM (a cancelled CI job, `timeout`, an evicted pod) or SIGINT (Ctrl-C) before the run's
    end: recorded, so the report says the run was interrupted (inconclusive, or a fail already
    certain; slo/gate/judge.py) while Locust shuts down as it always does and writes it. A Ctrl-C
    while Locust writes the report of a run that has ended lets it finish. A second signal ends
    the process at once (exit 143 or 130, as shells expect).

    SIGTERM: a gevent watcher, run before Locust's own (registered after this one). SIGINT: a
    Python handler in place of the default one, raising the KeyboardInterrupt Locust shuts down on
    in the main greenlet, where Locust waits for the run (a gevent watcher would replace that)."""
    signalled_while_writing = False  # a signal came while the report of an ended run was written

    def interrupted(name: str) -> bool:
        """Record the signal; True when Locust is to shut down on it, False when it already does."""
        nonlocal signalled_while_writing
        run = gate.run
        if run.signal is not None or signalled_while_writing:
            with contextlib.suppress(Exception):  # whatever happens, the process exits now
                flush_journal(gate, block=True)
            sys.stderr.write(f"slogate: second {name}: exiting now; {what_is_left(gate)}\n")
            os._exit(INTERRUPT_EXITS[name])
        if run.judged:
            signalled_while_writing = True
            log.warning("slogate: %s: the run has ended; writing its report (a second %s exits now)", name, name)
            return False
        if run.started_at is not None:
            run.interrupt(name)
            log.warning("slogate: %s: the run is interrupted; writing the report (a second %s exits now)", name, name)
        return True

    gevent.signal_handler(signal.SIGTERM, interrupted, "SIGTERM")
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        if not interrupted("SIGINT"):
            return
        if previous is not signal.default_int_handler:
            if callable(previous):
                previous(signum, frame)
            return
        # Not where Locust already writes the report of a run that has ended.
        keyboard_interrupt_in_main(lambda: not gate.run.judged)

    signal.signal(signal.SIGINT, on_sigint)


def keyboard_interrupt_in_main(still_wanted: Callable[[], bool]) -> None:
    """Raise the KeyboardInterrupt Locust shuts down on in the main greenlet, where Locust waits for
    the run. A signal lands in whichever greenlet runs (the hub, a user's): raised there, it kills
    that greenlet with a printed traceback (a user's request in flight neither counted nor left
    unfinished) before gevent passes it on. From the hub's loop, if `still_wanted()` then."""
    hub = gevent.get_hub()
    main = hub.parent
    if greenlet.getcurrent() is main:
        raise KeyboardInterrupt

    def interrupt_main() -> None:
        if still_wanted():
            main.throw(KeyboardInterrupt)

    hub.loop.run_callback(interrupt_main)


def route_workers_ctrl_c(events: Any) -> None:
    """A worker's Ctrl-C (a terminal sends it to the whole process group): Locust's shutdown from the
    main greenlet, as on the master (`keyboard_interrupt_in_main`), unless it shuts down already (its
    master's quit, a SIGTERM: a KeyboardInterrupt would cut that short); a second one exits at once
    (130). `events`: Locust's, whose `quitting` says the shutdown has begun."""
    pressed = quitting = False

    def on_quitting(**_: Any) -> None:
        nonlocal quitting
        quitting = True

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal pressed
        if pressed:
            os._exit(INTERRUPT_EXITS["SIGINT"])
        pressed = True
        if not quitting:
            keyboard_interrupt_in_main(lambda: not quitting)

    events.quitting.add_listener(on_quitting)
    signal.signal(signal.SIGINT, on_sigint)


def what_is_left(gate: Gate) -> str:
    """At a second signal: where the run's figures are, as they are on disk now (the reports of an
    ended run may be written and its journal removed already, or the journal never written)."""
    report_dir = gate.reports.report_dir
    if report_dir and (Path(report_dir) / JOURNAL_NAME).is_file():
        return f"`slogate judge {report_dir}` judges the run's journal"
    if report_dir and gate.run.judged and (Path(report_dir) / JSON_NAME).is_file():
        return f"the reports are in {report_dir}/"
    return "no journal of the run could be written: nothing is left to judge"


FINISH_MARGIN_S = 10.0  # beyond --stop-timeout: the workers' stop and their last reports


def finish_load_on_signal(gate: Gate) -> None:
    """At `quitting` on a signal (a headless run interrupted), stop the load before the run is
    judged: Locust judges first and stops after, and a master's own `quitting` listener gives its
    workers 0.5 s to send their last samples (a loaded machine's workers missed that: CI, 2026-12-07).
    Every worker sends its last samples, every request in flight ends within --stop-timeout or is
    recorded as unfinished (unless a stop was under way already: then Locust's quit follows at once).
    Bounded by about --stop-timeout plus a margin; a second signal ends the wait at once. Listening
    from `init` on, after the master's listener, it runs before it (Locust fires `quitting` in
    reverse)."""
    runner = gate.environment.runner
    if gate.run.signal is None or runner is None or runner.state in (STATE_INIT, STATE_STOPPED):
        return
    timeout_s = gate.run_options.stop_timeout_s + FINISH_MARGIN_S
    if gate.is_master:
        stop_workers(runner, timeout_s)
        return
    with gevent.Timeout(timeout_s, False):
        runner.stop()


# How long a worker quitting on a signal waits for its master's "stop": a signal to the process group
# reaches the master too, whose "stop" follows at once. Not longer: a worker signalled alone (`slogate
# worker`'s, whose master is elsewhere) stops itself after it, within that command's grace. A stop that
# comes later still (a master stalled) finds the users stopping, and its `test_stop` ships nothing twice.
MASTERS_STOP_WAIT_S = 0.5
STOP_BEGUN = (STATE_CLEANUP, STATE_STOPPING, STATE_STOPPED)  # a stop under way or done


def ship_last_samples_before_quitting(gate: Gate) -> None:
    """At a worker's `quitting` (a signal: to the process group, as a terminal's Ctrl-C and `slogate
    run` send it, or to the worker alone), its last samples go to the master first: Locust's own
    listener, which runs next, tells the master this worker quit, and the master drops what comes
    after (both workers' samples were lost so). The master, signalled too, sends "stop", and a
    worker stopping itself at the same moment would stop its users twice: it waits for that stop
    (`MASTERS_STOP_WAIT_S`), stopping itself only where none comes. Then it waits for its
    `test_stop` to ship them: --stop-timeout plus a margin at most."""
    runner, run = gate.environment.runner, gate.run
    if runner is None or run.started_at is None or run.shipped_last_samples:
        return
    with gevent.Timeout(MASTERS_STOP_WAIT_S, False):
        while runner.state not in STOP_BEGUN:
            gevent.sleep(0.05)
    with gevent.Timeout((gate.environment.stop_timeout or 0) + FINISH_MARGIN_S, False):
        if runner.state not in STOP_BEGUN:
            runner.stop()
        while not run.shipped_last_samples:  # shipped in its `test_stop`, in whichever greenlet stopped it
            gevent.sleep(0.05)
